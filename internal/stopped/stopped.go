package stopped

import (
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/heapscope/heapscope/internal/errs"
	"github.com/heapscope/heapscope/internal/proc"
)

// Defaults of Options.
const (
	DefaultTimeout  = 2 * time.Second
	DefaultMaxPause = 10 * time.Second
)

// ErrResumed is returned by the readers of a Process that was resumed, by
// Resume or by its MaxPause: what they would read is no longer a snapshot.
var ErrResumed = errors.New("process was resumed")

// Options bound a stop in time.
type Options struct {
	// Timeout bounds the wait for every thread to stop (DefaultTimeout
	// when 0). A thread still running then fails Stop with ErrCannotStop.
	Timeout time.Duration
	// MaxPause resumes the process by itself this long after it stopped,
	// whatever its caller does (DefaultMaxPause when 0, never when
	// negative). Reads after that fail with ErrResumed.
	MaxPause time.Duration
}

// Thread is a thread of a stopped process, as it was when it stopped.
type Thread struct {
	TID  int
	Regs unix.PtraceRegs // its general registers
	// Signal is the signal the thread was about to take when it stopped
	// (0 if none), which it takes when it runs again.
	Signal int
}

// Process is a process whose every thread is stopped, until Resume.
type Process struct {
	pid     int
	timeout time.Duration
	tr      *tracer
	ts      []*thread // in the order they were seized
	start   time.Time // the first PTRACE_INTERRUPT
	maps    []proc.Mapping

	execed int    // a thread that reported PTRACE_EVENT_EXEC while stopping
	image  string // imageID when Stop began

	// watch is the Watch that made this stop (Watch.Stop, or a process
	// held at its exit): resuming lets its threads go on traced by it,
	// and its tracer's thread stays.
	watch   *Watch
	atExit  bool  // held at its exit by watch
	missing []int // threads of an exit that did not stop there

	mu       sync.RWMutex // readers hold it shared; resuming takes it whole
	resumed  bool
	released bool   // Run let the threads other than its own go
	why      string // what resumed it, when it was not Resume
	end      time.Time
	watchdog *time.Timer
	mem      memReader
}

type thread struct {
	tid     int
	seized  bool
	stopped bool
	gone    bool // exited (or a zombie) before it stopped
	sig     int  // signal held in its signal-delivery-stop: delivered when it resumes
	regs    unix.PtraceRegs
}

// Stop stops every thread of process pid (a thread ID stands for its
// process) with PTRACE_SEIZE and PTRACE_INTERRUPT, and reads their
// registers and the process's mappings. Threads created while it works are
// stopped too: it lists /proc/PID/task again until no thread is new. It
// never sends a signal. On error nothing stays stopped.
//
// Errors wrap errs.ErrNoSuchProcess (no such process, or it exited during
// the stop), errs.ErrAccessDenied (no permission to trace it), or
// errs.ErrCannotStop (already traced by another process, a thread that does
// not stop within Options.Timeout, an exec during the stop). A process that
// a Watch of this program traces, or follows, is stopped through it.
func Stop(pid int, opt Options) (p *Process, err error) {
	if opt.Timeout <= 0 {
		opt.Timeout = DefaultTimeout
	}
	if opt.MaxPause == 0 {
		opt.MaxPause = DefaultMaxPause
	}
	if pid <= 0 {
		return nil, fmt.Errorf("pid %d: %w", pid, errs.ErrNoSuchProcess)
	}
	tgid, err := threadGroup(pid)
	if err != nil {
		return nil, err
	}
	if tgid == os.Getpid() {
		return nil, fmt.Errorf("pid %d is this process: %w", pid, errs.ErrCannotStop)
	}
	if w := tracing(tgid); w != nil {
		// A process has one tracer: its watch stops it.
		return w.stop(tgid, opt)
	}
	p = &Process{pid: tgid, timeout: opt.Timeout, image: imageID(tgid), tr: startTracer()}
	defer func() {
		// Any failure, a panic included, resumes what was stopped.
		if r := recover(); r != nil {
			p.Resume()
			panic(r)
		}
		if err != nil {
			p.Resume()
			p = nil
		}
	}()
	deadline := time.Now().Add(opt.Timeout)
	p.tr.do(func() { err = p.stopAll(deadline) })
	if err != nil {
		return p, err
	}
	if p.maps, err = proc.ReadMaps(p.pid); err != nil {
		return p, err
	}
	p.mem.pid = p.pid
	if opt.MaxPause > 0 {
		d := opt.MaxPause
		p.watchdog = time.AfterFunc(d, func() { p.resume("its maximum pause of " + d.String() + " passed") })
	}
	return p, nil
}

