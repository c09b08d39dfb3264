package stopped

import (
	"os"
	"strconv"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Following. A Watch with WatchOptions.Follow sets PTRACE_O_TRACEFORK and
// PTRACE_O_TRACEVFORK on its threads: the kernel attaches each child they
// fork to the watch's tracer before the child runs (its first report is a
// PTRACE_EVENT_STOP), and the child inherits the options, so its own
// children are watched in turn. The BPF side holds a followed child (at its
// fork, its exec, its loader's new objects) with a SIGSTOP until its probes
// are placed; untraced, that is a group stop, which the kernel reports to
// a parent that waits with WUNTRACED (an interactive shell then says the
// command "Stopped"). Watched, the SIGSTOP is a signal-delivery stop, a
// ptrace stop only the tracer sees: the watch keeps the thread there while
// WatchOptions.Held says the process is held, and drops the signal when
// Release ends the hold.
//
// The package's Stop and Release find the watch of a process in registry.

// registry maps each watched or followed process to its watch.
var registry struct {
	mu sync.Mutex
	m  map[int]*Watch
}

// register records that w traces process pid; false when another watch
// does.
func register(pid int, w *Watch) bool {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	if registry.m == nil {
		registry.m = map[int]*Watch{}
	}
	if o := registry.m[pid]; o != nil && o != w {
		return false
	}
	registry.m[pid] = w
	return true
}

// watchOf returns the watch that traces process pid, nil for none.
func watchOf(pid int) *Watch {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	return registry.m[pid]
}

// forget ends what the watch knows of process pid, which has ended.
func (w *Watch) forget(pid int) {
	for _, unlist := range w.due[pid] {
		unlist() // ended: its holds with it
	}
	delete(w.due, pid)
	registry.mu.Lock()
	defer registry.mu.Unlock()
	if registry.m[pid] == w {
		delete(registry.m, pid)
	}
}

// unregisterAll takes every process of w out of the registry.
func (w *Watch) unregisterAll() {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	for pid, o := range registry.m {
		if o == w {
			delete(registry.m, pid)
		}
	}
}

// add records thread tid of process pid, on the tracer's thread.
func (w *Watch) add(tid, pid int) *wthread {
	t := &wthread{tid: tid, pid: pid}
	w.ts[tid] = t
	if pid != w.pid {
		register(pid, w)
	}
	return t
}

// processOf returns the process of a thread the watch has not seen yet:
// the watched process's, or (following) the one /proc names.
func (w *Watch) processOf(tid int) int {
	if !w.opt.Follow {
		return w.pid
	}
	if pid, err := threadGroup(tid); err == nil {
		return pid
	}
	return tid // gone: it reports its exit next
}

// siKernel is si_code SI_KERNEL: a signal the kernel sent, as
// bpf_send_signal does, not a process.
const siKernel = 0x80

// holds decides about a SIGSTOP that thread t takes, on the tracer's
// thread: it reports whether the thread stays in this stop, the signal
// dropped (a hold, or a hold that Release ended before it came).
func (w *Watch) holds(t *wthread) bool {
	if w.opt.Held == nil {
		return false
	}
	var si unix.Siginfo
	if ptrace(unix.PTRACE_GETSIGINFO, t.tid, 0, uintptr(unsafe.Pointer(&si))) != nil || si.Code != siKernel {
		return false
	}
	if d := w.due[t.pid]; len(d) > 0 {
		w.due[t.pid] = d[1:]
		d[0]() // unlisted only now, the process about to run
		t.sig = 0
		if w.stopping != t.pid {
			w.goOn(t)
		}
		return true
	}
	if !w.opt.Held(t.pid) {
		return false
	}
	t.hold = true
	return true
}

// Release ends the holds (WatchOptions.Held) of process pid: its threads
// held go on, the SIGSTOP dropped, and a hold whose stop has not come yet
// ends when it comes. unlist, if not nil, runs on the watch's thread before
// the held thread goes on (when its stop comes, for a hold to come; at
// once if the process ends or the watch closes): a caller that lists its holds for Held unlists pid
// there, so that a hold that comes once the process runs again, listed
// anew, is one Held sees. Release reports whether a watch of this program
// traces pid (if not, unlist did not run, and a hold of pid is a group
// stop, which SIGCONT ends).
func Release(pid int, unlist func()) bool {
	w := tracing(pid)
	if w == nil {
		return false
	}
	ok := false
	w.tr.try(func() { ok = w.release1(pid, unlist) })
	return ok
}

// tracing returns the watch that traces process pid, nil for none: the
// one registered, or for a child the kernel attached to a watch whose
// tracer has not yet seen it, its parent's (it is traced by this program).
func tracing(pid int) *Watch {
	if w := watchOf(pid); w != nil {
		return w
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return nil
	}
	// TracerPid is the tracer's thread.
	st := parseStatus(b)
	if st.tracer == 0 {
		return nil
	}
	if _, err := os.Stat("/proc/self/task/" + strconv.Itoa(st.tracer)); err != nil {
		return nil
	}
	return watchOf(st.ppid)
}

// release1 is Release, on the tracer's thread.
func (w *Watch) release1(pid int, unlist func()) bool {
	if w.ended {
		return false
	}
	if unlist == nil {
		unlist = func() {}
	}
	var held []*wthread
	for _, t := range w.ts {
		if t.pid == pid && t.hold {
			held = append(held, t)
		}
	}
	if len(held) == 0 {
		// Unlisted when the stop comes and is ended: until then a
		// heapscope killed leaves the SIGSTOP to come to the watchdog.
		w.due[pid] = append(w.due[pid], unlist)
		if pid != w.pid {
			register(pid, w)
		}
		return true
	}
	unlist()
	for _, t := range held {
		t.hold = false
		if w.stopping != pid {
			w.goOn(t)
		}
	}
	return true
}

// endHolds lets every held thread go on, the SIGSTOP dropped, on the
// tracer's thread, as the watch ends (a thread still in its
// signal-delivery stop when the tracer's thread exits would take the
// SIGSTOP, a group stop). It first takes in the stops reported already: a
// hold whose stop the kernel has reported is one it ends. It returns the
// processes whose hold was released before its stop came, which the
// caller continues once they are untraced.
func (w *Watch) endHolds() map[int][]func() {
	w.reap()
	for _, t := range w.ts {
		if t.hold {
			t.hold = false
			w.goOn(t)
		}
	}
	due := w.due
	w.due = map[int][]func(){}
	return due
}

// ends keeps how the processes watches saw end ended, at most maxEnds: the
// parent of a followed process reaps it, not the watch, and the tracer that
// asks (the eBPF provider, for its Exit record) would otherwise never know.
var ends struct {
	mu sync.Mutex
	m  map[int]ending
}

type ending struct{ status, signal int }

const maxEnds = 4096

// recordEnd keeps the end of process pid that si (a waitid report) says.
func recordEnd(pid int, si *unix.Siginfo) {
	_, code := childInfo(si)
	e := ending{status: code}
	if si.Code != cldExited {
		e = ending{status: 128 + code, signal: code}
	}
	ends.mu.Lock()
	defer ends.mu.Unlock()
	if ends.m == nil {
		ends.m = map[int]ending{}
	}
	for k := range ends.m {
		if len(ends.m) < maxEnds {
			break
		}
		delete(ends.m, k) // one nobody asked about (Ended takes each)
	}
	ends.m[pid] = e
}

// Ended returns how process pid ended, as a watch of this program saw it
// end, once: status is its exit code, or 128+signal with signal the one
// that killed it. A process a watch traces still (its end not yet taken
// in) is waited for, up to wait. ok is false for a process no watch saw
// end (or one asked about already: its pid may be another process's now).
func Ended(pid int, wait time.Duration) (status, signal int, ok bool) {
	take := func() (ending, bool) {
		ends.mu.Lock()
		defer ends.mu.Unlock()
		e, ok := ends.m[pid]
		delete(ends.m, pid)
		return e, ok
	}
	for deadline := time.Now().Add(wait); ; time.Sleep(time.Millisecond) {
		if e, ok := take(); ok {
			return e.status, e.signal, true
		}
		if watchOf(pid) == nil || time.Now().After(deadline) {
			// (A watch records an end before it forgets the process.)
			if e, ok := take(); ok {
				return e.status, e.signal, true
			}
			return 0, 0, false
		}
	}
}
