package heapscope

import (
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/internal/errs"
	"github.com/heapscope/heapscope/internal/inject"
	"github.com/heapscope/heapscope/internal/launch"
	"github.com/heapscope/heapscope/internal/preload"
)

// preloadBackend drives the preload provider: for a program it launches
// (LD_PRELOAD), or for running processes it injects the interposer into
// (heapscope attach --inject, internal/inject).
type preloadBackend struct {
	c    *preload.Collector
	hold bool // a launched program starts stopped, for a leak check at its exit

	mu       sync.Mutex
	child    int
	injected map[int]int // attached pid → its pidfd
	closing  bool
	attached bool // attach sessions end when no injected process is left
	doneCh   chan struct{}
	once     sync.Once
	watchers sync.WaitGroup
}

func newPreload(s *Session) (backend, error) {
	size := min(max(s.props.ringBytes(), preload.MinBufferSize), preload.MaxBufferSize)
	c, err := preload.New(preload.Config{
		Families:      s.props.Families,
		Stacks:        s.stacks,
		Unwind:        s.props.Unwind,
		MaxFrames:     s.props.MaxFrames,
		BufferSize:    size,
		OnFull:        s.props.OnFull,
		FlushInterval: s.props.FlushInterval,
		SampleRate:    int64(s.props.Sample),
		SampleSeed:    sampleSeed(),
		EmitUSDT:      s.props.EmitUSDT,
	}, s.sink)
	if err != nil {
		return nil, err
	}
	return &preloadBackend{c: c, doneCh: make(chan struct{}), hold: s.props.checksAtExit(), injected: map[int]int{}, attached: !s.launched}, nil
}

// attach injects the interposer into the running process pid and starts
// its tracing (see internal/inject): GOT entries redirected, events as for
// a launched program. The processes it forks are not traced.
func (b *preloadBackend) attach(pid int) error {
	b.mu.Lock()
	closing, have := b.closing, b.injected[pid] != 0
	b.mu.Unlock()
	if closing {
		return fmt.Errorf("pid %d: the session is ending: %w", pid, errs.ErrNotRunning)
	}
	if have {
		return nil
	}
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return fmt.Errorf("pid %d: %w", pid, errs.ErrNoSuchProcess)
	}
	if _, err := inject.Inject(pid, inject.Options{Serve: b.c.Serve}); err != nil {
		unix.Close(fd)
		return fmt.Errorf("attach --inject: %w", err)
	}
	b.mu.Lock()
	b.injected[pid] = fd
	b.mu.Unlock()
	b.watchers.Add(1)
	go b.watch(pid, fd)
	return nil
}

// watch waits for an injected process to exit (or be detached); the
// session of an attach ends with its last process.
func (b *preloadBackend) watch(pid, fd int) {
	defer b.watchers.Done()
	for {
		b.mu.Lock()
		cur := b.injected[pid]
		b.mu.Unlock()
		if cur != fd {
			return // detached; its descriptor is closed
		}
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		if n, err := unix.Poll(fds, 100); err == nil && n > 0 {
			break
		}
	}
	b.mu.Lock()
	if b.injected[pid] == fd {
		delete(b.injected, pid)
		unix.Close(fd)
	}
	last := len(b.injected) == 0 && b.attached && !b.closing
	b.mu.Unlock()
	if last {
		b.once.Do(func() { close(b.doneCh) })
	}
}

// detach ends the tracing of one injected process: its entries go back,
// and its stream ends while it runs on.
func (b *preloadBackend) detach(pid int) error {
	b.mu.Lock()
	fd := b.injected[pid]
	if fd != 0 {
		delete(b.injected, pid)
		unix.Close(fd)
	}
	b.mu.Unlock()
	if fd == 0 {
		return fmt.Errorf("pid %d is not traced by this session: %w", pid, errs.ErrInvalidFlags)
	}
	_, err := inject.Eject(pid, inject.Options{})
	b.c.Detached(pid)
	if err != nil && !errors.Is(err, errs.ErrNoSuchProcess) {
		return fmt.Errorf("pid %d: stopping its tracing: %w", pid, err)
	}
	return nil
}

func (b *preloadBackend) launch(cmd *exec.Cmd) error {
	if err := b.c.Prepare(cmd); err != nil {
		return err
	}
	start := cmd.Start
	if b.hold {
		// Held stopped before its first instruction, for a leak check's
		// watch to seize (see Session.watchExit).
		start = func() error { return launch.StartStopped(cmd, func(int) error { return nil }) }
	}
	if err := start(); err != nil {
		return err
	}
	b.mu.Lock()
	b.child = cmd.Process.Pid
	b.mu.Unlock()
	return nil
}

// exited records the launched program's exit. The session goes on while
// traced processes it left behind still run, as heaptrack's does: a
// daemon's parent exits at once and leaves the process worth tracing. A
// process is known once it has connected, at its start, or at its first
// allocation after a fork; descendantGrace covers one started just before
// the exit that has not connected yet.
func (b *preloadBackend) exited(pid, status, sig int) {
	b.c.Exited(pid, status, sig)
	go func() {
		quiet := time.Now()
		for time.Since(quiet) < descendantGrace {
			time.Sleep(descendantPoll)
			if b.c.Live() > 0 {
				quiet = time.Now()
			}
		}
		b.once.Do(func() { close(b.doneCh) })
	}()
}

const (
	descendantGrace = 50 * time.Millisecond
	descendantPoll  = 5 * time.Millisecond
)

func (b *preloadBackend) pids() []int {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []int
	for pid := range b.injected {
		out = append(out, pid)
	}
	slices.Sort(out)
	if b.child == 0 {
		return out
	}
	select {
	case <-b.doneCh:
		return out
	default:
		return append(out, b.child)
	}
}

func (b *preloadBackend) setStacks(k event.KindSet) error {
	return b.c.SetStacks(k)
}

func (b *preloadBackend) flush() error { return b.c.Flush() }
func (b *preloadBackend) flushProcess(pid int) error {
	return b.c.FlushProcess(pid)
}
func (b *preloadBackend) stats() event.Stats { return b.c.Stats() }

// close ends the session: every injected process has its entries put back
// (the collector still draining meanwhile: a thread that waits for room in
// its ring gets it), then the collector delivers the rest.
func (b *preloadBackend) close() error {
	b.mu.Lock()
	b.closing = true
	pids := make([]int, 0, len(b.injected))
	for pid, fd := range b.injected {
		pids = append(pids, pid)
		unix.Close(fd)
	}
	b.injected = map[int]int{}
	b.mu.Unlock()
	var wg sync.WaitGroup
	errList := make([]error, len(pids))
	for i, pid := range pids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := inject.Eject(pid, inject.Options{}); err != nil && !errors.Is(err, errs.ErrNoSuchProcess) {
				errList[i] = fmt.Errorf("pid %d: stopping its tracing: %w", pid, err)
			}
			b.c.Detached(pid)
		}()
	}
	wg.Wait()
	b.watchers.Wait()
	errList = append(errList, b.c.Close())
	return errors.Join(errList...)
}
func (b *preloadBackend) done() <-chan struct{} { return b.doneCh }
