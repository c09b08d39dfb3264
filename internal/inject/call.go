package inject

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"golang.org/x/sys/unix"

	"github.com/heapscope/heapscope/internal/errs"
	"github.com/heapscope/heapscope/internal/proc"
	"github.com/heapscope/heapscope/internal/stopped"
)

// caller runs functions of a stopped process in one of its threads,
// through the trampoline (csrc/tramp.S): the first call starts the thread
// at the trampoline, each one after is made from the trampoline's marker,
// and once Resume detaches the thread the trampoline gives it back its
// state and it goes on where it was.
type caller struct {
	p       *stopped.Process
	t       stopped.Thread
	cave    uint64 // the trampoline
	block   uint64 // its data block, on the thread's stack
	extra   uint64 // blockExtra bytes after the block, for strings and arguments
	started bool   // the thread is at the marker
	timeout time.Duration
	calls   int
	errnoAt uint64 // the C library's __errno_location
	xsize   uint64 // bytes of the XSAVE area; 0: FXSAVE
}

const (
	redZone    = 128
	blockExtra = 4096 + 512
	// marker is the system call the trampoline stops at: getpid.
	markerSyscall = unix.SYS_GETPID
)

// The errors -ERESTART* a thread stopped in a system call shows in rax
// when the kernel means to restart the call: the trampoline, which returns
// to the thread's code itself, restarts it as the kernel would have.
const (
	erestartsys          = -512
	erestartnointr       = -513
	erestartnohand       = -514
	erestartRestartblock = -516
	sysRestartSyscall    = 219
)

// restartRegs returns r as the thread must resume in user space: with an
// interrupted system call made again.
func restartRegs(r unix.PtraceRegs) unix.PtraceRegs {
	if int64(r.Orig_rax) < 0 {
		return r
	}
	switch int64(r.Rax) {
	case erestartsys, erestartnointr, erestartnohand:
		r.Rax = r.Orig_rax
		r.Rip -= 2
	case erestartRestartblock:
		r.Rax = sysRestartSyscall
		r.Rip -= 2
	}
	return r
}

// trampImage is the trampoline with the registers it restores filled in.
func trampImage(r unix.PtraceRegs) []byte {
	img := append([]byte(nil), trampCode...)
	r = restartRegs(r)
	le := binary.LittleEndian
	for off, v := range map[int]uint64{
		saveR15: r.R15, saveR14: r.R14, saveR13: r.R13, saveR12: r.R12, saveRbp: r.Rbp, saveRbx: r.Rbx,
		saveR11: r.R11, saveR10: r.R10, saveR9: r.R9, saveR8: r.R8, saveRax: r.Rax, saveRcx: r.Rcx,
		saveRdx: r.Rdx, saveRsi: r.Rsi, saveRdi: r.Rdi, saveRip: r.Rip, saveRflags: r.Eflags, saveRsp: r.Rsp,
	} {
		le.PutUint64(img[off:], v)
	}
	return img
}

// findCave returns where in the process the trampoline can go: padding
// after an executable segment of the C library, in an executable
// mapping, that no thread is running.
func findCave(libc *libcInfo, maps []proc.Mapping) (uint64, error) {
	for _, c := range libc.caves {
		if c.hi-c.lo < uint64(len(trampCode)) {
			continue
		}
		at := (c.lo + 15) &^ 15
		if at+uint64(len(trampCode)) > c.hi {
			continue
		}
		for _, m := range maps {
			if m.Start <= at && at+uint64(len(trampCode)) <= m.End && m.Exec() {
				return at, nil
			}
		}
	}
	return 0, fmt.Errorf("%s has no room after its code for the injection's %d bytes: %w", libc.path, len(trampCode), errs.ErrUnavailable)
}

