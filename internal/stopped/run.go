package stopped

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/heapscope/heapscope/internal/errs"
	"github.com/heapscope/heapscope/internal/proc"
)

// What lets a stopped thread run code of its process's (internal/inject):
// its registers set, memory written, and the thread run alone until a
// system call of the caller's choosing. Resume detaches it wherever it is;
// so code run this way must be safe to finish untraced, as heapscope may
// be killed at any point.

// WriteAt writes b into the process's memory at off, as io.WriterAt does,
// read-only pages included (as a debugger plants a breakpoint: the kernel
// gives the process a private copy of the page). It goes through
// /proc/PID/mem from the tracing thread (the kernel may allow forced
// writes only to a process's tracer), else PTRACE_POKEDATA. It fails with
// ErrResumed once the process runs again.
func (p *Process) WriteAt(b []byte, off int64) (n int, err error) {
	if off < 0 {
		return 0, &FaultError{Addr: uint64(off)}
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.resumed {
		return 0, p.resumedErr()
	}
	p.tr.do(func() { n, err = p.write(b, uint64(off)) })
	return n, err
}

// write runs on the tracer's thread.
func (p *Process) write(b []byte, addr uint64) (int, error) {
	f, err := os.OpenFile("/proc/"+strconv.Itoa(p.pid)+"/mem", os.O_RDWR, 0)
	if err == nil {
		n, werr := unix.Pwrite(int(f.Fd()), b, int64(addr))
		f.Close()
		if werr == nil && n == len(b) {
			return n, nil
		}
	}
	// One word at a time: the words at either end are read first, so
	// that what lies beside b is written back as it was.
	tid := p.anyStopped()
	if tid == 0 {
		return 0, fmt.Errorf("pid %d: no stopped thread to write through: %w", p.pid, errs.ErrNoSuchProcess)
	}
	done := 0
	for done < len(b) {
		at := (addr + uint64(done)) &^ 7
		var word [8]byte
		skip := int(addr + uint64(done) - at)
		if skip != 0 || len(b)-done < 8 {
			if _, err := unix.PtracePeekData(tid, uintptr(at), word[:]); err != nil {
				return done, &FaultError{Addr: at, Mapping: p.mapping(at), Err: err}
			}
		}
		c := copy(word[skip:], b[done:])
		if _, err := unix.PtracePokeData(tid, uintptr(at), word[:]); err != nil {
			return done, &FaultError{Addr: at, Mapping: p.mapping(at), Err: err}
		}
		done += c
	}
	return done, nil
}

func (p *Process) anyStopped() int {
	for _, t := range p.ts {
		if t.seized && t.stopped && !t.gone {
			return t.tid
		}
	}
	return 0
}

// thread returns the stopped thread tid, or an error.
func (p *Process) thread(tid int) (*thread, error) {
	for _, t := range p.ts {
		if t.tid == tid && t.seized && t.stopped && !t.gone {
			return t, nil
		}
	}
	return nil, fmt.Errorf("pid %d: thread %d is not one this stop holds: %w", p.pid, tid, errs.ErrNoSuchProcess)
}

// RefreshMaps reads the process's mappings again, for Maps and the
// readers: code Run ran may have mapped more.
func (p *Process) RefreshMaps() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.resumed {
		return p.resumedErr()
	}
	maps, err := proc.ReadMaps(p.pid)
	if err != nil {
		return err
	}
	p.maps = maps
	return nil
}

// SetRegs sets the general registers of thread tid, which must be one of
// the stopped threads, to r.
func (p *Process) SetRegs(tid int, r *unix.PtraceRegs) (err error) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.resumed {
		return p.resumedErr()
	}
	t, err := p.thread(tid)
	if err != nil {
		return err
	}
	p.tr.do(func() { err = unix.PtraceSetRegs(tid, r) })
	if err != nil {
		return fmt.Errorf("pid %d: setting the registers of thread %d: %w", p.pid, tid, err)
	}
	t.regs = *r
	return nil
}