// threadGroup returns the process (thread group) that pid belongs to.
func threadGroup(pid int) (int, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		_, err = proc.ReadStat(pid) // the same error, wrapped as proc wraps it
		if err == nil {
			err = fmt.Errorf("pid %d: %w", pid, errs.ErrNoSuchProcess)
		}
		return 0, err
	}
	st := parseStatus(b)
	if st.state == 'Z' || st.state == 'X' {
		return 0, fmt.Errorf("pid %d has exited: %w", pid, errs.ErrNoSuchProcess)
	}
	if st.tgid == 0 {
		return pid, nil
	}
	return st.tgid, nil
}

// stopAll seizes and interrupts every thread, waits for each to stop, lists
// the threads again, and so on until no thread is new; then it reads their
// registers. It runs on the tracer's thread.
func (p *Process) stopAll(deadline time.Time) error {
	known := map[int]bool{}
	for {
		tids, err := listTasks(p.pid)
		if err != nil {
			return err
		}
		added := false
		for _, tid := range tids {
			if known[tid] {
				continue
			}
			known[tid] = true
			t := &thread{tid: tid}
			p.ts = append(p.ts, t)
			if err := p.seize(t); err != nil {
				return err
			}
			added = added || t.seized
		}
		if err := p.waitStopped(deadline); err != nil {
			return err
		}
		if !added {
			break
		}
	}
	if err := p.verify(); err != nil {
		return err
	}
	n := 0
	for _, t := range p.ts {
		if !t.stopped || t.gone {
			continue
		}
		if err := unix.PtraceGetRegs(t.tid, &t.regs); err != nil {
			if errors.Is(err, unix.ESRCH) && !taskAlive(p.pid, t.tid) { // killed (SIGKILL reaches a stopped thread)
				t.gone = true
				continue
			}
			if errors.Is(err, unix.ESRCH) && p.execedMeanwhile() {
				// Another thread's exec took the leader's ID: the ID
				// names the thread running the new program, not ours.
				return fmt.Errorf("pid %d executed a new program during the stop: %w", p.pid, errs.ErrCannotStop)
			}
			return fmt.Errorf("pid %d: registers of thread %d: %v: %w", p.pid, t.tid, err, errs.ErrCannotStop)
		}
		n++
	}
	if n == 0 {
		if proc.Alive(p.pid) && imageID(p.pid) != p.image {
			return fmt.Errorf("pid %d executed a new program during the stop: %w", p.pid, errs.ErrCannotStop)
		}
		return fmt.Errorf("pid %d exited during the stop: %w", p.pid, errs.ErrNoSuchProcess)
	}
	return nil
}

// verify checks, once every thread seemed stopped, that the process is
// still the one stopped: a thread that executes a new program takes the
// leader's thread ID (and the other threads die), so that a thread ID seen
// stopped may name a task that runs the new program. Each stopped thread
// must have no stop left to report (an exec's would be there), and every
// thread listed now must be one stopped.
func (p *Process) verify() error {
	if err := p.verifyThreads(); err != nil {
		if p.execed != 0 || p.execedMeanwhile() {
			return fmt.Errorf("pid %d executed a new program during the stop: %w", p.pid, errs.ErrCannotStop)
		}
		return err
	}
	return nil
}

