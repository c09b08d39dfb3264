package stopped

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/heapscope/heapscope/internal/errs"
	"github.com/heapscope/heapscope/internal/proc"
)

// A Watch keeps every thread of a process seized (PTRACE_SEIZE, with
// PTRACE_O_TRACECLONE so that new threads are too) from Seize until the
// process ends or Close, so that its end can be held: each thread stops on
// its way out (PTRACE_O_TRACEEXIT), after the program's last instruction
// (exit handlers and destructors run, or _exit, or a fatal signal) and
// before the kernel releases its memory. Once every thread has stopped
// there, OnExit is called with the process stopped as it ended: memory,
// registers, mappings. The process ends when that Process is resumed.
//
// While it runs, the watched process pays a round trip to heapscope for
// each signal it is sent (the kernel stops the thread that takes it, and
// the watch hands the signal back), each thread it creates, and each exec;
// nothing per instruction or allocation. Job control is kept: a stop
// signal stops it as it would untraced (PTRACE_LISTEN), and SIGCONT lets it
// go on. The watch's thread waits for those stops woken by the SIGCHLD
// each sends (it asks the os/signal package for SIGCHLD while it runs),
// and polls at most every 50 ms besides.
//
// Watch.Stop stops the running process for a scan, as Stop does for a
// process not watched (a process can have one tracer only; the package's
// Stop of a watched process goes through its watch). When heapscope dies,
// the kernel detaches every thread, which runs on untraced; the process is
// also released if Close is called.
//
// With WatchOptions.Follow, the processes it forks are watched too, from
// before their first instruction, and theirs in turn (see follow.go).
type Watch struct {
	pid int
	opt WatchOptions
	tr  *tracer

	// The tracer's thread alone touches what follows.
	ts       map[int]*wthread
	nap      time.Duration
	stopping int       // the process a Stop is stopping or holds, 0 for none
	exitAt   time.Time // the first thread of a group exit stopped then
	held     *Process  // the stop that holds the threads, if any
	ended    bool
	// rootGone: the process Seize named has ended while processes it
	// followed live on, still watched (see outlives).
	rootGone bool
	// ours: the watched process is this program's child (see outlives).
	ours bool
	// due lists, per process, the releases of holds (Release) that came
	// before the hold's stop did, each with its unlist.
	due map[int][]func()

	done      chan struct{}
	closeOnce sync.Once
	sigchld   chan os.Signal
}

// WatchOptions tune a Watch.
type WatchOptions struct {
	// OnExit is called, on a goroutine of its own, with the process
	// stopped at its end; the process ends when that Process is resumed
	// (after OnExit returns, if it does not). Nil: nothing is held.
	OnExit func(*Process)
	// ExitTimeout bounds the wait, once a thread stopped on its way out
	// of a group exit, for the others to (DefaultTimeout when 0): a
	// thread that does not (stuck in the kernel) is missing from the
	// Process OnExit gets, which says so (Process.Missing).
	ExitTimeout time.Duration
	// ExitMaxPause bounds how long the end is held (DefaultExitMaxPause
	// when 0): OnExit's Process is resumed by itself after it.
	ExitMaxPause time.Duration
	// Follow watches the processes a watched process forks (fork, vfork,
	// or a clone that makes a process), each from before its first
	// instruction, as the watched process is; Stop of one of them goes
	// through the watch. The watch outlives the process Seize named while
	// processes it followed live (a daemon's double fork, a shell's job
	// left running), unless that process is this program's child: then
	// it ends with it.
	Follow bool
	// Held, with Follow, is asked about each SIGSTOP a watched thread
	// takes that no process sent (si_code SI_KERNEL: one the BPF side
	// sent to hold it): true keeps the thread in that stop, the signal
	// dropped, until Release. A parent waiting with WUNTRACED (a shell
	// with job control) does not see such a stop, which a group stop
	// would show it.
	Held func(pid int) bool
}

// DefaultExitMaxPause is WatchOptions.ExitMaxPause's default: a process
// held at its exit waits for a scan, which may first read back a long
// trace.
const DefaultExitMaxPause = 5 * time.Minute

