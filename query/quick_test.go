package query

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/tracefile"
)

// quickFields are what Quick knows of a site's costs, the same for the
// whole trace as Window's.
func quickFields(c *Costs) Costs {
	return Costs{Allocations: c.Allocations, Reallocations: c.Reallocations, Failed: c.Failed, Bytes: c.Bytes,
		Frees: c.Frees, Temporary: c.Temporary, Start: c.Start, End: c.End, Peak: c.Peak,
		Classes: [4]Amount{AIFO: c.Classes[AIFO], AOFI: c.Classes[AOFI], AOFO: c.Classes[AOFO]}}
}

// checkQuick opens path with the index held, asks Quick, and compares it,
// once the index is built, with Window's answer for the whole trace.
func checkQuick(t *testing.T, path string) {
	t.Helper()
	hold := make(chan struct{})
	release := sync.OnceFunc(func() { close(hold) })
	defer release()
	x, err := Open(path, Options{IndexAfter: hold})
	if err != nil {
		t.Fatal(err)
	}
	if x.Ready() || x.Events() != 0 {
		t.Fatal("the index is ready before it was built")
	}
	q, ok := x.Quick(Filter{})
	if !ok {
		t.Fatal("no quick answer for the whole trace")
	}
	if _, ok := x.Quick(Filter{PID: 1}); ok {
		t.Error("a quick answer for a process")
	}
	// Flame graphs need no index.
	fl := x.Flame(q, CostLeaks, false, 0, 1000)
	release()
	if err := x.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	w := x.Window(Filter{})
	if len(q.Sites) != len(w.Sites) {
		t.Fatalf("%d sites quick, %d indexed", len(q.Sites), len(w.Sites))
	}
	for i := range w.Sites {
		if g, want := quickFields(&q.Sites[i]), quickFields(&w.Sites[i]); g != want {
			t.Errorf("site %d: quick %+v, indexed %+v", i, g, want)
		}
	}
	if g, want := quickFields(&q.Total), quickFields(&w.Total); g != want {
		t.Errorf("total: quick %+v, indexed %+v", g, want)
	}
	if q.Peak != w.Peak || q.Unmatch != w.Unmatch || q.Missed != w.Missed || (q.PeakSeq < 0) != (w.PeakSeq < 0) {
		t.Errorf("quick peak %+v (%d), unmatched %d, missed %d; indexed %+v (%d), %d, %d",
			q.Peak, q.PeakSeq, q.Unmatch, q.Missed, w.Peak, w.PeakSeq, w.Unmatch, w.Missed)
	}
	if g, want := roundTripAny(t, fl), roundTripAny(t, x.Flame(w, CostLeaks, false, 0, 1000)); g != want {
		t.Error("the quick flame graph differs from the indexed one")
	}
}

// Before the windowed index is built, the whole trace's costs come from
// the report's pass, and they are the index's.
func TestQuickEqualsWindow(t *testing.T) {
	for seed := int64(1); seed <= 3; seed++ {
		path := filepath.Join(t.TempDir(), "random.hst")
		writeRandomTrace(t, path, seed)
		checkQuick(t, path)
	}
	t.Run("report_known", func(t *testing.T) { checkQuick(t, record(t, "report_known")) })
	t.Run("mmap", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "mmap.hst")
		writeMmapTrace(t, path)
		checkQuick(t, path)
	})
}

// writeMmapTrace writes mappings unmapped whole, in part from their start
// (the rest lives on as a block of its own), and never.
func writeMmapTrace(t *testing.T, path string) {
	t.Helper()
	const start = int64(1_000_000_000)
	w, err := tracefile.Create(path, tracefile.Header{Session: "mmap", Provider: "preload", MonoStart: start,
		WallStart: time.Unix(1700000000, 0)}, tracefile.Options{})
	if err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(w.Process(event.Process{PID: 1, Time: start, Exe: "/bin/true"}))
	for id := event.StackID(1); id <= 3; id++ {
		must(w.Stack(event.Stack{PID: 1, ID: id, Frames: []uint64{0x1000 + uint64(id)*8}}))
	}
	tm := start
	ev := func(k event.Kind, stack event.StackID, addr, size uint64) event.Event {
		tm += 1000
		return event.Event{Time: tm, PID: 1, TID: 1, Kind: k, Func: event.FuncMmap, Stack: stack, Addr: addr, Size: size}
	}
	must(w.Events([]event.Event{
		ev(event.KindMmap, 1, 0x10000, 4*4096),
		ev(event.KindMmap, 2, 0x40000, 8*4096),
		ev(event.KindMunmap, 0, 0x40000, 2*4096), // from the start: 6 pages live on
		ev(event.KindAlloc, 3, 0x90000, 100),
		ev(event.KindMunmap, 0, 0x10000, 4*4096), // whole
		ev(event.KindMmap, 1, 0x10000, 4096),
		ev(event.KindMunmap, 0, 0x42000, 6*4096), // the rest
		ev(event.KindFree, 0, 0x90000, 0),
	}))
	must(w.Stats(event.Stats{Time: tm + 1, Delivered: 8}))
	must(w.Close())
}

func roundTripAny(t *testing.T, v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Opened with NoIndex, an index answers the whole trace's quick questions
// as a built one does, and says at once that it has no windows (it never
// builds them).
func TestNoIndex(t *testing.T) {
	path := filepath.Join(t.TempDir(), "random.hst")
	writeRandomTrace(t, path, 2)
	x, err := Open(path, Options{NoIndex: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := x.Wait(context.Background()); !errors.Is(err, ErrNotIndexed) {
		t.Fatalf("Wait: %v, want ErrNotIndexed", err)
	}
	if x.Ready() || x.Blocks() != 0 {
		t.Fatal("an index opened without windows has rows")
	}
	if _, err := Build(path, Options{NoIndex: true}); !errors.Is(err, ErrNotIndexed) {
		t.Errorf("Build: %v, want ErrNotIndexed", err)
	}
	y, err := Build(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	q, ok := x.Quick(Filter{})
	if !ok {
		t.Fatal("no quick answer")
	}
	w := y.Window(Filter{})
	for i := range w.Sites {
		if got, want := quickFields(&q.Sites[i]), quickFields(&w.Sites[i]); got != want {
			t.Errorf("site %d: quick %+v, window %+v", i, got, want)
		}
	}
}
