package tracefile

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/heapscope/heapscope/event"
)

// smallFS mounts a tmpfs of size bytes on a new temporary directory for the
// test (unmounted at its end) and returns the directory. It needs root:
// without it the test skips, or fails when HEAPSCOPE_REQUIRE_EBPF is set
// (CI runs as root).
func smallFS(t *testing.T, size int) string {
	t.Helper()
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size="+itoa(size)+",mode=0700"); err != nil {
		if os.Getenv("HEAPSCOPE_REQUIRE_EBPF") != "" {
			t.Fatalf("mounting a tmpfs: %v", err)
		}
		t.Skipf("mounting a tmpfs needs root: %v", err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, 0); err != nil {
			t.Errorf("unmounting %s: %v", dir, err)
		}
	})
	return dir
}

func itoa(n int) string {
	b := []byte{}
	for ; n > 0 || len(b) == 0; n /= 10 {
		b = append([]byte{byte('0' + n%10)}, b...)
	}
	return string(b)
}

// TestDiskFull writes to a file on a 1 MiB filesystem until the disk is
// full. The write error must stop the file and come back from every later
// call, and the accounting must be exact: what the file holds is
// delivered, everything else passed to the writer is lost, in FileStats and
// in the file's own stats record.
func TestDiskFull(t *testing.T) {
	for _, mode := range []Mode{Sequential, NewFile} {
		t.Run(mode.String(), func(t *testing.T) {
			dir := smallFS(t, 1<<20)
			path := filepath.Join(dir, "full.hst")
			h := testHeader(mode, 0)
			if mode == NewFile {
				path = filepath.Join(dir, "full.%d.hst")
				h.MaxSize = 256 << 10
			}
			// Exact times compress least: the disk fills with few events.
			w, err := Create(path, h, Options{TimeResolution: 1, ChunkSize: 64 << 10, FlushInterval: -1})
			if err != nil {
				t.Fatal(err)
			}
			g := newSynth(1, 100, 4, 500)
			if err := g.defs(w); err != nil {
				t.Fatal(err)
			}
			const batch, after = 1000, 20
			var calls uint64
			var werr error
			batches := 0
			for i := 0; i < 100000 && batches < after; i++ {
				evs := make([]event.Event, batch)
				g.fill(evs)
				calls += batch
				err := w.Events(evs)
				if err == nil && i%10 == 9 {
					err = w.Flush()
				}
				if err != nil {
					if werr == nil {
						werr = err
					}
					batches++ // go on a while: those are lost too
				}
			}
			if !errors.Is(werr, syscall.ENOSPC) {
				t.Fatalf("writing to a full disk: error %v, want one wrapping ENOSPC", werr)
			}
			if err := w.Stats(event.Stats{Time: g.t, Delivered: calls}); !errors.Is(err, syscall.ENOSPC) {
				t.Errorf("Stats after the disk filled: %v, want the write error", err)
			}
			if err := w.Close(); !errors.Is(err, syscall.ENOSPC) {
				t.Errorf("Close after the disk filled: %v, want the write error", err)
			}
			fs := w.FileStats(event.Stats{Delivered: calls})
			var inFile uint64
			var last event.Stats
			var warns []string
			for _, f := range w.Files() {
				var rec *recorder
				rec, warns = readAll(t, f, Window{})
				inFile += uint64(len(rec.events))
				t.Logf("%s: %d events, warnings %q", filepath.Base(f), len(rec.events), warns)
				if len(rec.stats) > 0 {
					last = rec.stats[len(rec.stats)-1]
				}
			}
			if !slices.ContainsFunc(warns, func(s string) bool { return strings.Contains(s, "writing the trace failed") }) {
				t.Errorf("the last file's warnings %q do not say that writing failed", warns)
			}
			lost := fs.TotalLost()
			t.Logf("calls %d, delivered %d, lost %d, in the files %d", calls, fs.Delivered, lost, inFile)
			if fs.Delivered != inFile || fs.Delivered+lost != calls || lost == 0 {
				t.Errorf("FileStats: delivered %d + lost %d, want %d (in the files) + %d", fs.Delivered, lost, inFile, calls-inFile)
			}
			// The file's last stats record, written over the torn chunk
			// when the disk let it, counts the same.
			if last.Delivered != inFile || last.Delivered+last.TotalLost() != calls {
				t.Errorf("the file's last stats: delivered %d + lost %d, want %d + %d", last.Delivered, last.TotalLost(), inFile, calls-inFile)
			}
		})
	}
}
