package analyze

import (
	"testing"

	"github.com/heapscope/heapscope/event"
)

// attachTrace is an attach with a census: a free of a block allocated
// before the attach (t=10), an allocation traced (t=20), a block the trace
// had live that the census did not find (its free lost), the census
// (t=100) of three blocks, then the frees of everything it found.
func attachTrace() (*seq, event.Census) {
	var s seq
	s.free(0xa000). // t=10: before the census, of a block allocated before the attach
			alloc(7, 0xb000, 30). // t=20: traced, still live at the census
			alloc(7, 0xe000, 5)   // t=30: freed unseen before the census
	c := event.Census{PID: 1, Time: 100, Heap: event.HeapLibc,
		Blocks:      []event.LiveBlock{{Addr: 0xb000, Size: 40}, {Addr: 0xc000, Size: 100}, {Addr: 0xd000, Size: 1000}},
		Groups:      []event.CensusGroup{{Lo: 112, Hi: 128, Name: "Circle"}, {Lo: 1008, Hi: 1024, Name: "string", Text: "hi"}},
		BlockGroups: []uint32{0, 0, 1}}
	return &s, c
}

func TestCensusRundown(t *testing.T) {
	s, c := attachTrace()
	after := &seq{t: 100}
	after.free(0xc000). // t=110
				free(0xb000).        // t=120: the traced block, by its stack
				alloc(8, 0xf000, 7). // t=130
				free(0xd000)         // t=140
	m := New(Options{})
	check := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	check(m.Events(s.evs))
	check(m.Note(c))
	check(m.Events(after.evs))
	p := m.Profile()

	if p.Summary.UnmatchedFrees != 0 {
		t.Errorf("%d unmatched frees, want 0: the free before the census was of a block allocated before the attach", p.Summary.UnmatchedFrees)
	}
	if p.Summary.MissedFrees != 1 {
		t.Errorf("%d missed frees, want 1 (0xe000, live in the trace, not in the census)", p.Summary.MissedFrees)
	}
	if len(p.Rundowns) != 1 {
		t.Fatalf("%d rundowns", len(p.Rundowns))
	}
	r := p.Rundowns[0]
	if r.Blocks != 2 || r.Bytes != 1100 || r.Traced != 1 || r.Missed != 1 || r.FreedBefore != 1 || r.LiveBlocks != 0 || r.LiveBytes != 0 {
		t.Errorf("rundown %+v", r)
	}
	if len(r.Groups) != 2 || r.Groups[0].Name != "string" || r.Groups[0].Blocks != 1 || r.Groups[0].Bytes != 1000 ||
		r.Groups[1].Name != "Circle" || r.Groups[1].Blocks != 1 || r.Groups[1].Bytes != 100 || r.Groups[1].LiveBlocks != 0 {
		t.Errorf("groups %+v", r.Groups)
	}
	pre := stackOf(t, p, 1, PreTrace)
	if pre.Allocations != 0 || pre.Bytes != 0 || pre.Frees != 2 || pre.FreedBytes != 1100 || pre.LiveBlocks != 0 || pre.PeakBytes != 1100 {
		t.Errorf("the stack of the blocks allocated before the trace: %+v", pre.Counters)
	}
	if st := stackOf(t, p, 1, 7); st.Frees != 1 || st.LiveBlocks != 0 {
		t.Errorf("the traced stack: %+v", st.Counters)
	}
	if p.Summary.LiveBytes != 7 || p.Summary.LiveBlocks != 1 {
		t.Errorf("live at the end %d bytes in %d blocks, want 7 in 1", p.Summary.LiveBytes, p.Summary.LiveBlocks)
	}
	// The heap at the census is the census's: 30 traced + 1100 before.
	if p.Peak.Bytes != 1130 || p.Peak.Time != 100 {
		t.Errorf("peak %+v, want 1130 bytes at the census", p.Peak)
	}
}

// TestCensusLiveAtEnd: what is left at the end of the blocks allocated
// before the trace, by group.
func TestCensusLiveAtEnd(t *testing.T) {
	s, c := attachTrace()
	m := New(Options{})
	m.Events(s.evs)
	m.Note(c)
	after := &seq{t: 100}
	after.free(0xc000)
	m.Events(after.evs)
	p := m.Profile()
	r := p.Rundowns[0]
	if r.LiveBlocks != 1 || r.LiveBytes != 1000 || r.Groups[0].LiveBytes != 1000 || r.Groups[1].LiveBytes != 0 {
		t.Errorf("left at the end: %+v", r)
	}
	if p.Summary.LiveBytes != 1030 {
		t.Errorf("live at the end %d, want 1030 (1000 from before the trace)", p.Summary.LiveBytes)
	}
}

