package query

import (
	"path/filepath"
	"testing"

	"github.com/heapscope/heapscope/analyze"
	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/report"
	"github.com/heapscope/heapscope/tracefile"
)

// TestLeakCheckedIndex: the classes a leak check at a process's exit gave
// its blocks are in the index's reports wherever it keeps whole stacks (the
// whole trace, a process of it, a Match), as in the model's; the process's
// blocks left the heap at the exit and stay its leaks, classified. A
// window or a thread, whose blocks' classes the index does not know, is
// reported without a leak check rather than with wrong classes.
func TestLeakCheckedIndex(t *testing.T) {
	path := filepath.Join(t.TempDir(), "checked.hst")
	const s = int64(1e9)
	w, err := tracefile.Create(path, tracefile.Header{Session: "checked", Provider: "preload", MonoStart: s, Clock: "CLOCK_MONOTONIC"},
		tracefile.Options{TimeResolution: 1})
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(err)
	for _, pid := range []uint32{1, 2} {
		must(w.Process(event.Process{PID: pid, Time: s, Exe: "/bin/x"}))
		must(w.Stack(event.Stack{PID: pid, ID: 1, Frames: []uint64{0x1000}}))
		must(w.Stack(event.Stack{PID: pid, ID: 2, Frames: []uint64{0x2000}}))
	}
	ev := func(tm int64, pid uint32, k event.Kind, st event.StackID, addr, size uint64) event.Event {
		return event.Event{Time: s + tm, PID: pid, TID: pid, Kind: k, Stack: st, Addr: addr, Size: size}
	}
	must(w.Events([]event.Event{
		ev(1e8, 1, event.KindAlloc, 1, 0xa000, 100),
		ev(1e8, 2, event.KindAlloc, 1, 0xa000, 7),
		ev(2e8, 1, event.KindAlloc, 2, 0xb000, 30),
		ev(3e8, 1, event.KindAlloc, 2, 0xc000, 1000),
		ev(4e8, 1, event.KindFree, 0, 0xc000, 0),
	}))
	must(w.Note(event.Verdict{PID: 1, Time: s + 5e8, Rules: event.RulesMemcheck, Complete: true, AtExit: true,
		Blocks: []event.BlockClass{{Addr: 0xa000, Class: event.ClassDefinite}, {Addr: 0xb000, Class: event.ClassReachable}}}))
	must(w.Exit(event.Exit{PID: 1, Time: s + 6e8}))
	must(w.Events([]event.Event{ev(7e8, 2, event.KindAlloc, 2, 0xd000, 5)}))
	must(w.Close())

	x := build(t, path)
	rep, err := report.Load(path, report.LoadOptions{})
	must(err)
	if l := rep.Lost(); l.Bytes != 100 || !rep.LeakChecked() {
		t.Fatalf("model: lost %+v, leak checked %v; want 100 bytes", l, rep.LeakChecked())
	}
	want := comparable(rep.Document(0))
	want.Rundowns, want.Resident = nil, nil
	got := comparable(x.WindowReport(x.Window(Filter{})).Document(0))
	if g, w := roundTrip(t, got), roundTrip(t, want); g != w {
		t.Errorf("index:\n%s\nreport:\n%s", g, w)
	}

	// Process 1 alone: its classes and scan, as the model of it alone.
	alone, err := report.Load(path, report.LoadOptions{Processes: analyze.Processes{PIDs: []uint32{1}}})
	must(err)
	for _, f := range []Filter{{PID: 1}, {PID: 1, Match: Match{Include: []Term{{Text: "0x"}}}.String()}} {
		d := x.WindowReport(x.Window(f)).Document(0)
		a := alone.Document(0)
		if d.LeakCheck == nil || roundTripAny(t, d.LeakCheck) != roundTripAny(t, a.LeakCheck) {
			t.Errorf("filter %+v: leak check %s, the model of pid 1 alone %s", f, roundTripAny(t, d.LeakCheck), roundTripAny(t, a.LeakCheck))
		}
		if d.Summary.LeakedBytes != 130 || roundTripAny(t, d.Leaks) != roundTripAny(t, a.Leaks) {
			t.Errorf("filter %+v: %d bytes leaked, leaks %s; the model of pid 1 alone %s", f, d.Summary.LeakedBytes,
				roundTripAny(t, d.Leaks), roundTripAny(t, a.Leaks))
		}
	}
	// Process 2 was not checked: its report holds no scan.
	if d := x.WindowReport(x.Window(Filter{PID: 2})).Document(0); d.LeakCheck != nil {
		t.Errorf("pid 2 was not checked: leak check %s", roundTripAny(t, d.LeakCheck))
	}
	// A thread, a window: not known, so none.
	for _, f := range []Filter{{TID: 1}, {From: s + 5e7, To: s + 65e7}} {
		if d := x.WindowReport(x.Window(f)).Document(0); d.LeakCheck != nil {
			t.Errorf("filter %+v: the index knows no block's class, yet says %s", f, roundTripAny(t, d.LeakCheck))
		}
	}
}
