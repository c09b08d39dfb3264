package heapscope

import (
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/heapscope/heapscope/internal/testutil"
)

// copyExecutable copies src to dir/name, owned by uid:gid with mode.
func copyExecutable(t *testing.T, src, dir, name string, uid, gid int, mode os.FileMode) string {
	t.Helper()
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	dst := filepath.Join(dir, name)
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o700)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	out.Close()
	// chown clears the set-ID bits: chmod after it.
	if err := os.Chown(dst, uid, gid); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dst, mode); err != nil {
		t.Fatal(err)
	}
	return dst
}

// launchCounting launches path with the preload provider and counts its
// 7777-byte allocation (session_ctor's constructor makes one).
func launchCounting(t *testing.T, path string) (seen int64, err error) {
	t.Helper()
	var n atomic.Int64
	hooks := Hooks{OnAlloc: func(c *Call) {
		if c.Size == 7777 {
			n.Add(1)
		}
	}}
	s, err := Launch("preloadable", Properties{FileMode: RealTime, Hooks: hooks}, exec.Command(path))
	if err != nil {
		return 0, err
	}
	if err := s.Wait(); err != nil {
		t.Fatal(err)
	}
	return n.Load(), nil
}

// TestPreloadRefusesWhatItCannotTrace: a static program, and one that is
// set-user-ID or set-group-ID to another user, ignore LD_PRELOAD; the
// preload provider used to trace them to "leaked 0 B in 0 blocks". It now
// refuses before anything starts, says why and names the ebpf provider. A
// program root runs set-user-ID to root gains nothing and is traced.
func TestPreloadRefusesWhatItCannotTrace(t *testing.T) {
	uid, gid := testutil.OtherUser(t)
	dynamic := testutil.MustBuild(t, "session_ctor", testutil.Options{})
	static := testutil.MustBuild(t, "session_ctor", testutil.Options{Static: true})
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		path, why string
	}{
		{static, "statically linked"},
		{copyExecutable(t, dynamic, dir, "setuid", int(uid), 0, os.ModeSetuid|0o755), "set-user-ID"},
		{copyExecutable(t, dynamic, dir, "setgid", 0, int(gid), os.ModeSetgid|0o755), "set-group-ID"},
	} {
		n, err := launchCounting(t, c.path)
		if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), c.why) || !strings.Contains(err.Error(), "--provider ebpf") {
			t.Errorf("%s: %v (%d allocations seen); want ErrUnavailable saying %q and naming --provider ebpf", filepath.Base(c.path), err, n, c.why)
		}
	}
	for _, path := range []string{
		dynamic,
		copyExecutable(t, dynamic, dir, "setuid-root", 0, 0, os.ModeSetuid|0o755),
	} {
		if n, err := launchCounting(t, path); err != nil || n != 1 {
			t.Errorf("%s: %v, %d constructor allocations seen; want it traced", filepath.Base(path), err, n)
		}
	}
}
