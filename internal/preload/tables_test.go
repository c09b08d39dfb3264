//go:build linux && amd64

package preload

import (
	"debug/elf"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/heapscope/heapscope/unwind"
)

// The table server builds from the path a traced process names only a
// file it can trust, with the build-id the process reported, and never
// blocks on what it opens.
func TestTableServerChecksFiles(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	const bin = "/usr/bin/sqlite3"
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatalf("Debian's sqlite3 is needed: %v", err)
	}
	id := unwind.BuildID(f)
	f.Close()
	var s tableServer
	defer s.close()

	fd := s.get(id, bin)
	if fd < 0 {
		t.Fatalf("no table for %s", bin)
	}
	seals, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
	if err != nil || seals&(unix.F_SEAL_WRITE|unix.F_SEAL_SHRINK|unix.F_SEAL_GROW) != unix.F_SEAL_WRITE|unix.F_SEAL_SHRINK|unix.F_SEAL_GROW {
		t.Fatalf("memfd seals %#x, %v", seals, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, st.Size)
	if _, err := unix.Pread(fd, b, 0); err != nil {
		t.Fatal(err)
	}
	var tab unwind.Table
	if err := tab.UnmarshalBinary(b); err != nil {
		t.Fatalf("the memfd holds no table: %v", err)
	}
	if again := s.get(id, bin); again != fd {
		t.Errorf("a second request got fd %d, want the same memfd %d", again, fd)
	}

	dir := t.TempDir()
	// another file's build-id
	if fd := s.get([]byte{1, 2, 3, 4}, bin); fd >= 0 {
		t.Error("a table for a build-id the file does not have")
	}
	// a copy others can write
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	open := filepath.Join(dir, "sqlite3-copy")
	if err := os.WriteFile(open, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o666); err != nil {
		t.Fatal(err)
	}
	var s2 tableServer // s would answer from the memfd it has for this build-id
	defer s2.close()
	if fd := s2.get(id, open); fd >= 0 {
		t.Error("a table built from a file others can write")
	}
	// a FIFO: answered at once, no table
	fifo := filepath.Join(dir, "fifo")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan int, 1)
	go func() { done <- s.get([]byte{7, 7, 7, 7}, fifo) }()
	select {
	case fd := <-done:
		if fd >= 0 {
			t.Error("a table for a FIFO")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the server blocked opening a FIFO")
	}
	if st := s.stats; st.Files != 1 || st.Failures != 2 {
		t.Errorf("stats %+v, want 1 file and 2 failures", st)
	}
	if st := s2.stats; st.Files != 0 || st.Failures != 1 {
		t.Errorf("stats %+v, want 1 failure", st)
	}
}
