package load

import (
	"errors"
	"path/filepath"
	"reflect"
	"runtime"
	"testing"

	"github.com/heapscope/heapscope/analyze"
	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/tracefile"
)

func TestSlices(t *testing.T) {
	// Every time falls in exactly one piece, whatever the estimated end.
	for _, c := range []struct {
		win        tracefile.Window
		start, end int64
	}{
		{tracefile.Window{}, 1e9, 11e9},
		{tracefile.Window{From: 3e9}, 1e9, 11e9},
		{tracefile.Window{From: 3e9, To: 5e9}, 1e9, 11e9},
		{tracefile.Window{To: 5e9}, 1e9, 0},
		{tracefile.Window{}, 1e9, 1e9 + 10}, // too short to cut
	} {
		ps := slices(c.win, c.start, c.end, 2)
		for _, tm := range []int64{0, 1, 1e9, 2e9 + 7, 3e9, 5e9 - 1, 5e9, 11e9, 12e9, 1 << 62} {
			n := 0
			for _, p := range ps {
				if (p.From == 0 || tm >= p.From) && (p.To == 0 || tm < p.To) {
					n++
				}
			}
			in := (c.win.From == 0 || tm >= c.win.From) && (c.win.To == 0 || tm < c.win.To)
			if (n == 1) != in || n > 1 {
				t.Errorf("window %+v, end %d: time %d in %d pieces of %+v", c.win, c.end, tm, n, ps)
			}
		}
	}
}

// observer records what an Observer is given.
type observer struct {
	modules, stacks, started int
	stacksBeforeStart        int
}

func (o *observer) Module(event.Module) { o.modules++ }
func (o *observer) Stack(event.Stack) {
	o.stacks++
	if o.started == 0 {
		o.stacksBeforeStart++
	}
}
func (o *observer) EventsStarted() { o.started++ }

// TestTraceObserver: whatever the number of workers, Trace gives the
// profile of a plain sequential replay, and the observer sees every module
// and stack once, the stacks written before the first event before it is
// told that events started.
func TestTraceObserver(t *testing.T) {
	path := filepath.Join(t.TempDir(), "t.hst")
	const start = int64(1e9)
	w, err := tracefile.Create(path, tracefile.Header{Session: "load", Provider: "preload", MonoStart: start},
		tracefile.Options{ChunkSize: 4 << 10})
	must(t, err)
	must(t, w.Process(event.Process{PID: 1, Time: start, Exe: "/bin/true"}))
	must(t, w.Module(event.Module{PID: 1, Time: start, Start: 0x1000, End: 0x2000, Path: "/bin/true"}))
	for id := event.StackID(1); id <= 10; id++ {
		must(t, w.Stack(event.Stack{PID: 1, ID: id, Frames: []uint64{0x1000 + uint64(id)}}))
	}
	tm := start
	for i := 0; i < 20000; i++ {
		tm += 100_000
		e := event.Event{Time: tm, PID: 1, TID: 1, Kind: event.KindAlloc, Func: event.FuncMalloc,
			Addr: 0x100000 + uint64(i)*16, Size: uint64(i % 100), Stack: event.StackID(1 + i%10)}
		if i%3 == 2 {
			e.Kind, e.Func, e.Size, e.Addr = event.KindFree, event.FuncFree, 0, e.Addr-16
		}
		must(t, w.Events([]event.Event{e}))
		if i == 10000 {
			must(t, w.Stack(event.Stack{PID: 1, ID: 11, Frames: []uint64{0x1100}}))
		}
	}
	must(t, w.Stats(event.Stats{Time: tm + 1, Delivered: 20000}))
	must(t, w.Close())

	r, err := tracefile.Open(path)
	must(t, err)
	m := analyze.New(analyze.Options{})
	must(t, r.Replay(m, tracefile.Window{}))
	r.Close()
	want := m.Profile()
	for _, workers := range []int{1, 3} {
		o := &observer{}
		res, err := Trace(path, Options{Workers: workers, Observer: o})
		if err != nil {
			t.Fatalf("%d workers: %v", workers, err)
		}
		if !reflect.DeepEqual(res.Profile, want) {
			t.Errorf("%d workers: profile %+v, want %+v", workers, res.Profile.Summary, want.Summary)
		}
		if o.modules != 1 || o.stacks != 11 || o.started != 1 || o.stacksBeforeStart < 10 {
			t.Errorf("%d workers: observer saw %+v", workers, *o)
		}
		if res.Header.Session != "load" {
			t.Errorf("%d workers: header %+v", workers, res.Header)
		}
	}
	if _, err := Trace(path, Options{Processes: analyze.Processes{PIDs: []uint32{77}}}); !errors.Is(err, ErrNoProcess) {
		t.Errorf("pid 77: %v, want ErrNoProcess", err)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestSameFramesOnce: a trace of many stack IDs of the same frames (which
// compress to almost nothing) is read with one copy of the frames, not one
// per stack per stage (the decoder, the queue, the model): the profile's
// stacks share them, and reading them allocates a fraction of what copies
// per stack would.
func TestSameFramesOnce(t *testing.T) {
	path := filepath.Join(t.TempDir(), "stacks.hst")
	w, err := tracefile.Create(path, tracefile.Header{Session: "same", Provider: "preload", MonoStart: 1e9}, tracefile.Options{})
	if err != nil {
		t.Fatal(err)
	}
	frames := make([]uint64, 127)
	for i := range frames {
		frames[i] = 0x400000 + uint64(i)*16
	}
	const n = 50000
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(w.Process(event.Process{PID: 1, Time: 1e9, Exe: "/bin/true"}))
	for i := 0; i < n; i++ {
		must(w.Stack(event.Stack{PID: 1, ID: event.StackID(i + 1), Frames: frames}))
		must(w.Events([]event.Event{{Time: 1e9 + int64(i), PID: 1, TID: 1, Kind: event.KindAlloc, Func: event.FuncMalloc,
			Stack: event.StackID(i + 1), Addr: 0x1000 + 16*uint64(i), Size: 16}}))
	}
	must(w.Close())
	for _, workers := range []int{1, 2} {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		res, err := Trace(path, Options{Workers: workers, Observer: nopObserver{}})
		runtime.ReadMemStats(&after)
		if err != nil {
			t.Fatal(err)
		}
		st := res.Profile.Stacks
		if len(st) != n || &st[0].Frames[0] != &st[n-1].Frames[0] {
			t.Errorf("workers %d: %d stacks, their frames not shared", workers, len(st))
		}
		// A copy per stack per stage would be 3 × n × 127 × 8 bytes, and
		// the rest (sites, the profile, the decoder) is less than one.
		if a, perCopy := after.TotalAlloc-before.TotalAlloc, uint64(n*127*8); a > 2*perCopy {
			t.Errorf("workers %d: reading allocated %d bytes, more than two copies of the frames per stack (%d)", workers, a, 2*perCopy)
		}
	}
}

type nopObserver struct{}

func (nopObserver) Module(event.Module) {}
func (nopObserver) Stack(event.Stack)   {}
func (nopObserver) EventsStarted()      {}
