package tracefile_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/heapscope/heapscope"
	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/internal/registry"
	"github.com/heapscope/heapscope/internal/testutil"
	"github.com/heapscope/heapscope/tracefile"
)

// collector keeps what a replay gives and checks the Sink's promises: a
// process before its records, a stack before the first event that uses it.
type collector struct {
	procs    map[uint32]bool
	modules  []event.Module
	stacks   map[[2]uint64]string
	events   int
	byStack  map[[3]uint64]int // events of each process (pid, start) and stack; stack 0: of no stack
	started  map[uint32]int64  // each pid's process's start
	images   map[[2]uint64]bool
	problems []string
}

func newCollector() *collector {
	return &collector{procs: map[uint32]bool{}, stacks: map[[2]uint64]string{}, byStack: map[[3]uint64]int{},
		started: map[uint32]int64{}, images: map[[2]uint64]bool{}}
}

func (c *collector) problem(format string, args ...any) {
	if len(c.problems) < 5 {
		c.problems = append(c.problems, fmt.Sprintf(format, args...))
	}
}

func (c *collector) Process(p event.Process) error {
	c.procs[p.PID] = true
	c.started[p.PID] = p.Time
	c.images[[2]uint64{uint64(p.PID), uint64(p.Time)}] = true
	return nil
}
func (c *collector) Exit(x event.Exit) error {
	if !c.procs[x.PID] {
		c.problem("exit of pid %d before its process", x.PID)
	}
	return nil
}
func (c *collector) Module(m event.Module) error { c.modules = append(c.modules, m); return nil }
func (c *collector) Stack(s event.Stack) error {
	c.stacks[[2]uint64{uint64(s.PID), uint64(s.ID)}] = fmt.Sprint(s.Frames)
	return nil
}
func (c *collector) Events(evs []event.Event) error {
	for _, e := range evs {
		if !c.procs[e.PID] {
			c.problem("event of pid %d before its process", e.PID)
		}
		if _, ok := c.stacks[[2]uint64{uint64(e.PID), uint64(e.Stack)}]; e.Stack != 0 && !ok {
			c.problem("event of pid %d before its stack %d", e.PID, e.Stack)
		}
		c.byStack[[3]uint64{uint64(e.PID), uint64(c.started[e.PID]), uint64(e.Stack)}]++
	}
	c.events += len(evs)
	return nil
}
func (c *collector) Snapshot(event.Snapshot) error { return nil }
func (c *collector) Note(event.Note) error         { return nil }
func (c *collector) Stats(event.Stats) error       { return nil }

func replay(t *testing.T, path string) (*collector, []string) {
	t.Helper()
	r, err := tracefile.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	c := newCollector()
	if err := r.Replay(c, tracefile.Window{}); err != nil {
		t.Fatalf("replaying %s: %v", filepath.Base(path), err)
	}
	return c, r.Warnings()
}

// TestDamagedDefinitions records a real python3 run, then flips one byte
// in its first chunk's definitions (where its modules and most of its
// stacks are). The review saw one bad byte discard the chunk's events and
// every symbol of the trace. The intact definitions must be recovered, and
// the chunk's events whose definitions are intact kept, with a warning
// saying what was lost; what is recovered is exactly what was written.
func TestDamagedDefinitions(t *testing.T) {
	testutil.Tool(t, "python3")
	t.Setenv(registry.DirEnv, t.TempDir())
	dir := t.TempDir()
	path := filepath.Join(dir, "python.hst")
	cmd := exec.Command("python3", "-c", `
import json, collections
d = {}
for i in range(3000):
    d[str(i)] = [i, str(i*2), {"k": i}]
print(len(json.loads(json.dumps(d))))
`)
	cmd.Env = append(os.Environ(), "PYTHONMALLOC=malloc")
	s, err := heapscope.Launch("damaged-defs", heapscope.Properties{File: path}, cmd)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Wait(); err != nil {
		t.Fatal(err)
	}
	orig, warns := replay(t, path)
	if len(warns) > 0 || len(orig.problems) > 0 {
		t.Fatalf("the undamaged trace: warnings %q, problems %q", warns, orig.problems)
	}
	secs, err := tracefile.DefsSections(path)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	first := secs[0]
	for _, sec := range secs {
		if sec[1] > first[1] {
			first = sec
		}
	}
	var defBytes int64
	for _, sec := range secs {
		defBytes += sec[1]
	}
	t.Logf("%d chunks, %d bytes, %d of definitions; the largest definitions: %d bytes; the trace: %d modules, %d stacks, %d events",
		len(secs), len(data), defBytes, first[1], len(orig.modules), len(orig.stacks), orig.events)
	if first[1] < 1024 {
		t.Fatalf("the largest definitions section is %d bytes: too few to damage one part of them", first[1])
	}
	// The definitions of that chunk all lost (its section zeroed): what
	// the other chunks' definitions give.
	zeroed := slices.Clone(data)
	clear(zeroed[first[0] : first[0]+first[1]])
	p := filepath.Join(dir, "zeroed.hst")
	if err := os.WriteFile(p, zeroed, 0o600); err != nil {
		t.Fatal(err)
	}
	none, _ := replay(t, p)
	t.Logf("without the chunk's definitions: %d modules, %d stacks, %d events", len(none.modules), len(none.stacks), none.events)

	// One bad byte at 16 places across the chunk's definitions, in turn.
	for k := 0; k < 16; k++ {
		at := first[0] + first[1]*int64(k)/16
		bad := slices.Clone(data)
		bad[at] ^= 0x5a
		p := filepath.Join(dir, fmt.Sprintf("bad%d.hst", k))
		if err := os.WriteFile(p, bad, 0o600); err != nil {
			t.Fatal(err)
		}
		got, warns := replay(t, p)
		t.Logf("byte %d (%d/16): %d modules, %d stacks, %d events; %q", at, k, len(got.modules), len(got.stacks), got.events, warns)
		for _, pr := range got.problems {
			t.Errorf("byte %d: %s", at, pr)
		}
		if !slices.ContainsFunc(warns, func(w string) bool { return strings.Contains(w, "definitions section is damaged") }) {
			t.Errorf("byte %d: no warning of the damage: %q", at, warns)
		}
		// Everything recovered is as written.
		for key, frames := range got.stacks {
			if orig.stacks[key] != frames {
				t.Errorf("byte %d: stack %v recovered as %s, written as %s", at, key, frames, orig.stacks[key])
				break
			}
		}
		// The other chunks' definitions are all there. (This chunk's
		// definitions are one frame: TestDamagedFrames recovers the
		// intact frames of a section of several.)
		if len(got.stacks) < len(none.stacks) || len(got.modules) < len(none.modules) {
			t.Errorf("byte %d: %d stacks and %d modules recovered, fewer than the other chunks define", at, len(got.stacks), len(got.modules))
		}
		// Every event whose stack is known is kept: the damaged chunk's
		// too.
		// (A process whose record was lost is made up, by pid.)
		want := 0
		for key, n := range orig.byStack {
			if _, ok := got.stacks[[2]uint64{key[0], key[2]}]; ok || key[2] == 0 {
				want += n
			}
		}
		if got.events != want {
			t.Errorf("byte %d: %d events, want the %d whose stack was recovered (of %d)", at, got.events, want, orig.events)
		}
	}
}
