package tracefile

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/heapscope/heapscope/event"
)

// checkStacks checks that every stack an event uses was delivered with the
// frames it was written with.
func checkStacks(t *testing.T, rec *recorder, g *synth) {
	t.Helper()
	for _, s := range rec.stacks {
		want := g.stack(s.ID)
		if fmt.Sprint(s.Frames) != fmt.Sprint(want.Frames) {
			t.Fatalf("stack %d: frames %x, want %x", s.ID, s.Frames, want.Frames)
		}
	}
}

func sameEvents(t *testing.T, got, want []event.Event) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d events, want %d", len(got), len(want))
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("event %d:\n got %+v\nwant %+v", i, got[i], want[i])
		}
	}
}

func TestSequentialStops(t *testing.T) {
	path := tempPath(t, "seq.hst")
	const max = 256 << 10
	// Exact times and many small chunks, so that the limit is met mid-way.
	all := writeSynth(t, path, testHeader(Sequential, max), Options{ChunkSize: 16 << 10, TimeResolution: 1}, 400_000, 0)
	if size := fileSize(t, path); size > max {
		t.Errorf("file of %d bytes, limit %d", size, max)
	}
	rec, warns := readAll(t, path, Window{})
	if len(rec.events) == 0 || len(rec.events) >= len(all) {
		t.Fatalf("read %d of %d events: the limit was not reached", len(rec.events), len(all))
	}
	// What was kept is the beginning, unchanged.
	sameEvents(t, rec.events, all[:len(rec.events)])
	if len(rec.stats) != 1 {
		t.Fatalf("%d stats records", len(rec.stats))
	}
	st := rec.stats[0]
	if lost := st.Lost[event.LostFileLimit]; lost != uint64(len(all)-len(rec.events)) {
		t.Errorf("stats count %d events lost to the file limit; %d were", lost, len(all)-len(rec.events))
	}
	// Delivered counts what reached the file: with the lost, the calls.
	if st.Delivered != uint64(len(rec.events)) || st.Delivered+st.TotalLost() != uint64(len(all)) {
		t.Errorf("delivered %d and lost %d, want %d and %d", st.Delivered, st.TotalLost(), len(rec.events), len(all)-len(rec.events))
	}
	if !containsWarning(warns, "reached its maximum size") {
		t.Errorf("no warning that the trace stopped: %q", warns)
	}
}

func containsWarning(warns []string, s string) bool {
	for _, w := range warns {
		if strings.Contains(w, s) {
			return true
		}
	}
	return false
}

// twoProcessWriter creates a trace at path in mode, of max bytes in chunks
// of chunk bytes at 1 ns, and the generators of the two processes the mode
// tests write, with the first one's definitions written.
func twoProcessWriter(t *testing.T, path string, mode Mode, max int64, chunk int) (*Writer, *synth, *synth) {
	t.Helper()
	w, err := Create(path, testHeader(mode, max), Options{ChunkSize: chunk, TimeResolution: 1})
	check(t, err)
	g1, g2 := newSynth(1, 100, 3, 400), newSynth(2, 200, 2, 300)
	check(t, g1.defs(w))
	return w, g1, g2
}

