package query

import (
	"path/filepath"
	"testing"

	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/report"
	"github.com/heapscope/heapscope/tracefile"
)

// censusTrace writes an attach with a census: a block traced (0xa000, 30
// bytes) before the census at 1.2 s, which finds it and two blocks from
// before the trace (0xb000, 100 bytes; 0xc000, 1000) and misses one the
// trace had live (0xe000: its free was lost); then 0xb000 and 0xa000 are
// freed, 0xd000 allocated, and an allocation lands at 0xc000's address
// without its free (the census saw it made first: "overtaken").
func censusTrace(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "census.hst")
	const s = int64(1e9)
	w, err := tracefile.Create(path, tracefile.Header{Session: "census", Provider: "ebpf", MonoStart: s, Clock: "CLOCK_MONOTONIC"},
		tracefile.Options{TimeResolution: 1})
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(err)
	must(w.Process(event.Process{PID: 1, Time: s, Exe: "/bin/x"}))
	must(w.Stack(event.Stack{PID: 1, ID: 1, Frames: []uint64{0x1000}}))
	ev := func(tm int64, k event.Kind, addr, size uint64) event.Event {
		return event.Event{Time: s + tm, PID: 1, TID: 1, Kind: k, Stack: 1, Addr: addr, Size: size}
	}
	must(w.Events([]event.Event{
		ev(1.1e8, event.KindAlloc, 0xa000, 30),
		ev(1.15e8, event.KindAlloc, 0xe000, 5),
	}))
	must(w.Note(event.Census{PID: 1, Time: s + 2e8,
		Blocks: []event.LiveBlock{{Addr: 0xa000, Size: 40}, {Addr: 0xb000, Size: 100}, {Addr: 0xc000, Size: 1000}}}))
	must(w.Events([]event.Event{
		ev(5e8, event.KindFree, 0xb000, 0),
		ev(6e8, event.KindFree, 0xa000, 0),
		ev(7e8, event.KindAlloc, 0xd000, 7),
		ev(8e8, event.KindAlloc, 0xc000, 9),
	}))
	must(w.Stats(event.Stats{Time: s + 9e8, Delivered: 8}))
	must(w.Close())
	return path
}

