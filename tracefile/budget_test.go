package tracefile

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/heapscope/heapscope/event"
)

// A file whose definitions decompress to more than defsRatio times its
// size is refused (ErrCorrupt, naming a decompression bomb) before its
// reader keeps them; one within it is read. Stacks of the same frames
// under many IDs compress some 60 times.
func TestDefinitionsBudget(t *testing.T) {
	path := filepath.Join(t.TempDir(), "stacks.hst")
	w, err := Create(path, Header{Session: "budget", Provider: "preload", MonoStart: 1e9, WallStart: time.Unix(1700000000, 0)}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	frames := make([]uint64, 127)
	for i := range frames {
		frames[i] = 0x400000 + uint64(i)*16
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(w.Process(event.Process{PID: 1, Time: 1e9, Exe: "/bin/true"}))
	for i := 0; i < 20000; i++ {
		must(w.Stack(event.Stack{PID: 1, ID: event.StackID(i + 1), Frames: frames}))
	}
	must(w.Close())
	stacks := func() (int, error) {
		r, err := Open(path)
		if err != nil {
			return 0, err
		}
		defer r.Close()
		c := &countStacks{}
		err = r.Replay(c, Window{})
		return c.n, err
	}
	defer func(r, f int64) { defsRatio, defsFloor = r, f }(defsRatio, defsFloor)
	defsFloor = 0
	if n, err := stacks(); err != nil || n != 20000 {
		t.Fatalf("within the budget: %d stacks, %v", n, err)
	}
	defsRatio = 8
	if _, err := stacks(); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "decompression bomb") {
		t.Errorf("beyond the budget: %v", err)
	}
}

type countStacks struct{ n int }

func (c *countStacks) Process(event.Process) error   { return nil }
func (c *countStacks) Exit(event.Exit) error         { return nil }
func (c *countStacks) Module(event.Module) error     { return nil }
func (c *countStacks) Stack(event.Stack) error       { c.n++; return nil }
func (c *countStacks) Events([]event.Event) error    { return nil }
func (c *countStacks) Snapshot(event.Snapshot) error { return nil }
func (c *countStacks) Stats(event.Stats) error       { return nil }
func (c *countStacks) Note(event.Note) error         { return nil }