func TestCircularKeepsTheNewest(t *testing.T) {
	for _, crash := range []bool{false, true} {
		t.Run(fmt.Sprintf("crash=%v", crash), func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "ring.hst")
			const max = 192 << 10
			// Two processes; the second appears after the ring has wrapped,
			// and the first exits then.
			w, g1, g2 := twoProcessWriter(t, path, Circular, max, 8<<10)
			var all []event.Event
			write := func(g *synth, n int) {
				for i := 0; i < n; i += 512 {
					b := make([]event.Event, 512)
					g.fill(b)
					check(t, w.Events(b))
					all = append(all, b...)
				}
			}
			write(g1, 200_000)
			check(t, g2.defs(w))
			g2.t = g1.t
			write(g2, 20_000)
			check(t, w.Exit(event.Exit{PID: 100, Time: g2.t + 1, Status: 3}))
			g1.t = g2.t + 2
			write(g2, 100_000)
			check(t, w.Stats(event.Stats{Delivered: uint64(len(all))}))
			if crash {
				// The writer dies after its last flush: no index.
				check(t, w.Flush())
				cp := filepath.Join(dir, "copy.hst")
				b, err := os.ReadFile(path)
				check(t, err)
				check(t, os.WriteFile(cp, b, 0o644))
				path = cp
			}
			check(t, w.Close())
			if size := fileSize(t, path); size > max {
				t.Errorf("file of %d bytes, limit %d", size, max)
			}

			rec, warns := readAll(t, path, Window{})
			n := len(rec.events)
			if n == 0 || n >= len(all)/2 {
				t.Fatalf("read %d of %d events", n, len(all))
			}
			// The newest events, in order, unchanged.
			sameEvents(t, rec.events, all[len(all)-n:])
			// Each process once, the stacks every kept event uses (checked
			// by the recorder as they came) with the right frames.
			if len(rec.procs) != 2 {
				t.Errorf("%d process records, want 2", len(rec.procs))
			}
			checkStacks(t, rec, g1) // the two synths share the frames of a stack id
			if len(rec.exits) != 1 || rec.exits[0].PID != 100 || rec.exits[0].Status != 3 {
				t.Errorf("exits %+v", rec.exits)
			}
			st := rec.stats[len(rec.stats)-1]
			if !crash {
				if lost := st.Lost[event.LostOverwritten]; lost != uint64(len(all)-n) {
					t.Errorf("stats count %d events overwritten; %d were", lost, len(all)-n)
				}
				if st.Delivered != uint64(n) {
					t.Errorf("delivered %d, want the %d events the file kept", st.Delivered, n)
				}
			} else if !containsWarning(warns, "no index") {
				t.Errorf("no warning about the missing index: %q", warns)
			}
		})
	}
}

func TestNewFileEachReadableAlone(t *testing.T) {
	dir := t.TempDir()
	pattern := filepath.Join(dir, "trace-%d.hst")
	const max = 128 << 10
	w, g1, g2 := twoProcessWriter(t, pattern, NewFile, max, 16<<10)
	check(t, g2.defs(w))
	var all []event.Event
	exitFile := 0
	for i := 0; i < 300_000; i += 512 {
		g := g1
		if i%1024 == 0 {
			g = g2
		}
		b := make([]event.Event, 512)
		g.fill(b)
		check(t, w.Events(b))
		all = append(all, b...)
		if i == 100_352 {
			// The second process exits: later files need not define it.
			check(t, w.Exit(event.Exit{PID: 200, Time: g2.t + 1}))
			g2 = g1
			exitFile = len(w.Files())
		}
	}
	check(t, w.Close())
	files := w.Files()
	if len(files) < exitFile+2 {
		t.Fatalf("%d files, the exit in file %d: expected the size limit to start more", len(files), exitFile)
	}
	var got []event.Event
	for i, f := range files {
		if want := fmt.Sprintf("trace-%d.hst", i+1); filepath.Base(f) != want {
			t.Errorf("file %d is %s, want %s", i, f, want)
		}
		if size := fileSize(t, f); size > max {
			t.Errorf("%s: %d bytes, limit %d", f, size, max)
		}
		r, err := Open(f)
		check(t, err)
		if h := r.Header(); h.Part != i+1 || h.Mode != NewFile {
			t.Errorf("%s: part %d mode %v", f, h.Part, h.Mode)
		}
		rec := newRecorder()
		check(t, r.Replay(rec, Window{}))
		r.Close()
		rec.check(t) // each file defines what its events use
		checkStacks(t, rec, g1)
		if len(rec.stats) != 1 {
			t.Errorf("%s: %d stats records", f, len(rec.stats))
		}
		if i+1 > exitFile+1 && len(rec.procs) != 1 {
			t.Errorf("%s: %d processes defined (%+v); the exited one need not be", f, len(rec.procs), rec.procs)
		}
		got = append(got, rec.events...)
	}
	// Together, the files hold every event, in order.
	sameEvents(t, got, all)
}