// wthread is a watched thread.
type wthread struct {
	tid int
	pid int // its process (thread group)
	// held: the thread is in a ptrace stop the watch has not ended.
	held bool
	// How to let a held thread go on: its signal to hand back (a
	// signal-delivery stop), or listen (a group stop: PTRACE_LISTEN
	// keeps it stopped until SIGCONT).
	sig    int
	listen bool
	// hold: a stop WatchOptions.Held asked to keep, until Release.
	hold bool
	// exiting: it stopped on its way out (PTRACE_EVENT_EXIT).
	exiting bool
	gone    bool
	// unseen: it ended in a group exit without its exit stop.
	unseen  bool
	regs    unix.PtraceRegs
	hasRegs bool
}

const (
	watchOptions  = unix.PTRACE_O_TRACECLONE | unix.PTRACE_O_TRACEEXIT | unix.PTRACE_O_TRACEEXEC
	followOptions = watchOptions | unix.PTRACE_O_TRACEFORK | unix.PTRACE_O_TRACEVFORK
)

// Seize watches process pid (see Watch). It fails with
// errs.ErrNoSuchProcess when the process is gone, errs.ErrAccessDenied
// without the right to trace it, errs.ErrCannotStop when another tracer
// has it.
func Seize(pid int, opt WatchOptions) (*Watch, error) {
	if opt.ExitTimeout <= 0 {
		opt.ExitTimeout = DefaultTimeout
	}
	if opt.ExitMaxPause == 0 {
		opt.ExitMaxPause = DefaultExitMaxPause
	}
	tgid, err := threadGroup(pid)
	if err != nil {
		return nil, err
	}
	if tgid == os.Getpid() {
		return nil, fmt.Errorf("pid %d is this process: %w", pid, errs.ErrCannotStop)
	}
	w := &Watch{pid: tgid, opt: opt, ts: map[int]*wthread{}, done: make(chan struct{}), nap: minNap, due: map[int][]func(){}}
	if st, err := proc.ReadStat(tgid); err == nil && st.PPID == os.Getpid() {
		w.ours = true
	}
	if !register(tgid, w) {
		return nil, fmt.Errorf("pid %d is watched already: %w", pid, errs.ErrCannotStop)
	}
	// Every ptrace stop of a tracee sends this process SIGCHLD: it wakes
	// the tracer's loop, which would otherwise find the stop only at its
	// next poll (a signal or a thread of the program would wait for it).
	w.sigchld = make(chan os.Signal, 1)
	signal.Notify(w.sigchld, unix.SIGCHLD)
	w.tr = startIdleTracer(w.poll, w.sigchld)
	go func() {
		<-w.tr.done
		signal.Stop(w.sigchld)
	}()
	w.tr.try(func() { err = w.seizeAll() })
	if err != nil {
		w.Close()
		return nil, err
	}
	return w, nil
}

// options are the ptrace options of the watch's threads.
func (w *Watch) options() uintptr {
	if w.opt.Follow {
		return followOptions
	}
	return watchOptions
}

// PID is the process watched.
func (w *Watch) PID() int { return w.pid }

// Done is closed when the watched process has ended, or Close was called.
// (With WatchOptions.Follow, the processes it followed may be watched on
// after it: Close ends that.)
func (w *Watch) Done() <-chan struct{} { return w.done }

// seizeAll seizes every thread, listing them again until none is new:
// once all are seized, the threads they create are too.
func (w *Watch) seizeAll() error {
	for {
		tids, err := listTasks(w.pid)
		if err != nil {
			return err
		}
		added := false
		for _, tid := range tids {
			if w.ts[tid] != nil {
				continue
			}
			err := ptrace(unix.PTRACE_SEIZE, tid, 0, w.options())
			switch {
			case errors.Is(err, unix.ESRCH):
				continue // gone meanwhile
			case errors.Is(err, unix.EPERM):
				p := &Process{pid: w.pid, tr: w.tr}
				t := &thread{tid: tid}
				if err := p.seizeDenied(t); err != nil || t.gone {
					if err != nil {
						return err
					}
					continue
				}
				return p.accessDenied(t)
			case err != nil:
				return fmt.Errorf("pid %d: PTRACE_SEIZE of thread %d: %w", w.pid, tid, err)
			}
			w.ts[tid] = &wthread{tid: tid, pid: w.pid}
			added = true
		}
		if !added {
			if len(w.ts) == 0 {
				return fmt.Errorf("pid %d exited before it could be watched: %w", w.pid, errs.ErrNoSuchProcess)
			}
			return nil
		}
	}
}

