package analyze

import (
	"testing"

	"github.com/heapscope/heapscope/event"
)

// Snapshots are taken every few hundred milliseconds, not nanoseconds apart.
const ms = 1e6

func TestAggregateSnapshots(t *testing.T) {
	snaps := []event.Snapshot{
		{PID: 5, Time: 100 * ms, Live: []event.LiveBlock{
			{Addr: 0x10, Size: 100, Stack: 1, Time: 50 * ms},
			{Addr: 0x20, Size: 300, Stack: 2, Time: 60 * ms},
		}, Totals: []event.StackTotal{
			{Stack: 1, Allocs: 4, AllocBytes: 400, Frees: 3, FreeBytes: 300},
			{Stack: 2, Allocs: 1, AllocBytes: 300},
		}},
		{PID: 6, Time: 150 * ms, Live: []event.LiveBlock{{Addr: 0x10, Size: 1000, Stack: 1, Time: 140 * ms}},
			Totals: []event.StackTotal{{Stack: 1, Allocs: 1, AllocBytes: 1000}}},
		{PID: 5, Time: 200 * ms, Live: []event.LiveBlock{ // the largest total: 1000 + 600
			{Addr: 0x10, Size: 100, Stack: 1, Time: 50 * ms},
			{Addr: 0x30, Size: 500, Stack: 3, Time: 180 * ms},
		}, Totals: []event.StackTotal{
			{Stack: 1, Allocs: 4, AllocBytes: 400, Frees: 3, FreeBytes: 300},
			{Stack: 2, Allocs: 1, AllocBytes: 300, Frees: 1, FreeBytes: 300},
			{Stack: 3, Allocs: 1, AllocBytes: 500},
		}},
		{PID: 6, Time: 300 * ms, Final: true, Live: nil,
			Totals: []event.StackTotal{{Stack: 1, Allocs: 1, AllocBytes: 1000, Frees: 1, FreeBytes: 1000}}},
	}
	m := New(Options{})
	must(t, m.Stack(event.Stack{PID: 5, ID: 3, Frames: []uint64{0xabc}}))
	for _, s := range snaps {
		must(t, m.Snapshot(s))
	}
	must(t, m.Stats(event.Stats{Unmatched: 7}))
	p := m.Profile()
	if !p.Aggregate || !p.Missing.Has(NoPeakInstant|NoTemporaries|NoTimeline|NoHistogram) {
		t.Errorf("aggregate %v missing %v", p.Aggregate, p.Missing)
	}
	if len(p.Missing.Describe()) != 6 {
		t.Errorf("missing %q", p.Missing.Describe())
	}
	sum := p.Summary
	if sum.LiveBytes != 600 || sum.LiveBlocks != 2 || sum.Allocations != 7 || sum.Frees != 5 ||
		sum.Bytes != 2200 || sum.UnmatchedFrees != 7 {
		t.Errorf("summary %+v", sum)
	}
	if want := (Peak{Time: 200 * ms, Bytes: 1600, Blocks: 3}); p.Peak != want {
		t.Errorf("peak %+v, want %+v", p.Peak, want)
	}
	if s := stackOf(t, p, 5, 3); s.LiveBytes != 500 || s.PeakBytes != 500 || len(s.Frames) != 1 {
		t.Errorf("pid 5 stack 3 %+v", s)
	}
	if s := stackOf(t, p, 6, 1); s.LiveBytes != 0 || s.PeakBytes != 1000 || s.Frees != 1 {
		t.Errorf("pid 6 stack 1 %+v", s)
	}
	if s := stackOf(t, p, 5, 2); s.PeakBytes != 0 || s.Frees != 1 {
		t.Errorf("pid 5 stack 2 %+v", s)
	}
	wantTL := []Point{{100 * ms, 400, 2}, {150 * ms, 1400, 3}, {200 * ms, 1600, 3}, {300 * ms, 600, 2}}
	if len(p.Timeline) != len(wantTL) {
		t.Fatalf("timeline %+v", p.Timeline)
	}
	for i := range wantTL {
		if p.Timeline[i] != wantTL[i] {
			t.Errorf("timeline[%d] = %+v, want %+v", i, p.Timeline[i], wantTL[i])
		}
	}
	if len(p.Histogram) != 0 {
		t.Errorf("histogram from snapshots: %+v", p.Histogram)
	}
}

func TestAggregateWindow(t *testing.T) {
	m := New(Options{From: 100, To: 250})
	for _, s := range []event.Snapshot{
		{PID: 5, Time: 50, Totals: []event.StackTotal{{Stack: 1, Allocs: 10, AllocBytes: 1000, Frees: 9, FreeBytes: 900}}},
		{PID: 5, Time: 200, Live: []event.LiveBlock{
			{Addr: 0x10, Size: 100, Stack: 1, Time: 40},  // allocated before the window
			{Addr: 0x20, Size: 100, Stack: 1, Time: 150}, // inside
		}, Totals: []event.StackTotal{{Stack: 1, Allocs: 13, AllocBytes: 1300, Frees: 11, FreeBytes: 1100}}},
		{PID: 5, Time: 260, Totals: []event.StackTotal{{Stack: 1, Allocs: 99}}}, // after To
	} {
		must(t, m.Snapshot(s))
	}
	p := m.Profile()
	s := stackOf(t, p, 5, 1)
	if s.Allocations != 3 || s.Bytes != 300 || s.Frees != 2 || s.LiveBytes != 100 || s.LiveBlocks != 1 {
		t.Errorf("stack %+v", s)
	}
}