func TestCensusWindowClasses(t *testing.T) {
	x := build(t, censusTrace(t))
	const s = int64(1e9)
	res := x.Window(Filter{From: s + 3e8, To: s + 7.5e8})
	c := res.Total.Classes
	want := [4]Amount{AIFO: {7, 1}, AOFI: {130, 2}, AOFO: {1000, 1}}
	if c != want {
		t.Errorf("classes %v, want %v (the blocks from before the trace among them)", c, want)
	}
	// AOFI+AOFO is the heap at t0, as the timeline has it: the census's.
	live, _ := x.evs.state(int(res.Span.S0 - 1))
	if c[AOFI].Bytes+c[AOFO].Bytes != live || live != 1130 {
		t.Errorf("classes %v, the heap at t0 %d; want 1130", c, live)
	}
	var pre *Site
	for _, st := range x.Sites() {
		if len(st.Frames) == 1 && st.Frames[0].Function == report.BeforeTraceFunction {
			pre = st
		}
	}
	if pre == nil {
		t.Fatal("no site of the blocks from before the trace")
	}
	if got := res.Sites[pre.ID].Classes; got != [4]Amount{AOFI: {100, 1}, AOFO: {1000, 1}} {
		t.Errorf("the site from before the trace: classes %v", got)
	}

	// The whole trace agrees with the model's report.
	rep, err := report.Load(x.File, report.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want2 := comparable(rep.Document(0))
	want2.Rundowns, want2.Resident = nil, nil
	got := comparable(report.New(x.Profile(x.Window(Filter{})), x.trace(), x.res).Document(0))
	if g, w := roundTrip(t, got), roundTrip(t, want2); g != w {
		t.Errorf("index:\n%s\nreport:\n%s", g, w)
	}
	if s := rep.Profile.Summary; s.UnmatchedFrees != 0 || s.MissedFrees != 1 {
		t.Errorf("report: %d unmatched, %d missed frees; want 0 and 1", s.UnmatchedFrees, s.MissedFrees)
	}
	if r := rep.Profile.Rundowns; len(r) != 1 || r[0].Overtaken != 1 || r[0].Blocks != 2 {
		t.Errorf("rundowns %+v", r)
	}
}

// TestCensusThenExit: a censused process's exit ends its blocks from
// before the trace in the index as in the model (they leave the heap and
// stay leaks), and the census of the program an exec starts under the PID
// finds none of the old program's live: the index's whole-trace report is
// the model's, and the heap at the end is the new program's alone.
func TestCensusThenExit(t *testing.T) {
	path := filepath.Join(t.TempDir(), "census-exit.hst")
	const s = int64(1e9)
	w, err := tracefile.Create(path, tracefile.Header{Session: "census", Provider: "ebpf", MonoStart: s, Clock: "CLOCK_MONOTONIC"},
		tracefile.Options{TimeResolution: 1})
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(err)
	must(w.Process(event.Process{PID: 1, Time: s, Exe: "/bin/x"}))
	must(w.Stack(event.Stack{PID: 1, ID: 1, Frames: []uint64{0x1000}}))
	ev := func(tm int64, k event.Kind, addr, size uint64) event.Event {
		return event.Event{Time: s + tm, PID: 1, TID: 1, Kind: k, Stack: 1, Addr: addr, Size: size}
	}
	must(w.Events([]event.Event{ev(1.1e8, event.KindAlloc, 0xa000, 30)}))
	must(w.Note(event.Census{PID: 1, Time: s + 2e8,
		Blocks: []event.LiveBlock{{Addr: 0xa000, Size: 40}, {Addr: 0xb000, Size: 100}, {Addr: 0xc000, Size: 1000}}}))
	must(w.Events([]event.Event{ev(5e8, event.KindFree, 0xb000, 0)}))
	must(w.Exit(event.Exit{PID: 1, Time: s + 6e8}))
	must(w.Process(event.Process{PID: 1, Time: s + 6e8, Exe: "/bin/next"}))
	must(w.Stack(event.Stack{PID: 1, ID: 1, Frames: []uint64{0x2000}}))
	must(w.Events([]event.Event{ev(7e8, event.KindAlloc, 0xc000, 9)}))
	must(w.Note(event.Census{PID: 1, Time: s + 8e8, Blocks: []event.LiveBlock{{Addr: 0xc000, Size: 9}, {Addr: 0x9000, Size: 8}}}))
	must(w.Events([]event.Event{ev(9e8, event.KindAlloc, 0xd000, 1)}))
	must(w.Close())

	x := build(t, path)
	rep, err := report.Load(path, report.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if sm := rep.Profile.Summary; sm.MissedFrees != 0 || sm.LiveBytes != 30+1000+9+8+1 {
		t.Errorf("model: %d missed frees, %d bytes leaked; want 0 and %d", sm.MissedFrees, sm.LiveBytes, 30+1000+9+8+1)
	}
	want := comparable(rep.Document(0))
	want.Rundowns, want.Resident = nil, nil
	got := comparable(report.New(x.Profile(x.Window(Filter{})), x.trace(), x.res).Document(0))
	if g, w := roundTrip(t, got), roundTrip(t, want); g != w {
		t.Errorf("index:\n%s\nreport:\n%s", g, w)
	}
	if live, _ := x.evs.state(x.evs.len() - 1); live != 18 {
		t.Errorf("the heap at the end %d, want 18 (the next program's)", live)
	}
	sp := x.Span(Filter{})
	for _, f := range []Filter{{}, {PID: 1}} {
		tl := x.TimelineOf(f, sp, 50)
		if pk, ok := x.PeakOf(f, sp); !ok || pk != rep.Profile.Peak || tl[len(tl)-1].EndBytes != 18 {
			t.Errorf("filter %+v: peak %+v, the model's %+v; heap at the end %d", f, pk, rep.Profile.Peak, tl[len(tl)-1].EndBytes)
		}
	}
}
