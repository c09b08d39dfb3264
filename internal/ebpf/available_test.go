package ebpf

import (
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/internal/errs"
	"github.com/heapscope/heapscope/internal/testutil"
)

const unprivilegedEnv = "HEAPSCOPE_EBPF_TEST_UNPRIVILEGED"

// TestAvailableUnprivileged runs this test binary again as user nobody,
// without capabilities: Available and New must fail with ErrAccessDenied,
// saying what is needed.
func TestAvailableUnprivileged(t *testing.T) {
	if os.Getenv(unprivilegedEnv) != "" {
		err := Available()
		if !errors.Is(err, errs.ErrAccessDenied) || !strings.Contains(err.Error(), "CAP_BPF") {
			t.Fatalf("Available() as uid %d = %v, want ErrAccessDenied naming CAP_BPF", os.Getuid(), err)
		}
		if _, err := New(Config{}, event.Discard); !errors.Is(err, errs.ErrAccessDenied) {
			t.Fatalf("New() as uid %d = %v, want ErrAccessDenied", os.Getuid(), err)
		}
		return
	}
	testutil.SkipWithoutEBPF(t, Available())
	if os.Getuid() != 0 {
		t.Skip("needs root to become nobody")
	}
	// The test binary may sit in a directory nobody cannot enter.
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "heapscope-ebpf-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "ebpf.test")
	copyFile(t, self, bin)
	cmd := exec.Command(bin, "-test.run=^TestAvailableUnprivileged$", "-test.v")
	cmd.Env = append(os.Environ(), unprivilegedEnv+"=1")
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: TestAvailableUnprivileged") {
		t.Fatalf("as nobody: %v\n%s", err, out)
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	in, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}