// newCaller prepares thread t to run calls: the trampoline at cave, its
// data block on the thread's stack. Nothing of the thread changes until
// the first call.
func newCaller(p *stopped.Process, t stopped.Thread, libc *libcInfo, cave uint64, timeout time.Duration) (*caller, error) {
	size := uint64(dataSize + blockExtra)
	block := (t.Regs.Rsp - redZone - size) &^ 63
	c := &caller{p: p, t: t, cave: cave, block: block, extra: block + dataSize, timeout: timeout,
		errnoAt: libc.fn["__errno_location"]}
	if n := p.XStateSize(); n > 0 {
		// XSAVE's area for every feature the processor enables, which
		// the kernel's (for the features it manages) bounds; with room
		c.xsize = (uint64(max(n, 4096)) + 4096 + 63) &^ 63
	}
	b := make([]byte, dataSize)
	le := binary.LittleEndian
	le.PutUint64(b[dataErrnoFn:], c.errnoAt)
	le.PutUint64(b[dataXsize:], c.xsize)
	if _, err := p.WriteAt(b, int64(block)); err != nil {
		return nil, fmt.Errorf("pid %d: writing on thread %d's stack: %w", p.PID(), t.TID, err)
	}
	if _, err := p.WriteAt(trampImage(t.Regs), int64(cave)); err != nil {
		return nil, fmt.Errorf("pid %d: writing the trampoline: %w", p.PID(), err)
	}
	return c, nil
}

// put writes b at the block's extra room, at off, and returns its address.
func (c *caller) put(off uint64, b []byte) (uint64, error) {
	if off+uint64(len(b)) > blockExtra {
		return 0, fmt.Errorf("pid %d: %d bytes do not fit the call's block", c.p.PID(), len(b))
	}
	if _, err := c.p.WriteAt(b, int64(c.extra+off)); err != nil {
		return 0, err
	}
	return c.extra + off, nil
}

// read reads n bytes at addr.
func (c *caller) read(addr uint64, n int) ([]byte, error) {
	b := make([]byte, n)
	_, err := c.p.ReadAt(b, int64(addr))
	return b, err
}

// call runs fn(args...) in the thread and returns its result and the
// thread's errno after it.
func (c *caller) call(fn uint64, args ...uint64) (uint64, int32, error) {
	if len(args) > 6 {
		return 0, 0, errors.New("more than 6 arguments")
	}
	b := make([]byte, dataAgain+8)
	le := binary.LittleEndian
	le.PutUint64(b[dataFn:], fn)
	for i, a := range args {
		le.PutUint64(b[dataA0+8*i:], a)
	}
	if c.started {
		le.PutUint64(b[dataAgain:], 1)
	}
	le.PutUint64(b[dataErrnoFn:], c.errnoAt)
	le.PutUint64(b[dataXsize:], c.xsize)
	if _, err := c.p.WriteAt(b, int64(c.block)); err != nil {
		return 0, 0, err
	}
	t0 := time.Now()
	marker := c.cave + trampMarker
	stops := 0
	opt := stopped.RunOptions{Timeout: c.timeout, Until: func(r *unix.PtraceRegs) bool {
		stops++
		testPoint(fmt.Sprintf("call%d.%d", c.calls+1, stops))
		return r.Orig_rax == markerSyscall && r.Rip == marker
	}}
	var err error
	if c.started {
		_, err = c.p.Run(c.t.TID, nil, opt)
	} else {
		regs := c.t.Regs
		regs.Rip = c.cave + trampStart
		regs.Rdi = c.block
		regs.Rsp = c.block
		regs.Orig_rax = ^uint64(0) // no system call to restart: the trampoline does
		regs.Rax = 0
		regs.Eflags &^= 0x400 | 0x100 // DF and TF clear, as a call wants
		c.started = true
		_, err = c.p.Run(c.t.TID, &regs, opt)
	}
	c.calls++
	debugf("call %d (%#x): %v", c.calls, fn, time.Since(t0))
	if err != nil {
		return 0, 0, fmt.Errorf("pid %d: the injected call %d on thread %d: %w", c.p.PID(), c.calls, c.t.TID, err)
	}
	out, err := c.read(c.block, dataSize)
	if err != nil {
		return 0, 0, err
	}
	return le.Uint64(out[dataResult:]), int32(le.Uint32(out[dataErrno:])), nil
}

// cstring reads a NUL-terminated string of at most n bytes at addr.
func (c *caller) cstring(addr uint64, n int) string {
	if addr == 0 {
		return ""
	}
	b := make([]byte, n)
	got, _ := c.p.ReadAt(b, int64(addr))
	b = b[:got]
	for i, x := range b {
		if x == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}
