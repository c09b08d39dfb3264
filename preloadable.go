package heapscope

import (
	"debug/elf"
	"fmt"
	"os"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/heapscope/heapscope/internal/errs"
)

// checkPreloadable reports, before anything starts, why the preload
// provider would record nothing of the program at path: the dynamic loader
// is what reads LD_PRELOAD, and it never runs for a static program, and
// ignores the variable for a program that gains privileges at exec
// (set-user-ID or set-group-ID to someone else, or file capabilities): the
// run would end with nothing recorded, as if the program had allocated
// nothing. The session is refused rather than switched to the eBPF
// provider: that one needs root, does not follow forked children and
// drops events under load, so which provider made a trace stays the
// caller's choice. A path that cannot be read as ELF (a script: its
// interpreter is what runs) is left for exec to judge.
func checkPreloadable(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var st unix.Stat_t
	if unix.Fstat(int(f.Fd()), &st) != nil {
		return nil
	}
	ef, err := elf.NewFile(f)
	if err != nil {
		return nil
	}
	defer ef.Close()
	refuse := func(why string) error {
		return fmt.Errorf("the preload provider cannot trace %s: %s, so the dynamic loader does not load the interposer and nothing would be recorded; trace it with the ebpf provider (--provider ebpf, as root): %w", path, why, errs.ErrUnavailable)
	}
	dynamic := false
	for _, p := range ef.Progs {
		if p.Type == elf.PT_INTERP {
			dynamic = true
		}
	}
	if !dynamic {
		return refuse("it is statically linked")
	}
	// The kernel gives the set-ID bits no effect on a nosuid mount, and
	// runs the loader in secure mode only when the ids change.
	var fs unix.Statfs_t
	nosuid := unix.Fstatfs(int(f.Fd()), &fs) == nil && fs.Flags&unix.ST_NOSUID != 0
	switch {
	case !nosuid && st.Mode&syscall.S_ISUID != 0 && int(st.Uid) != os.Getuid():
		return refuse(fmt.Sprintf("it is set-user-ID (to uid %d)", st.Uid))
	case !nosuid && st.Mode&syscall.S_ISGID != 0 && int(st.Gid) != os.Getgid():
		return refuse(fmt.Sprintf("it is set-group-ID (to gid %d)", st.Gid))
	}
	if os.Geteuid() != 0 {
		// root holds every capability already: file capabilities raise
		// nothing, and the loader runs as usual.
		if n, err := unix.Fgetxattr(int(f.Fd()), "security.capability", nil); err == nil && n > 0 {
			return refuse("it has file capabilities")
		}
	}
	return nil
}
