package heapscope

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/heapscope/heapscope/internal/testutil"
)

// TestTraceFilesMode0600: trace files hold command lines and addresses:
// only their owner reads them, whatever the umask, in a newfile series too.
func TestTraceFilesMode0600(t *testing.T) {
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	dir := t.TempDir()
	ctor := testutil.MustBuild(t, "session_ctor", testutil.Options{})
	for _, props := range []Properties{
		{File: filepath.Join(dir, "seq.hst")},
		{FileMode: NewFile, MaxFileSize: MiB, File: filepath.Join(dir, "nf-%d.hst")},
	} {
		s, err := Launch("mode-0600", props, exec.Command(ctor))
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Wait(); err != nil {
			t.Fatal(err)
		}
		if len(s.Files()) == 0 {
			t.Fatalf("%s: no file", props.File)
		}
		for _, f := range s.Files() {
			fi, err := os.Stat(f)
			if err != nil {
				t.Fatal(err)
			}
			if fi.Mode().Perm() != 0o600 {
				t.Errorf("%s: mode %v, want 0600", f, fi.Mode().Perm())
			}
		}
	}
}

// TestFailedLaunchKeepsOutput: a program that cannot be executed leaves the
// -o file as it was, and creates nothing when there was none.
func TestFailedLaunchKeepsOutput(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "keep.hst")
	if err := os.WriteFile(out, []byte("precious"), 0o600); err != nil {
		t.Fatal(err)
	}
	notExec := filepath.Join(dir, "not-a-program")
	if err := os.WriteFile(notExec, []byte("just text\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{notExec, filepath.Join(dir, "missing")} {
		if _, err := Launch("failed-launch", Properties{File: out}, exec.Command(path)); err == nil {
			t.Fatalf("launching %s succeeded", path)
		}
		if b, err := os.ReadFile(out); err != nil || string(b) != "precious" {
			t.Errorf("after a failed launch of %s the output holds %q (%v), want it untouched", path, b, err)
		}
	}
	fresh := filepath.Join(dir, "fresh.hst")
	Launch("failed-launch", Properties{File: fresh}, exec.Command(notExec))
	if _, err := os.Lstat(fresh); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a failed launch created %s: %v", fresh, err)
	}
	assertOnly(t, dir, "keep.hst", "not-a-program")
}

// TestFailedAttachKeepsOutput: an attach that fails leaves the -o file as
// it was.
func TestFailedAttachKeepsOutput(t *testing.T) {
	requireEBPF(t)
	dir := t.TempDir()
	out := filepath.Join(dir, "keep.hst")
	if err := os.WriteFile(out, []byte("precious"), 0o600); err != nil {
		t.Fatal(err)
	}
	// pid 2 (kthreadd) is alive and has no allocator to probe.
	if _, err := Start("failed-attach", Properties{File: out}, []int{2}); err == nil {
		t.Fatal("attaching to a kernel thread succeeded")
	}
	if b, err := os.ReadFile(out); err != nil || string(b) != "precious" {
		t.Errorf("after a failed attach the output holds %q (%v), want it untouched", b, err)
	}
	assertOnly(t, dir, "keep.hst")
}

// assertOnly fails unless dir holds exactly names.
func assertOnly(t *testing.T, dir string, names ...string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	for _, e := range ents {
		if !want[e.Name()] {
			t.Errorf("%s left in %s", e.Name(), dir)
		}
	}
}
