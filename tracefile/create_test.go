package tracefile

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/internal/errs"
	"github.com/heapscope/heapscope/internal/testutil"
)

// writeSome writes a few events and closes w.
func writeSome(t *testing.T, w *Writer) {
	t.Helper()
	g := newSynth(1, 100, 3, 400)
	check(t, g.defs(w))
	b := make([]event.Event, 512)
	g.fill(b)
	check(t, w.Events(b))
	check(t, w.Close())
}

func readBack(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	check(t, err)
	return string(b)
}

// noTemporaries fails if a temporary file was left in dir.
func noTemporaries(t *testing.T, dir string) {
	t.Helper()
	names, _ := filepath.Glob(filepath.Join(dir, ".*.tmp-*"))
	if len(names) > 0 {
		t.Errorf("temporary files left behind: %q", names)
	}
}

// TestCreateMode0600: traces hold command lines and addresses; they are
// readable by their owner only, whatever the umask, in every mode and every
// file of a newfile series.
func TestCreateMode0600(t *testing.T) {
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	dir := t.TempDir()
	const max = 128 << 10
	seq, err := Create(filepath.Join(dir, "seq.hst"), testHeader(Sequential, 0), Options{})
	check(t, err)
	writeSome(t, seq)
	nf, err := Create(filepath.Join(dir, "nf-%d.hst"), testHeader(NewFile, max), Options{ChunkSize: 16 << 10, TimeResolution: 1})
	check(t, err)
	g := newSynth(1, 100, 3, 400)
	check(t, g.defs(nf))
	for i := 0; i < 100_000; i += 512 {
		b := make([]event.Event, 512)
		g.fill(b)
		check(t, nf.Events(b))
	}
	check(t, nf.Close())
	files := append(seq.Files(), nf.Files()...)
	if len(files) < 3 {
		t.Fatalf("files %q: expected a newfile series of several", files)
	}
	for _, f := range files {
		fi, err := os.Stat(f)
		check(t, err)
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v, want 0600", f, fi.Mode().Perm())
		}
	}
	noTemporaries(t, dir)
}

// TestCreateRefusesSymlink: a link planted at the trace's path is neither
// followed nor replaced unless Replace says so; with Replace the link
// itself is replaced and its target is untouched.
func TestCreateRefusesSymlink(t *testing.T) {
	dir := t.TempDir()
	victim := filepath.Join(dir, "victim")
	check(t, os.WriteFile(victim, []byte("victim"), 0o644))
	link := filepath.Join(dir, "trace.hst")
	check(t, os.Symlink(victim, link))
	_, err := Create(link, testHeader(Sequential, 0), Options{})
	if !errors.Is(err, ErrUnsafePath) || !errors.Is(err, errs.ErrAccessDenied) || !strings.Contains(err.Error(), "symbolic link") {
		t.Errorf("Create through a symlink: %v, want ErrUnsafePath naming the link", err)
	}
	if got := readBack(t, victim); got != "victim" {
		t.Fatalf("the link's target was written: %q", got)
	}
	w, err := Create(link, testHeader(Sequential, 0), Options{Replace: true})
	check(t, err)
	writeSome(t, w)
	if got := readBack(t, victim); got != "victim" {
		t.Errorf("Replace wrote through the link: target now %d bytes", len(got))
	}
	if fi, err := os.Lstat(link); err != nil || !fi.Mode().IsRegular() {
		t.Errorf("the link was not replaced by a regular file: %v %v", fi.Mode(), err)
	}
	r, err := Open(link)
	check(t, err)
	r.Close()
	noTemporaries(t, dir)
}

