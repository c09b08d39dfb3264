package stopped

import (
	"os"
	"runtime"
	"strconv"
	"strings"
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
	// idle, when set, runs on the tracer's thread whenever no request
	// came for as long as it last asked, or wake fired (a Watch polls for
	// its tracees' stops there, woken by SIGCHLD).
	idle func() time.Duration
	wake <-chan os.Signal
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
	if unix.Gettid() == unix.Getpid() || t.idle != nil && hasChildren(unix.Gettid()) {
		// The main thread never exits (the runtime wedges it instead), so
		// it cannot be a tracer; nor, for an idle tracer, which waits for
		// any of its tracees (P_ALL), a thread that forked children. Start
		// again on another thread, which cannot be this one while it is
		// held.
		go t.run(ready)
		<-ready
		runtime.UnlockOSThread()
		return
	}
	t.tid = unix.Gettid()
	close(ready)
	if t.idle == nil {
		for f := range t.reqs {
			f()
		}
	} else {
		t.serve()
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
	t.waitGone()
}

// waitGone waits (up to a second) until the tracer's thread has exited, once
// its loop has ended.
func (t *tracer) waitGone() {
	task := "/proc/self/task/" + strconv.Itoa(t.tid)
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Microsecond) {
		if _, err := os.Stat(task); err != nil {
			return
		}
	}
}

// startIdleTracer starts a tracer that calls idle between requests, and
// whenever wake fires.
func startIdleTracer(idle func() time.Duration, wake <-chan os.Signal) *tracer {
	t := &tracer{reqs: make(chan func()), done: make(chan struct{}), idle: idle, wake: wake}
	ready := make(chan struct{})
	go t.run(ready)
	<-ready
	return t
}

// serve runs requests, and idle whenever none came for as long as idle
// last asked or wake fired, until idle asks for a negative time.
func (t *tracer) serve() {
	nap := t.idle()
	if nap < 0 {
		return
	}
	timer := time.NewTimer(nap)
	defer timer.Stop()
	for {
		select {
		case f := <-t.reqs:
			f()
		case <-t.wake:
		case <-timer.C:
		}
		nap := t.idle()
		if nap < 0 {
			return
		}
		timer.Reset(nap)
	}
}

// try runs f on the tracer's thread, as do does, unless the tracer has
// ended: then it reports false.
func (t *tracer) try(f func()) bool {
	fin := make(chan any, 1)
	req := func() {
		defer func() { fin <- recover() }()
		f()
	}
	select {
	case t.reqs <- req:
	case <-t.done:
		return false
	}
	if r := <-fin; r != nil {
		panic(r)
	}
	return true
}

// hasChildren reports whether thread tid of this process forked
// processes that are still its children (false when the kernel does not
// say: /proc/PID/task/TID/children needs CONFIG_PROC_CHILDREN).
func hasChildren(tid int) bool {
	b, err := os.ReadFile("/proc/self/task/" + strconv.Itoa(tid) + "/children")
	return err == nil && len(strings.TrimSpace(string(b))) > 0
}
