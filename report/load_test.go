package report

import (
	"bytes"
	"errors"
	"math/rand"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/heapscope/heapscope/analyze"
	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/tracefile"
)

const loadStart = int64(5e9)

// writeRandomTrace writes, through the real writer in small chunks, 10 s of
// a few processes allocating, reallocating and freeing from many stacks,
// with exits, a snapshot and stats.
func writeRandomTrace(t *testing.T, path string) {
	t.Helper()
	w, err := tracefile.Create(path, tracefile.Header{Session: "load", Provider: "preload", MonoStart: loadStart,
		WallStart: time.Unix(1700000000, 0)}, tracefile.Options{ChunkSize: 16 << 10})
	must(t, err)
	rng := rand.New(rand.NewSource(42))
	self, err := os.Executable() // a file that exists, for the symbolizer
	must(t, err)
	for pid := uint32(1); pid <= 3; pid++ {
		must(t, w.Process(event.Process{PID: pid, Time: loadStart, Exe: self}))
		must(t, w.Module(event.Module{PID: pid, Time: loadStart, Start: 0x1000, End: 0x2000, Path: self}))
		for id := event.StackID(1); id <= 50; id++ {
			must(t, w.Stack(event.Stack{PID: pid, ID: id, Frames: []uint64{0x1000 + uint64(id)*8, 0x1020}}))
		}
	}
	var live [4][]uint64
	tm := loadStart
	next := uint64(0x100000)
	for i := 0; i < 60000; i++ {
		tm += int64(rng.Intn(330000)) // 10 s in all
		pid := uint32(1 + rng.Intn(3))
		e := event.Event{Time: tm, PID: pid, TID: pid*10 + uint32(rng.Intn(2)), Stack: event.StackID(1 + rng.Intn(50))}
		l := &live[pid]
		switch r := rng.Intn(10); {
		case r < 5 || len(*l) == 0:
			next += 16
			e.Kind, e.Func, e.Addr, e.Size = event.KindAlloc, event.FuncMalloc, next, uint64(rng.Intn(2000))
			*l = append(*l, next)
		case r < 6:
			j := rng.Intn(len(*l))
			next += 16
			e.Kind, e.Func, e.OldAddr, e.Addr, e.Size = event.KindRealloc, event.FuncRealloc, (*l)[j], next, uint64(rng.Intn(4000))
			(*l)[j] = next
		default:
			j := rng.Intn(len(*l))
			e.Kind, e.Func, e.Addr = event.KindFree, event.FuncFree, (*l)[j]
			(*l)[j] = (*l)[len(*l)-1]
			*l = (*l)[:len(*l)-1]
		}
		must(t, w.Events([]event.Event{e}))
		if i == 30000 {
			must(t, w.Exit(event.Exit{PID: 3, Time: tm, Status: 0}))
			must(t, w.Snapshot(event.Snapshot{PID: 9, Time: tm, Live: []event.LiveBlock{{Addr: 1, Size: 10, Stack: 1, Time: tm}}}))
		}
		if i%10000 == 0 {
			must(t, w.Stats(event.Stats{Time: tm, Delivered: uint64(i)}))
		}
	}
	must(t, w.Stats(event.Stats{Time: tm + 1, Delivered: 60000, Lost: [event.NumLostReasons]uint64{event.LostOther: 2}}))
	must(t, w.Close())
}

// sequential replays the file into a model in one pass, the plain way.
func sequential(t *testing.T, path string, o analyze.Options) *analyze.Profile {
	t.Helper()
	r, err := tracefile.Open(path)
	must(t, err)
	defer r.Close()
	m := analyze.New(o)
	must(t, r.Replay(m, tracefile.Window{From: o.From, To: o.To}))
	return m.Profile()
}