// TestCreateRefusesOtherUsersFile: root's trace never goes into a file
// another user planted (they would read it) nor, unasked, replaces it.
func TestCreateRefusesOtherUsersFile(t *testing.T) {
	uid, gid := testutil.OtherUser(t)
	dir := t.TempDir()
	planted := filepath.Join(dir, "trace.hst")
	check(t, os.WriteFile(planted, nil, 0o666))
	check(t, os.Chown(planted, int(uid), int(gid)))
	check(t, os.Chmod(planted, 0o666))
	// The planter keeps a way to the inode: a hard link.
	keep := filepath.Join(dir, "keep")
	check(t, os.Link(planted, keep))
	_, err := Create(planted, testHeader(Sequential, 0), Options{})
	if !errors.Is(err, ErrUnsafePath) || !strings.Contains(err.Error(), "uid") {
		t.Errorf("Create over another user's file: %v, want ErrUnsafePath naming its owner", err)
	}
	w, err := Create(planted, testHeader(Sequential, 0), Options{Replace: true})
	check(t, err)
	writeSome(t, w)
	if got := readBack(t, keep); got != "" {
		t.Errorf("the planted inode received %d bytes of the trace", len(got))
	}
	fi, err := os.Stat(planted)
	check(t, err)
	if st := fi.Sys().(*syscall.Stat_t); st.Uid != 0 || fi.Mode().Perm() != 0o600 {
		t.Errorf("replaced file: uid %d mode %v, want root's, 0600", st.Uid, fi.Mode().Perm())
	}
}

// TestCreateHold: a held writer leaves the path alone until Commit, and a
// writer closed before Commit leaves nothing behind.
func TestCreateHold(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "trace.hst")
	check(t, os.WriteFile(path, []byte("precious"), 0o600))
	w, err := Create(path, testHeader(Sequential, 0), Options{Hold: true})
	check(t, err)
	if len(w.Files()) != 0 {
		t.Errorf("Files before Commit: %q", w.Files())
	}
	writeSome(t, w)
	if got := readBack(t, path); got != "precious" {
		t.Errorf("an uncommitted writer changed the file: %d bytes", len(got))
	}
	noTemporaries(t, dir)

	w, err = Create(path, testHeader(Sequential, 0), Options{Hold: true})
	check(t, err)
	check(t, w.Commit())
	writeSome(t, w)
	if files := w.Files(); len(files) != 1 || files[0] != path {
		t.Errorf("Files = %q", files)
	}
	r, err := Open(path)
	check(t, err)
	r.Close()
	noTemporaries(t, dir)
}

// TestCreateRefusesNonRegular: a folder, a fifo or a device at the path is
// never replaced, even with Replace.
func TestCreateRefusesNonRegular(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	check(t, syscall.Mkfifo(fifo, 0o600))
	for _, p := range []string{dir, fifo} {
		if _, err := Create(p, testHeader(Sequential, 0), Options{Replace: true}); !errors.Is(err, errs.ErrAccessDenied) {
			t.Errorf("Create(%s): %v, want a refusal", p, err)
		}
	}
}

// TestNewFileRefusesPlantedPart: a symlink planted at a later file's name of
// a newfile series is not written through: the writer stops with
// ErrUnsafePath when it reaches it.
func TestNewFileRefusesPlantedPart(t *testing.T) {
	dir := t.TempDir()
	victim := filepath.Join(dir, "victim")
	check(t, os.WriteFile(victim, []byte("victim"), 0o644))
	check(t, os.Symlink(victim, filepath.Join(dir, "nf-2.hst")))
	w, err := Create(filepath.Join(dir, "nf-%d.hst"), testHeader(NewFile, 128<<10), Options{ChunkSize: 16 << 10, TimeResolution: 1})
	check(t, err)
	g := newSynth(1, 100, 3, 400)
	check(t, g.defs(w))
	for i := 0; i < 100_000 && err == nil; i += 512 {
		b := make([]event.Event, 512)
		g.fill(b)
		err = w.Events(b)
	}
	if err == nil {
		err = w.Flush()
	}
	if !errors.Is(err, ErrUnsafePath) {
		t.Errorf("writing into a series with a planted part: %v, want ErrUnsafePath", err)
	}
	w.Close()
	if got := readBack(t, victim); got != "victim" {
		t.Errorf("the planted link's target was written: %d bytes", len(got))
	}
	noTemporaries(t, dir)
}
