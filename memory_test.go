package heapscope

import (
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/internal/testutil"
	"github.com/heapscope/heapscope/tracefile"
)

// TestMemorySampled: a launched program's resident memory is in its trace,
// sampled at each flush, and agrees with what the kernel says of it.
func TestMemorySampled(t *testing.T) {
	bin := testutil.MustBuild(t, "churn", testutil.Options{})
	path := filepath.Join(t.TempDir(), "m.hst")
	props := Properties{File: path, FlushInterval: 50 * time.Millisecond}
	s, err := Launch("memory-sampled", props, exec.Command(bin, "3000000", "1"))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Wait(); err != nil {
		t.Fatal(err)
	}
	r, err := tracefile.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	c := &noteCounts{Sink: event.Discard, exes: map[uint32]string{}}
	if err := r.Replay(c, tracefile.Window{}); err != nil {
		t.Fatal(err)
	}
	if len(c.memory) < 2 {
		t.Fatalf("%d memory samples in a run of several flush intervals, want several", len(c.memory))
	}
	for _, m := range c.memory {
		if c.exes[m.PID] == "" {
			t.Errorf("a sample of pid %d, which the trace has no process record of", m.PID)
		}
		// churn holds almost nothing: RSS is the program, libc and the
		// interposer, a few MiB, of which some file-backed.
		if m.RSS < 1<<20 || m.RSS > 256<<20 || m.File == 0 || m.Anon+m.File+m.Shmem != m.RSS || m.Time == 0 {
			t.Errorf("sample %+v: want a few MiB, its parts summing to RSS, and a time", m)
		}
	}
}

type noteCounts struct {
	event.Sink
	exes   map[uint32]string
	memory []event.Memory
}

func (c *noteCounts) Process(p event.Process) error { c.exes[p.PID] = p.Exe; return nil }
func (c *noteCounts) Note(n event.Note) error {
	if m, ok := n.(event.Memory); ok {
		c.memory = append(c.memory, m)
	}
	return nil
}
