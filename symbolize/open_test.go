package symbolize

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/heapscope/heapscope/event"
)

// TestModuleNotRegular: a trace's module whose path is a FIFO (a traced
// process may name one) or a device is not opened: resolving a frame in it
// returns at once, with a warning, instead of waiting for a writer for
// ever.
func TestModuleNotRegular(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "libfifo.so")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{fifo, "/dev/null"} {
		s := New(Options{})
		s.AddModule(event.Module{PID: 1, Start: 0x1000, End: 0x2000, Path: path})
		done := make(chan []Frame, 1)
		go func() { done <- s.Frames(1, 0x1100) }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			// Unblock the open of the FIFO, so the test can end.
			if f, err := os.OpenFile(fifo, os.O_WRONLY, 0); err == nil {
				f.Close()
			}
			t.Fatalf("%s: resolving a frame did not return in 20s: the module's path was opened", path)
		}
		if w := strings.Join(s.Warnings(), "; "); !strings.Contains(w, "not a regular file") {
			t.Errorf("%s: warnings %q, want one saying it is not a regular file", path, w)
		}
		s.Close()
	}
}