// XStateSize is the size of a thread's XSAVE area (the extended state the
// kernel saves for it: x87, SSE, AVX and later), or 0 where the processor
// has no XSAVE.
func (p *Process) XStateSize() int {
	p.mu.RLock()
	defer p.mu.RUnlock()
	tid := 0
	if !p.resumed {
		tid = p.anyStopped()
	}
	if tid == 0 {
		return 0
	}
	n := 0
	p.tr.do(func() {
		buf := make([]byte, 64<<10)
		iov := unix.Iovec{Base: &buf[0]}
		iov.SetLen(len(buf))
		if ptrace(unix.PTRACE_GETREGSET, tid, unix.NT_X86_XSTATE, uintptr(unsafe.Pointer(&iov))) == nil {
			n = int(iov.Len)
		}
	})
	return n
}

// RunOptions bound and end a Run.
type RunOptions struct {
	// Timeout bounds the run; a second when 0.
	Timeout time.Duration
	// Until is called each time the thread enters a system call, with its
	// registers then (Orig_rax is the call's number, Rip just past the
	// instruction); returning true stops the thread there, the call not
	// yet made, and ends the run.
	Until func(r *unix.PtraceRegs) bool
}

// ErrTimeout is the error of a Run whose thread did not arrive in time.
var ErrTimeout = errors.New("thread did not arrive in time")