// execedMeanwhile reports whether process p, seen alive, has executed a
// new program since the stop began, or is executing one: waited for a
// moment, as an exec's end comes soon after the thread takes the leader's
// ID.
func (p *Process) execedMeanwhile() bool {
	for deadline := time.Now().Add(100 * time.Millisecond); ; time.Sleep(time.Millisecond) {
		if imageID(p.pid) != p.image {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}

// imageID identifies the program a process runs: where its code, stack and
// heap begin, which an exec places anew (at random, with ASLR).
func imageID(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return ""
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3; startcode is 26, startstack 28, start_brk 47.
	if len(f) < 45 {
		return ""
	}
	return f[23] + " " + f[25] + " " + f[44]
}

func (p *Process) verifyThreads() error {
	byTID := map[int]*thread{}
	for _, t := range p.ts {
		byTID[t.tid] = t
		if !t.stopped || t.gone {
			continue
		}
		var si unix.Siginfo
		if unix.Waitid(unix.P_PID, t.tid, &si, unix.WSTOPPED|unix.WNOHANG|unix.WALL, nil) == nil {
			if pid, status := childInfo(&si); pid != 0 && si.Code == cldTrapped {
				if status>>8 == unix.PTRACE_EVENT_EXEC {
					p.execed = t.tid
				}
				return fmt.Errorf("pid %d: thread %d changed during the stop (an exec?): %w", p.pid, t.tid, errs.ErrCannotStop)
			}
		}
	}
	if p.execed != 0 {
		return fmt.Errorf("pid %d: thread %d reported an exec: %w", p.pid, p.execed, errs.ErrCannotStop)
	}
	tids, err := listTasks(p.pid)
	if err != nil {
		return err
	}
	for _, tid := range tids {
		t := byTID[tid]
		if t == nil || (t.seized && !t.stopped && !t.gone) {
			return fmt.Errorf("pid %d: thread %d appeared during the stop: %w", p.pid, tid, errs.ErrCannotStop)
		}
		if st, err := taskState(p.pid, tid); err == nil && st != 't' && st != 'Z' && st != 'X' {
			return fmt.Errorf("pid %d: thread %d is in state %c, not stopped: %w", p.pid, tid, st, errs.ErrCannotStop)
		}
	}
	return nil
}

// taskAlive reports whether thread tid of pid exists and has not exited.
func taskAlive(pid, tid int) bool {
	st, err := taskState(pid, tid)
	return err == nil && st != 'Z' && st != 'X'
}

func ptrace(req, tid int, addr, data uintptr) error {
	_, _, e := unix.Syscall6(unix.SYS_PTRACE, uintptr(req), uintptr(tid), addr, data, 0, 0)
	if e != 0 {
		return e
	}
	return nil
}

func (p *Process) seize(t *thread) error {
	err := ptrace(unix.PTRACE_SEIZE, t.tid, 0, unix.PTRACE_O_TRACEEXEC)
	// EPERM also comes from a thread on its way out, such as a leader
	// that a thread's exec is replacing, whose ID then names the thread
	// that executed: try again a few times before calling it a refusal.
	for try := 0; errors.Is(err, unix.EPERM) && try < 20; try++ {
		if err := p.seizeDenied(t); err != nil || t.gone {
			return err
		}
		time.Sleep(500 * time.Microsecond)
		err = ptrace(unix.PTRACE_SEIZE, t.tid, 0, unix.PTRACE_O_TRACEEXEC)
	}
	switch {
	case errors.Is(err, unix.ESRCH):
		t.gone = true
		return nil
	case errors.Is(err, unix.EPERM):
		return p.accessDenied(t)
	case err != nil:
		return fmt.Errorf("pid %d: PTRACE_SEIZE of thread %d: %w", p.pid, t.tid, err)
	}
	t.seized = true
	if p.start.IsZero() {
		p.start = time.Now()
	}
	if err := unix.PtraceInterrupt(t.tid); err != nil {
		if errors.Is(err, unix.ESRCH) {
			t.gone = true
			return nil
		}
		return fmt.Errorf("pid %d: PTRACE_INTERRUPT of thread %d: %w", p.pid, t.tid, err)
	}
	return nil
}

// seizeDenied looks at why PTRACE_SEIZE failed with EPERM: the thread is a
// zombie (then it is simply gone) or another tracer has it (an error); nil
// otherwise.
func (p *Process) seizeDenied(t *thread) error {
	b, err := os.ReadFile(taskPath(p.pid, t.tid, "status"))
	if err != nil {
		t.gone = true // it exited meanwhile
		return nil
	}
	st := parseStatus(b)
	switch {
	case st.state == 'Z' || st.state == 'X':
		t.gone = true
		return nil
	case st.tracer != 0 && st.tracer == p.tr.tid:
		// Traced by this very stop under another ID: a thread that
		// executed a new program took the leader's.
		return fmt.Errorf("pid %d executed a new program during the stop: %w", p.pid, errs.ErrCannotStop)
	case st.tracer != 0:
		who := ""
		if c, err := os.ReadFile("/proc/" + strconv.Itoa(st.tracer) + "/comm"); err == nil {
			who = " (" + strings.TrimSpace(string(c)) + ")"
		}
		return fmt.Errorf("pid %d: thread %d is already traced by pid %d%s: %w", p.pid, t.tid, st.tracer, who, errs.ErrCannotStop)
	}
	return nil
}

// accessDenied is the error of a thread that PTRACE_SEIZE refuses for want
// of the right.
func (p *Process) accessDenied(t *thread) error {
	why := "not permitted"
	if b, err := os.ReadFile("/proc/sys/kernel/yama/ptrace_scope"); err == nil {
		if s := strings.TrimSpace(string(b)); s != "0" {
			why += " (kernel.yama.ptrace_scope is " + s + ")"
		}
	}
	return fmt.Errorf("pid %d: tracing thread %d: %s: %w", p.pid, t.tid, why, errs.ErrAccessDenied)
}

// waitStopped polls every seized thread until each has stopped or gone, or
// the deadline passes. It consumes ptrace stops only (WSTOPPED), never an
// exit: the exit of a process that is this process's child stays for its
// parent's wait.
func (p *Process) waitStopped(deadline time.Time) error {
	nap := 5 * time.Microsecond
	for polls := 1; ; polls++ {
		pending := 0
		for _, t := range p.ts {
			if !t.seized || t.stopped || t.gone {
				continue
			}
			if err := p.poll(t); err != nil {
				return err
			}
			if !t.stopped && !t.gone {
				pending++
			}
		}
		if p.execed != 0 {
			return fmt.Errorf("pid %d executed a new program during the stop: %w", p.pid, errs.ErrCannotStop)
		}
		if pending == 0 {
			return nil
		}
		if polls%8 == 0 {
			p.markZombies()
		}
		if time.Now().After(deadline) {
			return p.notStopped()
		}
		time.Sleep(nap)
		if nap < time.Millisecond {
			nap *= 2
		}
	}
}

// The parts of a SIGCHLD siginfo_t that waitid fills (see sigchld in
// <asm-generic/siginfo.h>): the union starts at byte 16.
func childInfo(si *unix.Siginfo) (pid, status int) {
	b := (*[128]byte)(unsafe.Pointer(si))
	pid = int(*(*int32)(unsafe.Pointer(&b[16])))
	status = int(*(*int32)(unsafe.Pointer(&b[24])))
	return pid, status
}

// si_code of SIGCHLD.
const (
	cldExited  = 1 // CLD_EXITED
	cldDumped  = 3 // CLD_DUMPED; CLD_KILLED is between
	cldTrapped = 4 // CLD_TRAPPED: a ptrace stop
)

func (p *Process) poll(t *thread) error {
	var si unix.Siginfo
	err := unix.Waitid(unix.P_PID, t.tid, &si, unix.WSTOPPED|unix.WNOHANG|unix.WALL, nil)
	for errors.Is(err, unix.EINTR) {
		err = unix.Waitid(unix.P_PID, t.tid, &si, unix.WSTOPPED|unix.WNOHANG|unix.WALL, nil)
	}
	if errors.Is(err, unix.ECHILD) {
		t.gone = true // no longer ours to wait for: it died
		return nil
	}
	if err != nil {
		return fmt.Errorf("pid %d: waiting for thread %d: %w", p.pid, t.tid, err)
	}
	pid, status := childInfo(&si)
	if pid == 0 || si.Code != cldTrapped {
		// Not stopped yet (a job-control report of a child is not our
		// trap). Has it exited? Look without reaping.
		// (A tracer's wait reports ptrace stops whatever the flags:
		// only an exit's code means it is gone.)
		si = unix.Siginfo{}
		if unix.Waitid(unix.P_PID, t.tid, &si, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT|unix.WALL, nil) == nil {
			if pid, _ := childInfo(&si); pid != 0 && si.Code >= cldExited && si.Code <= cldDumped {
				t.gone = true
			}
		}
		return nil
	}
	t.stopped = true
	switch event, sig := status>>8, status&0xff; event {
	case unix.PTRACE_EVENT_EXEC:
		p.execed = t.tid
	case unix.PTRACE_EVENT_STOP:
		// SIGTRAP: our interrupt; a stop signal: it is in a group stop,
		// which the kernel restores when it is detached.
	case 0:
		// A signal-delivery-stop: it was about to take signal sig, which
		// it takes when it is detached.
		t.sig = sig
	}
	return nil
}

// markZombies marks gone the threads that exited but whose exit is not
// reported to this tracer (a leader that called pthread_exit is a zombie
// until the last thread ends).
func (p *Process) markZombies() {
	for _, t := range p.ts {
		if !t.seized || t.stopped || t.gone {
			continue
		}
		st, err := taskState(p.pid, t.tid)
		if err != nil || st == 'Z' || st == 'X' {
			t.gone = true
		}
	}
}

// notStopped is the error for threads still running at the deadline.
func (p *Process) notStopped() error {
	if !proc.Alive(p.pid) {
		return fmt.Errorf("pid %d exited during the stop: %w", p.pid, errs.ErrNoSuchProcess)
	}
	var which []string
	for _, t := range p.ts {
		if !t.seized || t.stopped || t.gone {
			continue
		}
		desc := strconv.Itoa(t.tid)
		if st, err := taskState(p.pid, t.tid); err == nil {
			desc += " (state " + string(st)
			if w, err := os.ReadFile(taskPath(p.pid, t.tid, "wchan")); err == nil && len(w) > 0 && string(w) != "0" {
				desc += ", in " + string(w)
			}
			desc += ")"
		}
		which = append(which, desc)
	}
	return fmt.Errorf("pid %d: thread %s did not stop within %v: %w", p.pid, strings.Join(which, ", "), p.timeout, errs.ErrCannotStop)
}

// release detaches every seized thread, handing back the signal each held.
// It runs on the tracer's thread.
func (p *Process) release() {
	for _, t := range p.ts {
		if t.seized {
			// PTRACE_DETACH needs the thread in a ptrace stop,
			// consumed or not; one that never got there (or a
			// zombie) is released when the tracer's thread exits.
			ptrace(unix.PTRACE_DETACH, t.tid, 0, uintptr(t.sig))
		}
	}
}

// Resume lets every thread run again: each is detached, a group stop it was
// in when it was stopped is left in place, and a signal that arrived during
// the stop is delivered. Calling it again does nothing.
func (p *Process) Resume() error { return p.resume("") }

func (p *Process) resume(why string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.resumed {
		return nil
	}
	p.resumed, p.why = true, why
	if p.watchdog != nil {
		p.watchdog.Stop()
	}
	if p.watch != nil {
		p.watch.release(p)
		p.end = time.Now()
		p.mem.close()
		return nil
	}
	p.tr.do(func() { p.release() })
	p.end = time.Now()
	// Wait for the tracer's thread to be gone: a thread that no detach
	// reached (it never stopped, or its ID changed with an exec) is free
	// once it is, and Resume promises that nothing stays traced.
	p.tr.stop(true)
	p.mem.close()
	return nil
}

// PID is the process (thread group) that is stopped.
func (p *Process) PID() int { return p.pid }

// Paused is how long the process has been stopped: from its first thread's
// interrupt to now, or to Resume once resumed.
func (p *Process) Paused() time.Duration {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.start.IsZero() {
		return 0
	}
	if p.resumed {
		return p.end.Sub(p.start)
	}
	return time.Since(p.start)
}

// Threads returns the stopped threads, sorted by thread ID, with their
// registers as they were when they stopped.
func (p *Process) Threads() []Thread {
	var out []Thread
	for _, t := range p.ts {
		if t.stopped && !t.gone {
			out = append(out, Thread{TID: t.tid, Regs: t.regs, Signal: t.sig})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].TID < out[j].TID })
	return out
}

// Maps returns the process's mappings, read once all its threads had
// stopped.
func (p *Process) Maps() []proc.Mapping {
	return append([]proc.Mapping(nil), p.maps...)
}

// resumedErr is the error of a read after the process was resumed.
func (p *Process) resumedErr() error {
	if p.why != "" {
		return fmt.Errorf("pid %d: %s: %w", p.pid, p.why, ErrResumed)
	}
	return fmt.Errorf("pid %d: %w", p.pid, ErrResumed)
}

func taskPath(pid, tid int, name string) string {
	return "/proc/" + strconv.Itoa(pid) + "/task/" + strconv.Itoa(tid) + "/" + name
}

// listTasks returns the thread IDs of process pid.
func listTasks(pid int) ([]int, error) {
	ents, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("pid %d: %w", pid, errs.ErrNoSuchProcess)
		}
		return nil, fmt.Errorf("pid %d: %w", pid, err)
	}
	tids := make([]int, 0, len(ents))
	for _, e := range ents {
		if tid, err := strconv.Atoi(e.Name()); err == nil {
			tids = append(tids, tid)
		}
	}
	if len(tids) == 0 {
		return nil, fmt.Errorf("pid %d has exited: %w", pid, errs.ErrNoSuchProcess)
	}
	return tids, nil
}

// taskState returns the state letter of thread tid of pid.
func taskState(pid, tid int) (byte, error) {
	b, err := os.ReadFile(taskPath(pid, tid, "stat"))
	if err != nil {
		return 0, err
	}
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 || i+2 >= len(b) {
		return 0, fmt.Errorf("malformed stat of thread %d", tid)
	}
	return b[i+2], nil
}

type status struct {
	state  byte
	tgid   int
	ppid   int
	tracer int
}

// parseStatus reads the fields of /proc/PID/status that Stop uses.
func parseStatus(b []byte) status {
	var st status
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		v = strings.TrimSpace(v)
		switch k {
		case "State":
			if v != "" {
				st.state = v[0]
			}
		case "Tgid":
			st.tgid, _ = strconv.Atoi(v)
		case "TracerPid":
			st.tracer, _ = strconv.Atoi(v)
		case "PPid":
			st.ppid, _ = strconv.Atoi(v)
		}
	}
	return st
}
