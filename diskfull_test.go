package heapscope

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/heapscope/heapscope/internal/testutil"
)

// TestDiskFullCounted traces 2,000,000 calls into a file on a 1 MiB
// filesystem. The disk fills long before the end: the session must end
// with an error that says so, and count what the file could not take as
// lost, exactly: delivered is what the file holds, delivered + lost every
// call (the review saw "delivered 10,000,003, lost 0" for a file holding
// 2,371,828 events).
func TestDiskFullCounted(t *testing.T) {
	bin := testutil.MustBuild(t, "churn", testutil.Options{})
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=1048576,mode=0700"); err != nil {
		if os.Getenv(testutil.RequireEBPFEnv) != "" {
			t.Fatalf("mounting a tmpfs: %v", err)
		}
		t.Skipf("mounting a tmpfs needs root: %v", err)
	}
	defer func() {
		if err := unix.Unmount(dir, 0); err != nil {
			t.Errorf("unmounting %s: %v", dir, err)
		}
	}()
	path := filepath.Join(dir, "full.hst")
	props := Properties{File: path, TimeResolution: time.Nanosecond}
	s, err := Launch("disk-full", props, exec.Command(bin, "1000000", "1"))
	if err != nil {
		t.Fatal(err)
	}
	werr := s.Wait()
	if !errors.Is(werr, syscall.ENOSPC) {
		t.Errorf("session on a full disk ended with %v, want an error wrapping ENOSPC", werr)
	}
	st := s.Stats()
	file := replayCounts(t, path)
	t.Logf("session: delivered %d, lost %v; file: %d events, stats delivered %d, lost %v; error %v",
		st.Delivered, st.Lost, file.n, file.stats.Delivered, file.stats.Lost, werr)
	if st.TotalLost() == 0 {
		t.Fatal("nothing lost on a 1 MiB disk")
	}
	if st.Delivered != file.n || file.stats.Delivered != file.n {
		t.Errorf("delivered %d (session) and %d (file's record), want the %d events in the file", st.Delivered, file.stats.Delivered, file.n)
	}
	if calls := st.Delivered + st.TotalLost(); calls < 2_000_000 || calls > 2_000_100 || file.stats.Delivered+file.stats.TotalLost() != calls {
		t.Errorf("delivered + lost: %d (session), %d (file's record), want 2,000,000 and a few", calls, file.stats.Delivered+file.stats.TotalLost())
	}
}
