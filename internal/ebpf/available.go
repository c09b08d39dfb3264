package ebpf

import (
	"errors"
	"fmt"
	"os"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/features"
	"golang.org/x/sys/unix"

	"github.com/heapscope/heapscope/internal/errs"
)

// Capabilities that loading BPF programs and attaching uprobes need, when
// not root (CAP_SYS_ADMIN covers both).
const (
	capSysAdmin = 21
	capPerfmon  = 38
	capBPF      = 39
)

// Available reports whether this process can use the eBPF provider. The
// error wraps errs.ErrAccessDenied when privileges are missing (it says
// which) and errs.ErrUnavailable when the kernel lacks something.
func Available() error {
	if err := checkCaps(); err != nil {
		return err
	}
	for _, t := range []struct {
		name string
		mt   ebpf.MapType
	}{{"BPF ring buffers", ebpf.RingBuf}, {"BPF task storage", ebpf.TaskStorage}} {
		if err := features.HaveMapType(t.mt); err != nil {
			return unavailable(t.name, err)
		}
	}
	if err := features.HaveProgramType(ebpf.Kprobe); err != nil {
		return unavailable("kprobe/uprobe programs", err)
	}
	if err := features.HaveProgramHelper(ebpf.Kprobe, asm.FnLoop); err != nil {
		return unavailable("the bpf_loop helper (Linux 5.17)", err)
	}
	if _, err := os.Stat("/sys/bus/event_source/devices/uprobe"); err != nil {
		return unavailable("the uprobe PMU", err)
	}
	return nil
}

func unavailable(what string, err error) error {
	if errors.Is(err, unix.EPERM) || errors.Is(err, os.ErrPermission) {
		return fmt.Errorf("ebpf: %s: %w: needs root, or CAP_BPF and CAP_PERFMON", what, errs.ErrAccessDenied)
	}
	return fmt.Errorf("ebpf: kernel lacks %s: %v: %w", what, err, errs.ErrUnavailable)
}

func checkCaps() error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("ebpf: reading capabilities: %v: %w", err, errs.ErrUnavailable)
	}
	has := func(c uint) bool { return data[c/32].Effective&(1<<(c%32)) != 0 }
	if has(capSysAdmin) || (has(capBPF) && has(capPerfmon)) {
		return nil
	}
	var missing []string
	if !has(capBPF) {
		missing = append(missing, "CAP_BPF")
	}
	if !has(capPerfmon) {
		missing = append(missing, "CAP_PERFMON")
	}
	return fmt.Errorf("ebpf: missing %v: %w: needs root, or CAP_BPF and CAP_PERFMON", missing, errs.ErrAccessDenied)
}
