package ebpf

import (
	"errors"
	"fmt"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// watcher notices traced processes exiting: one goroutine waits with epoll
// on their pidfds, which become readable when the whole thread group has
// exited (unlike kill(pid, 0), which succeeds on zombies).
type watcher struct {
	t      *Tracer
	epfd   int
	wake   int // eventfd: stop
	mu     sync.Mutex
	byFD   map[int32]*tracee
	closed bool
	done   chan struct{}
}

func newWatcher(t *Tracer) (*watcher, error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("ebpf: epoll: %w", err)
	}
	wake, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		unix.Close(epfd)
		return nil, fmt.Errorf("ebpf: eventfd: %w", err)
	}
	if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, wake, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(wake)}); err != nil {
		unix.Close(epfd)
		unix.Close(wake)
		return nil, fmt.Errorf("ebpf: epoll: %w", err)
	}
	w := &watcher{t: t, epfd: epfd, wake: wake, byFD: map[int32]*tracee{}, done: make(chan struct{})}
	go w.run()
	return w, nil
}

func (w *watcher) add(p *tracee) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return errClosed
	}
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(p.pidfd)}
	if err := unix.EpollCtl(w.epfd, unix.EPOLL_CTL_ADD, p.pidfd, &ev); err != nil {
		return fmt.Errorf("ebpf: watching pid %d: %w", p.pid, err)
	}
	w.byFD[int32(p.pidfd)] = p
	return nil
}

func (w *watcher) remove(p *tracee) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.byFD[int32(p.pidfd)] == p {
		delete(w.byFD, int32(p.pidfd))
		if !w.closed {
			unix.EpollCtl(w.epfd, unix.EPOLL_CTL_DEL, p.pidfd, nil)
		}
	}
}

func (w *watcher) run() {
	defer close(w.done)
	events := make([]unix.EpollEvent, 16)
	for {
		n, err := unix.EpollWait(w.epfd, events, -1)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return
		}
		for _, ev := range events[:n] {
			if ev.Fd == int32(w.wake) {
				return
			}
			w.mu.Lock()
			p := w.byFD[ev.Fd]
			if p != nil {
				delete(w.byFD, ev.Fd)
				unix.EpollCtl(w.epfd, unix.EPOLL_CTL_DEL, int(ev.Fd), nil)
				// Counted before close can wait for it: close takes mu.
				w.t.ending.Add(1)
			}
			w.mu.Unlock()
			if p != nil {
				go func() {
					defer w.t.ending.Done()
					w.t.end(p, true)
				}()
			}
		}
	}
}

// close stops the watcher; exits already noticed are still being handled
// (Tracer.ending).
func (w *watcher) close() {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return
	}
	w.closed = true
	w.mu.Unlock()
	var one = [8]byte{1}
	unix.Write(w.wake, one[:])
	<-w.done
	unix.Close(w.epfd)
	unix.Close(w.wake)
}

// childStatus returns how the process behind pidfd ended, when it is a
// child of this process not yet reaped; it does not reap it.
func childStatus(pidfd int) (exitStatus, bool) {
	var info unix.Siginfo
	const pPIDFD = 3 // P_PIDFD
	if err := unix.Waitid(pPIDFD, pidfd, &info, unix.WEXITED|unix.WNOWAIT|unix.WNOHANG, nil); err != nil {
		return exitStatus{}, false
	}
	// siginfo_t for SIGCHLD: si_pid at 16, si_uid at 20, si_status at 24.
	raw := (*[128]byte)(unsafe.Pointer(&info))
	pid := *(*int32)(unsafe.Pointer(&raw[16]))
	status := *(*int32)(unsafe.Pointer(&raw[24]))
	if pid == 0 {
		return exitStatus{}, false // WNOHANG and not yet waitable
	}
	switch info.Code {
	case 1: // CLD_EXITED
		return exitStatus{status: status}, true
	case 2, 3: // CLD_KILLED, CLD_DUMPED
		return exitStatus{status: 128 + status, signal: status}, true
	}
	return exitStatus{}, false
}