// TestCensusOutsideWindow: a census before the window is ignored, as
// allocations before it are.
func TestCensusOutsideWindow(t *testing.T) {
	s, c := attachTrace()
	m := New(Options{From: 101})
	m.Events(s.evs)
	m.Note(c)
	after := &seq{t: 100}
	after.free(0xc000)
	m.Events(after.evs)
	p := m.Profile()
	if len(p.Rundowns) != 0 || p.Summary.UnmatchedFrees != 1 {
		t.Errorf("window after the census: %d rundowns, %d unmatched frees; want 0 and 1", len(p.Rundowns), p.Summary.UnmatchedFrees)
	}
}

// TestCensusUngrouped: a census without groups gives one group.
func TestCensusUngrouped(t *testing.T) {
	m := New(Options{})
	m.Note(event.Census{PID: 2, Time: 5, Blocks: []event.LiveBlock{{Addr: 16, Size: 8}, {Addr: 32, Size: 24}}})
	p := m.Profile()
	if len(p.Rundowns) != 1 || len(p.Rundowns[0].Groups) != 1 || p.Rundowns[0].Groups[0].Blocks != 2 || p.Summary.LiveBytes != 32 {
		t.Errorf("profile of a snapshot: %+v, live %d", p.Rundowns, p.Summary.LiveBytes)
	}
	if len(p.Timeline) == 0 || p.Timeline[len(p.Timeline)-1].Bytes != 32 {
		t.Errorf("timeline %+v", p.Timeline)
	}
}

// TestCensusOvertaken: an allocation at the address of a block the census
// found (its event came after the census saw it made) replaces it without
// a missed free.
func TestCensusOvertaken(t *testing.T) {
	s, c := attachTrace()
	m := New(Options{})
	m.Events(s.evs)
	m.Note(c)
	after := &seq{t: 100}
	after.alloc(9, 0xd000, 990)
	m.Events(after.evs)
	p := m.Profile()
	r := p.Rundowns[0]
	if p.Summary.MissedFrees != 1 || r.Overtaken != 1 || r.LiveBytes != 100 || r.Groups[0].LiveBytes != 0 {
		t.Errorf("missed %d, rundown %+v", p.Summary.MissedFrees, r)
	}
}

// TestCensusThenExit: a censused process's blocks from before the trace
// leave the heap at its exit with its other blocks, and stay what it did
// not free (the rundown's LiveBytes, the PreTrace stack's ExitedBytes);
// the program an exec starts under the PID meets none of them: its block
// at an old block's address is no missed free nor overtaken, and its own
// census finds nothing missing.
func TestCensusThenExit(t *testing.T) {
	s, c := attachTrace()
	after := &seq{t: 100}
	after.free(0xc000). // t=110: 0xb000 (30) and 0xd000 (1000, before the trace) stay
				alloc(7, 1<<50, 4) // t=120: a block the table keys wide
	m := New(Options{})
	check := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	check(m.Events(s.evs))
	check(m.Note(c))
	check(m.Events(after.evs))
	check(m.Exit(event.Exit{PID: 1, Time: 150}))
	check(m.Process(event.Process{PID: 1, Time: 150, Exe: "/bin/next"}))
	next := &seq{t: 150}
	next.alloc(9, 0xd000, 50) // t=160: at the old program's block's address
	check(m.Events(next.evs))
	check(m.Note(event.Census{PID: 1, Time: 200, Blocks: []event.LiveBlock{{Addr: 0xd000, Size: 50}, {Addr: 0x9000, Size: 8}}}))
	p := m.Profile()

	if p.Summary.MissedFrees != 1 {
		t.Errorf("%d missed frees, want 1 (0xe000 only)", p.Summary.MissedFrees)
	}
	if len(p.Rundowns) != 2 {
		t.Fatalf("%d rundowns", len(p.Rundowns))
	}
	if r := p.Rundowns[0]; r.LiveBytes != 1000 || r.LiveBlocks != 1 || r.Overtaken != 0 {
		t.Errorf("the first program's rundown %+v: want 1000 bytes left at its exit, none overtaken", r)
	}
	if r := p.Rundowns[1]; r.Missed != 0 || r.Traced != 1 || r.Blocks != 1 || r.Bytes != 8 {
		t.Errorf("the next program's rundown %+v: want 1 traced, 1 before the trace (8 bytes), none missed", r)
	}
	pre := stackOf(t, p, 1, PreTrace)
	if pre.LiveBytes != 1008 || pre.ExitedBytes != 1000 {
		t.Errorf("the stack of the blocks from before the trace: live %d, exited %d; want 1008, 1000", pre.LiveBytes, pre.ExitedBytes)
	}
	// The leaks are both programs'; the heap at the end the next one's.
	if p.Summary.LiveBytes != 30+1000+4+50+8 {
		t.Errorf("leaks %d bytes, want %d", p.Summary.LiveBytes, 30+1000+4+50+8)
	}
	if last := p.Timeline[len(p.Timeline)-1]; last.Bytes != 58 {
		t.Errorf("the heap at the end %d, want 58", last.Bytes)
	}
	if p.Peak.Bytes != 1130 || p.Peak.Time != 100 {
		t.Errorf("peak %+v, want 1130 bytes at the census", p.Peak)
	}
}
