package ebpf

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// Uprobe sessions (Linux 6.13): one program on one breakpoint that runs at
// a function's entry and again at its return (bpf_session_is_return tells
// which), and whose entry can decline the return by returning non-zero.
// BenchmarkTrap and BenchmarkTracer measure them against an entry and a
// return probe: on the kernel this was written on (6.18, in a VM) they cost
// the same, a second program run at the entry either way, and a tracer
// built on them was no cheaper per malloc+free pair, nor per
// realloc(NULL, n) (whose nested malloc a session can leave without a
// return probe: a tail call, whose return the kernel serves with its
// caller's). So the tracer does not use them; these helpers stay for the
// benchmarks, to measure again on other kernels.
//
// cilium/ebpf v0.22 loads such programs (SEC("uprobe.session")) but has no
// API to attach them: the link is made with BPF_LINK_CREATE directly, with
// uprobe_multi's attributes, and wrapped by link.NewFromFD.

// attachTraceUprobeSession is BPF_TRACE_UPROBE_SESSION.
const attachTraceUprobeSession = ebpf.AttachType(57)

// uprobeMultiAttr is union bpf_attr for BPF_LINK_CREATE of a uprobe_multi
// (or uprobe session) link.
type uprobeMultiAttr struct {
	progFD        uint32
	targetFD      uint32
	attachType    uint32
	flags         uint32
	path          unsafe.Pointer // const char *
	offsets       unsafe.Pointer // const __u64 *
	refCtrOffsets unsafe.Pointer // const __u64 *
	cookies       unsafe.Pointer // const __u64 *
	count         uint32
	multiFlags    uint32
	pid           uint32
	_             uint32
}

func linkCreateUprobeMulti(attr *uprobeMultiAttr) (int, error) {
	fd, _, errno := unix.Syscall(unix.SYS_BPF, unix.BPF_LINK_CREATE, uintptr(unsafe.Pointer(attr)), unsafe.Sizeof(*attr))
	if errno != 0 {
		return -1, errno
	}
	return int(fd), nil
}

// uprobeSession attaches prog, loaded with attachTraceUprobeSession, at the
// file offsets of the ELF file path, in process pid only, with a cookie for
// each offset.
func uprobeSession(path string, prog *ebpf.Program, pid int, offsets, cookies []uint64) (link.Link, error) {
	if len(offsets) == 0 || len(cookies) != len(offsets) {
		return nil, fmt.Errorf("uprobe session: %d offsets, %d cookies", len(offsets), len(cookies))
	}
	p, err := unix.BytePtrFromString(path)
	if err != nil {
		return nil, err
	}
	attr := uprobeMultiAttr{
		progFD:     uint32(prog.FD()),
		attachType: uint32(attachTraceUprobeSession),
		path:       unsafe.Pointer(p),
		offsets:    unsafe.Pointer(&offsets[0]),
		cookies:    unsafe.Pointer(&cookies[0]),
		count:      uint32(len(offsets)),
		pid:        uint32(pid),
	}
	fd, err := linkCreateUprobeMulti(&attr)
	if errors.Is(err, unix.ESRCH) {
		return nil, fmt.Errorf("uprobe session in pid %d: %w", pid, os.ErrNotExist)
	}
	if err != nil {
		return nil, fmt.Errorf("uprobe session on %s: %w", path, err)
	}
	l, err := link.NewFromFD(fd)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("uprobe session on %s: %w", path, err)
	}
	return l, nil
}

var (
	sessionOnce sync.Once
	sessionErr  error
)

// haveUprobeSession reports whether the kernel attaches uprobe sessions:
// nil if it does.
func haveUprobeSession() error {
	sessionOnce.Do(func() { sessionErr = probeUprobeSession() })
	return sessionErr
}

// probeUprobeSession loads an empty session program and links it to "/",
// which a kernel with sessions refuses with EBADF (not an ELF file), one
// without with EINVAL, as cilium/ebpf's probe of uprobe_multi does.
func probeUprobeSession() error {
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name:         "probe_up_sess",
		Type:         ebpf.Kprobe,
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()},
		AttachType:   attachTraceUprobeSession,
		License:      "MIT",
	})
	if err != nil {
		return fmt.Errorf("loading a uprobe session program: %w", err)
	}
	defer prog.Close()
	root := []byte("/\x00")
	offsets := []uint64{0}
	attr := uprobeMultiAttr{
		progFD:     uint32(prog.FD()),
		attachType: uint32(attachTraceUprobeSession),
		path:       unsafe.Pointer(&root[0]),
		offsets:    unsafe.Pointer(&offsets[0]),
		count:      1,
	}
	fd, err := linkCreateUprobeMulti(&attr)
	switch {
	case errors.Is(err, unix.EBADF):
		return nil
	case err == nil:
		unix.Close(fd)
		return errors.New("a uprobe session on / was accepted")
	}
	return fmt.Errorf("uprobe session link: %w", err)
}