// The polls' naps: short after a stop came (more may follow), growing to
// maxNap when idle. SIGCHLD wakes the loop at once; the polls catch what a
// lost or coalesced signal would leave waiting.
const (
	minNap = 20 * time.Microsecond
	maxNap = 50 * time.Millisecond
)

// poll handles every stop and exit its tracees report, on the tracer's
// thread, and returns how long to wait before the next poll.
func (w *Watch) poll() time.Duration {
	if w.ended {
		return -1 // the tracer's thread exits: the kernel detaches every thread
	}
	busy := w.reap()
	if w.ended {
		return -1
	}
	if !w.exitAt.IsZero() && w.held == nil && time.Since(w.exitAt) > w.opt.ExitTimeout {
		w.exited() // a thread of the group exit did not come
	}
	if busy {
		w.nap = minNap
	} else {
		w.nap = min(2*w.nap, maxNap)
	}
	return w.nap
}

// reap handles what the tracees have reported; it returns whether there
// was anything.
func (w *Watch) reap() bool {
	busy := false
	for !w.ended {
		var si unix.Siginfo
		// Peek first (WNOWAIT): the leader's exit is its parent's to
		// reap, not the watch's.
		err := unix.Waitid(unix.P_ALL, 0, &si, unix.WSTOPPED|unix.WEXITED|unix.WNOHANG|unix.WNOWAIT|unix.WALL|unix.WNOTHREAD, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		tid, _ := childInfo(&si)
		if err != nil || tid == 0 {
			return busy
		}
		busy = true
		switch {
		case si.Code >= cldExited && si.Code <= cldDumped:
			if tid == w.pid || watchOf(tid) == w {
				recordEnd(tid, &si)
			}
			if tid == w.pid {
				// The leader's exit comes once every thread is gone:
				// the process has ended.
				if w.outlives() {
					// Reaped by its tracer, the zombie goes on to its
					// parent, as a followed process's does.
					unix.Waitid(unix.P_PID, tid, &si, unix.WEXITED|unix.WALL|unix.WNOTHREAD, nil)
					w.endRoot()
					continue
				}
				// Let the tracer's thread go (detaching the zombie), so
				// that the parent learns it.
				w.end()
				return busy
			}
			// (A followed process's leader, reaped here, goes on to its
			// parent as a zombie: the watch is its tracer, not its
			// parent.)
			unix.Waitid(unix.P_PID, tid, &si, unix.WEXITED|unix.WALL|unix.WNOTHREAD, nil)
			t := w.ts[tid]
			switch {
			case t == nil:
				w.forget(tid) // a followed process that ended unseen
			case t.pid != w.pid:
				delete(w.ts, tid)
				if tid == t.pid {
					w.forget(tid)
				}
				if w.rootGone && len(w.ts) == 0 {
					w.end() // the last process it followed
					return busy
				}
			default:
				// The kernel skips the exit stop of a thread that has a
				// fatal signal pending then (ptrace_stop): one killed
				// twice in a group exit ends unseen, its registers and
				// stack pointer gone. The process's end says so.
				t.unseen = !t.exiting
				t.gone, t.held = true, false
			}
		case si.Code == cldTrapped:
			var got unix.Siginfo
			if unix.Waitid(unix.P_PID, tid, &got, unix.WSTOPPED|unix.WNOHANG|unix.WALL|unix.WNOTHREAD, nil) != nil {
				continue
			}
			if id, status := childInfo(&got); id == tid && got.Code == cldTrapped {
				w.stopped(tid, status)
			}
		default:
			// A stop report of a child not traced (this thread forked
			// it): not the watch's; take it out of the way.
			unix.Waitid(unix.P_PID, tid, &si, unix.WSTOPPED|unix.WNOHANG|unix.WALL|unix.WNOTHREAD, nil)
		}
	}
	return busy
}

// stopped handles a ptrace stop of thread tid.
func (w *Watch) stopped(tid, status int) {
	t := w.ts[tid]
	if t == nil {
		// A new thread (its parent's clone event may come later), or
		// the first of a followed process.
		t = w.add(tid, w.processOf(tid))
	}
	t.held, t.sig, t.listen = true, 0, false
	switch event, sig := status>>8, status&0xff; event {
	case unix.PTRACE_EVENT_CLONE:
		if msg, err := unix.PtraceGetEventMsg(tid); err == nil && w.ts[int(msg)] == nil {
			w.add(int(msg), t.pid)
		}
		w.goOn(t)
	case unix.PTRACE_EVENT_FORK, unix.PTRACE_EVENT_VFORK:
		// A followed process, traced from its start: its first stop
		// may come before this one or after.
		if msg, err := unix.PtraceGetEventMsg(tid); err == nil && w.ts[int(msg)] == nil {
			w.add(int(msg), int(msg))
		}
		w.goOn(t)
	case unix.PTRACE_EVENT_EXEC:
		// A new program: the process's other threads are gone, and the
		// one that executed it has the leader's ID.
		for id, o := range w.ts {
			if id != tid && o.pid == t.pid {
				delete(w.ts, id) // ended by the exec (their reports, if any, are reaped unknown)
			}
		}
		if t.pid == w.pid {
			w.exitAt = time.Time{}
		}
		w.goOn(t)
	case unix.PTRACE_EVENT_EXIT:
		t.exiting = true
		if t.pid != w.pid {
			w.goOn(t) // a followed process's end is not held
			return
		}
		t.hasRegs = unix.PtraceGetRegs(tid, &t.regs) == nil
		w.exiting(t)
	case unix.PTRACE_EVENT_STOP:
		if isStopSignal(sig) {
			t.listen = true // a group stop
		}
		if w.stopping != t.pid {
			w.goOn(t)
		}
	case 0:
		if sig == int(unix.SIGSTOP) && w.holds(t) {
			return
		}
		// A signal-delivery stop: the signal goes back with it.
		t.sig = sig
		if w.stopping != t.pid {
			w.goOn(t)
		}
	default:
		w.goOn(t)
	}
}

func isStopSignal(sig int) bool {
	switch unix.Signal(sig) {
	case unix.SIGSTOP, unix.SIGTSTP, unix.SIGTTIN, unix.SIGTTOU:
		return true
	}
	return false
}

// goOn lets a held thread go on as it was going: in its group stop, with
// the signal it was taking, or running.
func (w *Watch) goOn(t *wthread) {
	if !t.held || t.hold {
		return
	}
	t.held = false
	if t.listen {
		ptrace(unix.PTRACE_LISTEN, t.tid, 0, 0)
		return
	}
	ptrace(unix.PTRACE_CONT, t.tid, 0, uintptr(t.sig))
	t.sig = 0
	if t.exiting {
		t.gone = true // it goes on to its end
	}
}

// sysExit is exit(2), which a thread that ends alone calls (pthread_exit).
const sysExit = 60

// exiting decides about a thread that stopped on its way out: the end of
// the process (every thread is on its way out), a thread ending alone, the
// threads an exec ends, or a group exit whose other threads are coming.
func (w *Watch) exiting(t *wthread) {
	others := w.running()
	switch {
	case len(others) == 0:
		w.exited()
	case t.hasRegs && t.regs.Orig_rax == sysExit:
		w.goOn(t) // pthread_exit: the others run on
	case execing(w.pid, others):
		w.letExitsGo()
	default:
		if w.exitAt.IsZero() {
			w.exitAt = time.Now()
		}
	}
}

// running returns the threads of the watched process neither on their way
// out nor gone.
func (w *Watch) running() []int {
	var out []int
	for _, t := range w.ts {
		if t.pid == w.pid && !t.exiting && !t.gone {
			out = append(out, t.tid)
		}
	}
	return out
}

// execing reports whether one of threads is in an execve, which ends the
// process's other threads.
func execing(pid int, threads []int) bool {
	for _, tid := range threads {
		b, err := os.ReadFile(taskPath(pid, tid, "syscall"))
		if err != nil {
			continue
		}
		if f := strings.Fields(string(b)); len(f) > 0 && (f[0] == "59" || f[0] == "322") { // execve, execveat
			return true
		}
	}
	return false
}

func (w *Watch) letExitsGo() {
	for _, t := range w.ts {
		if t.exiting && t.held {
			w.goOn(t)
		}
	}
	w.exitAt = time.Time{}
}

// exited builds the Process of the ended process, its threads held on
// their way out, and hands it to OnExit.
func (w *Watch) exited() {
	w.exitAt = time.Time{}
	if w.opt.OnExit == nil || w.held != nil {
		w.letExitsGo()
		return
	}
	p := &Process{pid: w.pid, tr: w.tr, watch: w, start: time.Now(), atExit: true}
	memTID := 0
	for _, t := range w.ts {
		switch {
		case t.pid != w.pid:
		case t.exiting && t.held && t.hasRegs:
			p.ts = append(p.ts, &thread{tid: t.tid, seized: true, stopped: true, regs: t.regs})
			if memTID == 0 || t.tid == w.pid {
				memTID = t.tid
			}
		case !t.gone || t.unseen:
			p.missing = append(p.missing, t.tid)
		}
	}
	if memTID == 0 {
		w.letExitsGo()
		return
	}
	sort.Ints(p.missing)
	// A leader gone before the last thread (it called pthread_exit) has
	// no memory left: the process is read through a thread that has.
	p.pid = memTID
	var err error
	if p.maps, err = proc.ReadMaps(memTID); err != nil {
		w.letExitsGo()
		return
	}
	p.mem.pid = memTID
	w.held = p
	if d := w.opt.ExitMaxPause; d > 0 {
		p.watchdog = time.AfterFunc(d, func() { p.resume("its maximum pause at exit of " + d.String() + " passed") })
	}
	go func() {
		defer p.Resume()
		w.opt.OnExit(p)
	}()
}

// Stop stops every thread of the watched process, as the package's Stop
// does, for a process this Watch traces. Resume lets them go on, watched.
// It fails with errs.ErrNoSuchProcess when the process is ending or gone.
func (w *Watch) Stop(opt Options) (p *Process, err error) { return w.stop(w.pid, opt) }

// stop is Stop of process pid, the watched process or one it follows.
func (w *Watch) stop(pid int, opt Options) (p *Process, err error) {
	if opt.Timeout <= 0 {
		opt.Timeout = DefaultTimeout
	}
	if opt.MaxPause == 0 {
		opt.MaxPause = DefaultMaxPause
	}
	if !w.tr.try(func() { p, err = w.stopAll(pid, time.Now().Add(opt.Timeout)) }) {
		return nil, fmt.Errorf("pid %d has ended: %w", pid, errs.ErrNoSuchProcess)
	}
	if err != nil {
		return nil, err
	}
	if opt.MaxPause > 0 {
		d := opt.MaxPause
		p.watchdog = time.AfterFunc(d, func() { p.resume("its maximum pause of " + d.String() + " passed") })
	}
	return p, nil
}

// stopAll interrupts every running thread of process pid and waits for
// each to stop, on the tracer's thread.
func (w *Watch) stopAll(pid int, deadline time.Time) (*Process, error) {
	// (A followed process may not be registered yet: its first stop
	// has not come.)
	if w.ended || pid == w.pid && w.rootGone {
		return nil, fmt.Errorf("pid %d has ended: %w", pid, errs.ErrNoSuchProcess)
	}
	if w.held != nil || !w.exitAt.IsZero() {
		return nil, fmt.Errorf("pid %d is ending: %w", w.pid, errs.ErrNoSuchProcess)
	}
	if pid != w.pid {
		// A followed process's threads, those whose first stop has not
		// been seen among them.
		tids, err := listTasks(pid)
		if err != nil {
			return nil, err
		}
		for _, tid := range tids {
			if w.ts[tid] == nil {
				w.add(tid, pid)
			}
		}
	}
	w.stopping = pid
	fail := func(err error) (*Process, error) {
		w.stopping = 0
		for _, t := range w.ts {
			if t.pid == pid && !t.exiting {
				w.goOn(t)
			}
		}
		return nil, err
	}
	p := &Process{pid: pid, tr: w.tr, watch: w}
	interrupted := map[int]bool{}
	for nap := 5 * time.Microsecond; ; {
		pending := 0
		for _, t := range w.ts {
			// Once each: every interrupt is a stop to come, and one
			// that came after the thread had stopped otherwise (at a
			// signal) would stop it again after the Resume.
			if t.pid != pid || t.gone || t.held || interrupted[t.tid] {
				continue
			}
			interrupted[t.tid] = true
			if err := unix.PtraceInterrupt(t.tid); err != nil && !errors.Is(err, unix.ESRCH) {
				return fail(fmt.Errorf("pid %d: PTRACE_INTERRUPT of thread %d: %w", pid, t.tid, err))
			}
			if p.start.IsZero() {
				p.start = time.Now()
			}
		}
		w.reap()
		if w.ended || watchOf(pid) != w {
			return nil, fmt.Errorf("pid %d exited during the stop: %w", pid, errs.ErrNoSuchProcess)
		}
		for _, t := range w.ts {
			if t.pid != pid {
				continue
			}
			if t.exiting && t.held {
				return fail(fmt.Errorf("pid %d is exiting: %w", pid, errs.ErrNoSuchProcess))
			}
			if !t.gone && !t.held {
				pending++
			}
		}
		if pending == 0 {
			break
		}
		if time.Now().After(deadline) {
			return fail(fmt.Errorf("pid %d: %d threads did not stop within the deadline: %w", pid, pending, errs.ErrCannotStop))
		}
		time.Sleep(nap)
		nap = min(2*nap, time.Millisecond)
	}
	for _, t := range w.ts {
		if t.pid != pid || t.gone {
			continue
		}
		var regs unix.PtraceRegs
		if err := unix.PtraceGetRegs(t.tid, &regs); err != nil {
			return fail(fmt.Errorf("pid %d: registers of thread %d: %v: %w", pid, t.tid, err, errs.ErrCannotStop))
		}
		p.ts = append(p.ts, &thread{tid: t.tid, seized: true, stopped: true, regs: regs})
	}
	if len(p.ts) == 0 {
		return fail(fmt.Errorf("pid %d has no thread left: %w", pid, errs.ErrNoSuchProcess))
	}
	var err error
	if p.maps, err = proc.ReadMaps(pid); err != nil {
		return fail(err)
	}
	p.mem.pid = pid
	w.held = p
	return p, nil
}

// release lets the threads of p, a stop of this watch, go on. (When the
// tracer's thread has gone, the kernel let them go.)
func (w *Watch) release(p *Process) {
	w.tr.try(func() {
		if w.held != p {
			return
		}
		w.held, w.stopping = nil, 0
		for _, t := range w.ts {
			w.goOn(t)
		}
	})
}

// outlives reports, as the watched process ends, whether the watch goes on
// without it: it follows processes still there, and the process is not this
// program's child (whose zombie its tracer's wait would reap for good, its
// status lost to this program's own wait: a program heapscope launched ends
// its session anyway).
func (w *Watch) outlives() bool {
	if !w.opt.Follow || w.ours {
		return false
	}
	for _, t := range w.ts {
		if t.pid != w.pid {
			return true
		}
	}
	return false
}

// endRoot marks the watched process ended, on the tracer's thread, while
// the processes it followed are watched on.
func (w *Watch) endRoot() {
	w.rootGone = true
	w.exitAt = time.Time{}
	for id, t := range w.ts {
		if t.pid == w.pid {
			delete(w.ts, id)
		}
	}
	w.forget(w.pid)
	w.closeOnce.Do(func() { close(w.done) })
}

// end marks the process ended, on the tracer's thread, whose loop then
// ends (poll), detaching what is left (the zombie leader, whose parent
// then learns of its end).
func (w *Watch) end() {
	w.ended = true
	w.unregisterAll()
	w.closeOnce.Do(func() { close(w.done) })
}

// Close stops watching: threads held by a stop of the watch go on, so do
// those WatchOptions.Held holds (the SIGSTOP dropped), and the
// tracer's thread exits, which detaches every thread (the process runs on
// untraced, its job-control state kept). It waits for that.
func (w *Watch) Close() error {
	var held *Process
	w.tr.try(func() { held = w.held })
	if held != nil {
		held.Resume()
	}
	var due map[int][]func()
	w.tr.try(func() { due = w.endHolds() })
	w.tr.try(w.end)
	<-w.tr.done
	w.tr.waitGone()
	w.closeOnce.Do(func() { close(w.done) })
	// A hold released before its stop came, now untraced: its SIGSTOP,
	// pending still or taken as a group stop once detached, goes.
	for pid, unlists := range due {
		unix.Kill(pid, unix.SIGCONT)
		for _, unlist := range unlists {
			unlist()
		}
	}
	return nil
}

// AtExit reports whether p is a process held at its exit by a Watch.
func (p *Process) AtExit() bool { return p.atExit }

// Missing lists the threads of a process held at its exit that did not
// stop there: not within WatchOptions.ExitTimeout, or not at all (the
// kernel lets a thread with a fatal signal pending end without its exit
// stop). Their registers and stacks are not in Threads.
func (p *Process) Missing() []int { return append([]int(nil), p.missing...) }

// String describes a watch for errors: "watch of pid 12".
func (w *Watch) String() string { return "watch of pid " + strconv.Itoa(w.pid) }