// Run lets thread tid (one of the stopped threads) run, alone: its
// registers are set to regs first unless regs is nil. The thread stops
// again when opt.Until says so at a system call's entry, and Run returns
// its registers there; the other threads stay stopped, unless the thread
// waits on a futex meanwhile, a lock that a stopped thread may hold: then
// the others are let go (Released reports it) and the run goes on. A signal
// the thread takes meanwhile is delivered to it.
//
// On an error (ErrTimeout, the thread's or the process's death, an exec)
// the thread may still be running what it was given: Resume detaches it
// wherever it is, and it goes on untraced.
func (p *Process) Run(tid int, regs *unix.PtraceRegs, opt RunOptions) (out unix.PtraceRegs, err error) {
	if opt.Timeout <= 0 {
		opt.Timeout = time.Second
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.resumed {
		return out, p.resumedErr()
	}
	t, err := p.thread(tid)
	if err != nil {
		return out, err
	}
	p.tr.do(func() { out, err = p.run(t, regs, opt) })
	return out, err
}

// Released reports whether the threads other than those Run ran were let
// go before Resume.
func (p *Process) Released() bool {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.released
}

// The ops of struct ptrace_syscall_info.
const (
	syscallInfoEntry = 1
	syscallInfoExit  = 2
)

// run runs on the tracer's thread.
func (p *Process) run(t *thread, regs *unix.PtraceRegs, opt RunOptions) (unix.PtraceRegs, error) {
	var out unix.PtraceRegs
	if err := ptrace(unix.PTRACE_SETOPTIONS, t.tid, 0, unix.PTRACE_O_TRACEEXEC|unix.PTRACE_O_TRACESYSGOOD); err != nil {
		return out, fmt.Errorf("pid %d: thread %d: PTRACE_SETOPTIONS: %w", p.pid, t.tid, err)
	}
	if regs != nil {
		if err := unix.PtraceSetRegs(t.tid, regs); err != nil {
			return out, fmt.Errorf("pid %d: setting the registers of thread %d: %w", p.pid, t.tid, err)
		}
		t.regs = *regs
	}
	deadline := time.Now().Add(opt.Timeout)
	sig := 0
	for {
		if err := ptrace(unix.PTRACE_SYSCALL, t.tid, 0, uintptr(sig)); err != nil {
			if errors.Is(err, unix.ESRCH) && !taskAlive(p.pid, t.tid) {
				t.gone = true
				return out, fmt.Errorf("pid %d: thread %d exited: %w", p.pid, t.tid, errs.ErrNoSuchProcess)
			}
			return out, fmt.Errorf("pid %d: thread %d: PTRACE_SYSCALL: %w", p.pid, t.tid, err)
		}
		t.stopped = false
		sig = 0
		status, err := p.waitStop(t, deadline)
		if err != nil {
			return out, err
		}
		t.stopped = true
		switch event, s := status>>8, status&0xff; {
		case event == unix.PTRACE_EVENT_EXEC:
			p.execed = t.tid
			return out, fmt.Errorf("pid %d executed a new program: %w", p.pid, errs.ErrCannotStop)
		case event != 0:
			// an interrupt or a group stop: go on
		case s == int(unix.SIGTRAP)|0x80:
			var info [88]byte
			if err := ptrace(unix.PTRACE_GET_SYSCALL_INFO, t.tid, uintptr(len(info)), uintptr(unsafe.Pointer(&info[0]))); err != nil {
				return out, fmt.Errorf("pid %d: thread %d: PTRACE_GET_SYSCALL_INFO: %w", p.pid, t.tid, err)
			}
			if info[0] != syscallInfoEntry {
				continue
			}
			if err := unix.PtraceGetRegs(t.tid, &out); err != nil {
				return out, fmt.Errorf("pid %d: registers of thread %d: %w", p.pid, t.tid, err)
			}
			t.regs = out
			if opt.Until != nil && opt.Until(&out) {
				return out, nil
			}
			if !p.released && waits(&out) {
				p.releaseOthers(t)
			}
		default:
			sig = s // a signal for the thread: it takes it
		}
	}
}

// waits reports whether the system call about to be made may wait for
// another thread: a futex wait or lock.
func waits(r *unix.PtraceRegs) bool {
	switch r.Orig_rax {
	case unix.SYS_FUTEX:
		switch r.Rsi & 0x7f { // FUTEX_CMD_MASK
		case 0, 6, 9, 11, 13: // WAIT, LOCK_PI, WAIT_BITSET, WAIT_REQUEUE_PI, LOCK_PI2
			return true
		}
	case unix.SYS_FUTEX_WAITV:
		return true
	}
	return false
}

// releaseOthers detaches every stopped thread but t. On the tracer's
// thread.
func (p *Process) releaseOthers(t *thread) {
	for _, o := range p.ts {
		if o != t && o.seized {
			ptrace(unix.PTRACE_DETACH, o.tid, 0, uintptr(o.sig))
			o.seized, o.stopped = false, false
		}
	}
	p.released = true
}

// waitStop waits for t's next ptrace stop and returns its status (event <<
// 8 | signal), until deadline.
func (p *Process) waitStop(t *thread, deadline time.Time) (int, error) {
	nap := 2 * time.Microsecond
	for {
		var si unix.Siginfo
		err := unix.Waitid(unix.P_PID, t.tid, &si, unix.WSTOPPED|unix.WNOHANG|unix.WALL, nil)
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.ECHILD):
			t.gone = true
			return 0, fmt.Errorf("pid %d: thread %d exited: %w", p.pid, t.tid, errs.ErrNoSuchProcess)
		case err != nil:
			return 0, fmt.Errorf("pid %d: waiting for thread %d: %w", p.pid, t.tid, err)
		}
		if pid, status := childInfo(&si); pid != 0 && si.Code == cldTrapped {
			return status, nil
		}
		si = unix.Siginfo{}
		if unix.Waitid(unix.P_PID, t.tid, &si, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT|unix.WALL, nil) == nil {
			if pid, _ := childInfo(&si); pid != 0 && si.Code >= cldExited && si.Code <= cldDumped {
				t.gone = true
				return 0, fmt.Errorf("pid %d: thread %d exited: %w", p.pid, t.tid, errs.ErrNoSuchProcess)
			}
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("pid %d: thread %d: %w", p.pid, t.tid, ErrTimeout)
		}
		time.Sleep(nap)
		if nap < 500*time.Microsecond {
			nap *= 2
		}
	}
}