func TestPIDReuse(t *testing.T) {
	// A process exits and its pid is reused, stack ids and all, within
	// one chunk: each event must still meet its own process's stack.
	path := tempPath(t, "reuse.hst")
	w, err := Create(path, testHeader(Sequential, 0), Options{})
	check(t, err)
	check(t, w.Process(event.Process{PID: 7, Exe: "/bin/old"}))
	check(t, w.Stack(event.Stack{PID: 7, ID: 1, Frames: []uint64{0x111}}))
	check(t, w.Events([]event.Event{{Time: 10e6, PID: 7, TID: 7, Kind: event.KindAlloc, Func: event.FuncMalloc, Stack: 1, Addr: 0x1000, Size: 8}}))
	check(t, w.Exit(event.Exit{PID: 7, Time: 20e6}))
	check(t, w.Process(event.Process{PID: 7, Exe: "/bin/new"}))
	check(t, w.Stack(event.Stack{PID: 7, ID: 1, Frames: []uint64{0x222}}))
	check(t, w.Events([]event.Event{{Time: 30e6, PID: 7, TID: 7, Kind: event.KindAlloc, Func: event.FuncMalloc, Stack: 1, Addr: 0x2000, Size: 8}}))
	check(t, w.Close())

	r, err := Open(path)
	check(t, err)
	defer r.Close()
	var log []string
	s := &logSink{log: &log}
	check(t, r.Replay(s, Window{}))
	want := []string{"process /bin/old", "stack 1 [111]", "event 0x1000 stack 1", "exit", "process /bin/new", "stack 1 [222]", "event 0x2000 stack 1"}
	if strings.Join(log, "; ") != strings.Join(want, "; ") {
		t.Errorf("replayed\n %s\nwant\n %s", strings.Join(log, "; "), strings.Join(want, "; "))
	}
}

type logSink struct {
	event.Sink
	log *[]string
}

func (s *logSink) add(format string, args ...any) error {
	*s.log = append(*s.log, fmt.Sprintf(format, args...))
	return nil
}
func (s *logSink) Process(p event.Process) error { return s.add("process %s", p.Exe) }
func (s *logSink) Stack(st event.Stack) error    { return s.add("stack %d %x", st.ID, st.Frames) }
func (s *logSink) Exit(event.Exit) error         { return s.add("exit") }
func (s *logSink) Stats(event.Stats) error       { return nil }
func (s *logSink) Events(evs []event.Event) error {
	for _, e := range evs {
		s.add("event %#x stack %d", e.Addr, e.Stack)
	}
	return nil
}

// TestCircularWithoutRoomForIndex closes a ring of many tiny chunks, whose
// index does not fit: the reader scans it, and since its newest chunk says
// it was closed, does not claim the writer died.
func TestCircularWithoutRoomForIndex(t *testing.T) {
	path := tempPath(t, "tiny.hst")
	all := writeSynthFrom(t, newSynth(5, 100, 1, 3), path, testHeader(Circular, MinMaxSize), Options{TimeResolution: 1}, 30_000, 20)
	r, err := Open(path)
	check(t, err)
	indexed := r.indexN > 0
	r.Close()
	if indexed {
		t.Fatal("the index fitted: the test needs more, smaller chunks")
	}
	rec, warns := readAll(t, path, Window{})
	if len(warns) != 0 {
		t.Errorf("warnings %q", warns)
	}
	n := len(rec.events)
	if n == 0 || n == len(all) {
		t.Fatalf("%d of %d events", n, len(all))
	}
	sameEvents(t, rec.events, all[len(all)-n:])
	if lost := rec.stats[0].Lost[event.LostOverwritten]; lost != uint64(len(all)-n) {
		t.Errorf("%d counted as overwritten, %d were", lost, len(all)-n)
	}
}