func TestLoadMatchesSequentialReplay(t *testing.T) {
	path := filepath.Join(t.TempDir(), "t.hst")
	writeRandomTrace(t, path)
	for _, c := range []struct {
		name     string
		from, to time.Duration
		workers  int
	}{
		{"whole, 1 worker", 0, 0, 1},
		{"whole, 2 workers", 0, 0, 2},
		{"whole, 3 workers", 0, 0, 3},
		{"window, 2 workers", 2 * time.Second, 7 * time.Second, 2},
		{"from, 3 workers", 4 * time.Second, 0, 3},
	} {
		rep, err := Load(path, LoadOptions{From: c.from, To: c.to, Workers: c.workers})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		o := analyze.Options{}
		if c.from > 0 {
			o.From = loadStart + int64(c.from)
		}
		if c.to > 0 {
			o.To = loadStart + int64(c.to)
		}
		want := sequential(t, path, o)
		got := rep.Profile
		if want.Summary.Events == 0 {
			t.Fatalf("%s: empty replay", c.name)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: profiles differ\n got %+v %+v\nwant %+v %+v", c.name, got.Summary, got.Peak, want.Summary, want.Peak)
		}
		// (The symbolizer may warn about the module, this test binary.)
		if rep.Trace.Session != "load" || rep.Trace.Start != loadStart {
			t.Errorf("%s: trace %+v", c.name, rep.Trace)
		}
	}
}

func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := Load(filepath.Join(dir, "missing.hst"), LoadOptions{}); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
	junk := filepath.Join(dir, "junk.hst")
	must(t, os.WriteFile(junk, []byte("heapscope? no."), 0o644))
	if _, err := Load(junk, LoadOptions{}); err == nil {
		t.Error("junk file loaded")
	}
	path := filepath.Join(dir, "t.hst")
	writeRandomTrace(t, path)
	if _, err := Load(path, LoadOptions{From: 3 * time.Second, To: time.Second}); err == nil {
		t.Error("a window ending before it starts was accepted")
	}
}

// TestLoadDeterministic checks that the output does not depend on how the
// work was split or scheduled.
func TestLoadDeterministic(t *testing.T) {
	path := filepath.Join(t.TempDir(), "t.hst")
	writeRandomTrace(t, path)
	var first []byte
	for i, workers := range []int{1, 2, 3, 2, 2} {
		rep, err := Load(path, LoadOptions{Workers: workers})
		must(t, err)
		var buf bytes.Buffer
		must(t, rep.WriteJSON(&buf, 0))
		must(t, rep.WriteText(&buf, TextOptions{Top: 5}))
		must(t, rep.WriteCollapsed(&buf, AllocSpace))
		if i == 0 {
			first = buf.Bytes()
		} else if !bytes.Equal(buf.Bytes(), first) {
			t.Fatalf("load %d (%d workers) wrote different reports", i, workers)
		}
	}
}

// TestLoadProcesses: Load with a selection of processes gives, with one
// worker or several, the profile of a sequential replay through the same
// filter; a selection that matches nothing is ErrNoProcess.
func TestLoadProcesses(t *testing.T) {
	path := filepath.Join(t.TempDir(), "t.hst")
	writeRandomTrace(t, path)
	sel := analyze.Processes{PIDs: []uint32{2, 3}}
	r, err := tracefile.Open(path)
	must(t, err)
	m := analyze.New(analyze.Options{})
	must(t, r.Replay(analyze.NewFilter(m, sel), tracefile.Window{}))
	r.Close()
	want := m.Profile()
	all := sequential(t, path, analyze.Options{})
	if len(want.Processes) != 2 || want.Summary.Allocations == 0 || want.Summary.Allocations >= all.Summary.Allocations {
		t.Fatalf("filtered replay: %d processes, %d allocations of %d", len(want.Processes), want.Summary.Allocations, all.Summary.Allocations)
	}
	for _, workers := range []int{1, 3} {
		rep, err := Load(path, LoadOptions{Workers: workers, Processes: sel})
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(rep.Profile, want) {
			t.Errorf("%d workers: got %+v, want %+v", workers, rep.Profile.Summary, want.Summary)
		}
	}
	if _, err := Load(path, LoadOptions{Processes: analyze.Processes{PIDs: []uint32{77}}}); !errors.Is(err, ErrNoProcess) {
		t.Errorf("pid 77: %v, want ErrNoProcess", err)
	}
}
