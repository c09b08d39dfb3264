package stopped

import (
	"os"
	"runtime"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// tracer is a goroutine locked to an OS thread of its own, which makes every
// ptrace request of one Process: the kernel answers ptrace requests only from
// the thread that attached (the tracer is a thread, not a process). The
// goroutine ends without unlocking, so its thread exits with it, and the
// kernel detaches whatever that thread still traced (exit_ptrace): a thread
// that never reached its stop, or one a failed detach left behind.
type tracer struct {
	reqs chan func()
	done chan struct{}
	tid  int
}

func startTracer() *tracer {
	t := &tracer{reqs: make(chan func()), done: make(chan struct{})}
	ready := make(chan struct{})
	go t.run(ready)
	<-ready
	return t
}

func (t *tracer) run(ready chan struct{}) {
	runtime.LockOSThread()
	if unix.Gettid() == unix.Getpid() {
		// The main thread never exits (the runtime wedges it instead), so
		// it cannot be a tracer: start again on another thread, which
		// cannot be this one while it is held.
		go t.run(ready)
		<-ready
		runtime.UnlockOSThread()
		return
	}
	t.tid = unix.Gettid()
	close(ready)
	for f := range t.reqs {
		f()
	}
	close(t.done)
	// Return still locked: the thread exits.
}

// do runs f on the tracer's thread and waits for it. A panic in f is
// raised again in the caller, whose deferred Resume then runs (a panic on
// the tracer's goroutine would end the program before anything resumed
// the target; the kernel would then, but not the caller's cleanup).
func (t *tracer) do(f func()) {
	fin := make(chan any, 1)
	t.reqs <- func() {
		defer func() { fin <- recover() }()
		f()
	}
	if r := <-fin; r != nil {
		panic(r)
	}
}

// stop ends the tracer and, when wait is set, waits (up to a second) until its
// thread has exited and so released every tracee it still had.
func (t *tracer) stop(wait bool) {
	close(t.reqs)
	<-t.done
	if !wait {
		return
	}
	task := "/proc/self/task/" + strconv.Itoa(t.tid)
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Microsecond) {
		if _, err := os.Stat(task); err != nil {
			return
		}
	}
}
