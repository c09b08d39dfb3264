package safefile

import (
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/heapscope/heapscope/internal/errs"
	"github.com/heapscope/heapscope/internal/testutil"
)

func TestMain(m *testing.M) {
	if p := os.Getenv("SAFEFILE_TEST_WRITE"); p != "" {
		// A writer that is killed midway: it writes, says so, and waits.
		Write(p, false, func(w io.Writer) error {
			w.Write([]byte("half of the new"))
			os.Stdout.WriteString("written\n")
			time.Sleep(time.Minute)
			return nil
		})
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// leftovers are the temporary names left in dir.
func leftovers(t *testing.T, dir string) []string {
	t.Helper()
	names, _ := filepath.Glob(filepath.Join(dir, ".*.tmp-*"))
	return names
}

// A file written is 0600 whatever the umask, replaces a file of the
// caller's, and a failed write leaves the old one whole.
func TestWriteReplacesOnlyWhenWhole(t *testing.T) {
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	dir := t.TempDir()
	p := filepath.Join(dir, "out.txt")
	must(t, os.WriteFile(p, []byte("old"), 0o644))
	fail := errors.New("failed midway")
	if err := Write(p, false, func(w io.Writer) error { w.Write([]byte("ne")); return fail }); !errors.Is(err, fail) {
		t.Fatalf("Write = %v, want its write's error", err)
	}
	if b, _ := os.ReadFile(p); string(b) != "old" {
		t.Errorf("after a failed write the file holds %q, want the old one", b)
	}
	must(t, Write(p, false, func(w io.Writer) error { _, err := w.Write([]byte("new")); return err }))
	fi, err := os.Lstat(p)
	must(t, err)
	if b, _ := os.ReadFile(p); string(b) != "new" || fi.Mode() != 0o600 {
		t.Errorf("after a write: %q, mode %v; want \"new\", 0600", b, fi.Mode())
	}
	if l := leftovers(t, dir); len(l) != 0 {
		t.Errorf("temporary files left: %q", l)
	}
}

// A symbolic link or another user's file at the target is refused without
// replace, and with it replaced itself (the link's target and the planted
// inode untouched); something other than a regular file is never replaced.
func TestCreateRefusesPlanted(t *testing.T) {
	uid, gid := testutil.OtherUser(t)
	dir := t.TempDir()
	victim := filepath.Join(t.TempDir(), "victim")
	must(t, os.WriteFile(victim, []byte("root's"), 0o600))
	link := filepath.Join(dir, "link")
	must(t, os.Symlink(victim, link))
	planted := filepath.Join(dir, "planted")
	must(t, os.WriteFile(planted, nil, 0o666))
	must(t, os.Chown(planted, int(uid), int(gid)))
	keep := filepath.Join(dir, "keep")
	must(t, os.Link(planted, keep))
	write := func(w io.Writer) error { _, err := w.Write([]byte("secret")); return err }
	for _, p := range []string{link, planted} {
		err := Write(p, false, write)
		if !errors.Is(err, ErrUnsafePath) || !errors.Is(err, errs.ErrAccessDenied) {
			t.Errorf("Write(%s) = %v, want ErrUnsafePath and ErrAccessDenied", filepath.Base(p), err)
		}
	}
	for _, p := range []string{link, planted} {
		must(t, Write(p, true, write))
		fi, err := os.Lstat(p)
		must(t, err)
		if st := fi.Sys().(*syscall.Stat_t); !fi.Mode().IsRegular() || int(st.Uid) != os.Geteuid() || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s after replace: %v, uid %d", filepath.Base(p), fi.Mode(), st.Uid)
		}
	}
	if b, _ := os.ReadFile(victim); string(b) != "root's" {
		t.Errorf("written through the link: %q", b)
	}
	if b, _ := os.ReadFile(keep); len(b) != 0 {
		t.Errorf("written into the planted inode: %q", b)
	}
	fifo := filepath.Join(dir, "fifo")
	must(t, syscall.Mkfifo(fifo, 0o600))
	if err := Write(fifo, true, write); !errors.Is(err, errs.ErrAccessDenied) {
		t.Errorf("Write over a fifo = %v, want ErrAccessDenied", err)
	}
	if l := leftovers(t, dir); len(l) != 0 {
		t.Errorf("temporary files left: %q", l)
	}
}

// Without unnamed files (O_TMPFILE), the file is written under a temporary
// name, by the same rules.
func TestNamedFallback(t *testing.T) {
	noTmpfile = true
	defer func() { noTmpfile = false }()
	t.Run("whole", TestWriteReplacesOnlyWhenWhole)
	t.Run("planted", TestCreateRefusesPlanted)
	f, err := Create(filepath.Join(t.TempDir(), "x"), false)
	must(t, err)
	defer f.Close()
	tmp := f.tmp
	if _, err := os.Lstat(tmp); err != nil {
		t.Fatalf("noTmpfile: the file has no temporary name: %q, %v", tmp, err)
	}
	f.Discard()
	if _, err := os.Lstat(tmp); err == nil {
		t.Errorf("Discard left %s", tmp)
	}
}

// A writer killed midway (SIGKILL, SIGINT) leaves the old file whole and
// no temporary file.
func TestWriteKilledMidway(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGKILL, syscall.SIGINT} {
		dir := t.TempDir()
		p := filepath.Join(dir, "out.txt")
		must(t, os.WriteFile(p, []byte("old"), 0o600))
		self, err := os.Executable()
		must(t, err)
		cmd := exec.Command(self, "-test.run=^$")
		cmd.Env = append(os.Environ(), "SAFEFILE_TEST_WRITE="+p)
		out, err := cmd.StdoutPipe()
		must(t, err)
		must(t, cmd.Start())
		b := make([]byte, 8)
		if _, err := io.ReadFull(out, b); err != nil || !strings.HasPrefix(string(b), "written") {
			t.Fatalf("the writer said %q, %v", b, err)
		}
		must(t, cmd.Process.Signal(sig))
		cmd.Wait()
		if b, _ := os.ReadFile(p); string(b) != "old" {
			t.Errorf("%v midway: the file holds %q, want the old one", sig, b)
		}
		if l := leftovers(t, dir); len(l) != 0 {
			t.Errorf("%v midway: temporary files left: %q", sig, l)
		}
	}
}
