package analyze

import (
	"testing"

	"github.com/heapscope/heapscope/event"
)

// TestVerdict: a scan's classes go to the blocks it lists and are counted by
// their stacks; a block freed after the scan leaves its class, a block made
// after it has none, a later scan reclassifies, and the temporaries of a
// classified block are still counted.
func TestVerdict(t *testing.T) {
	m := New(Options{})
	var s seq
	s.alloc(1, 0x1000, 100).alloc(1, 0x2000, 200).alloc(2, 0x3000, 300).alloc(2, 0x4000, 400)
	feed := func(evs []event.Event) {
		t.Helper()
		if err := m.Events(evs); err != nil {
			t.Fatal(err)
		}
	}
	feed(s.evs)
	verdict := func(tm int64, bc ...event.BlockClass) {
		t.Helper()
		if err := m.Note(event.Verdict{PID: 1, Time: tm, Rules: event.RulesMemcheck, Pause: 5, Complete: true, Blocks: bc}); err != nil {
			t.Fatal(err)
		}
	}
	verdict(s.t+1,
		event.BlockClass{Addr: 0x1000, Class: event.ClassDefinite},
		event.BlockClass{Addr: 0x2000, Class: event.ClassReachable},
		event.BlockClass{Addr: 0x3000, Class: event.ClassIndirect},
		event.BlockClass{Addr: 0x4000, Class: event.ClassPossible},
		event.BlockClass{Addr: 0x9000, Class: event.ClassDefinite}, // not live: ignored
	)
	var s2 seq
	s2.t = s.t + 10
	s2.free(0x2000).alloc(1, 0x5000, 500)
	feed(s2.evs)
	p := m.Profile()
	st1, st2 := stackOf(t, p, 1, 1), stackOf(t, p, 1, 2)
	want1 := [event.NumClasses]Amount{event.ClassDefinite: {100, 1}}
	want2 := [event.NumClasses]Amount{event.ClassIndirect: {300, 1}, event.ClassPossible: {400, 1}}
	if st1.Classes != want1 || st2.Classes != want2 {
		t.Errorf("classes %v and %v, want %v and %v", st1.Classes, st2.Classes, want1, want2)
	}
	if u := st1.Unscanned(); u != (Amount{500, 1}) {
		t.Errorf("stack 1 unscanned %v, want the block made after the scan", u)
	}
	if l := p.Summary.Lost(); l != (Amount{400, 2}) {
		t.Errorf("summary lost %v", l)
	}
	if len(p.Verdicts) != 1 || p.Verdicts[0].Listed != 5 || p.Verdicts[0].Applied != 4 || !p.Verdicts[0].Complete {
		t.Errorf("verdicts %+v", p.Verdicts)
	}

	// A later scan reclassifies; a classified block freed at once after
	// its own allocation is still a temporary.
	verdict(s2.t+1, event.BlockClass{Addr: 0x1000, Class: event.ClassReachable}, event.BlockClass{Addr: 0x5000, Class: event.ClassDefinite})
	var s3 seq
	s3.t = s2.t + 10
	s3.free(0x5000)
	feed(s3.evs)
	p = m.Profile()
	st1 = stackOf(t, p, 1, 1)
	if want := ([event.NumClasses]Amount{event.ClassReachable: {100, 1}}); st1.Classes != want {
		t.Errorf("after the second scan: %v, want %v", st1.Classes, want)
	}
	if st1.Temporary != 1 {
		t.Errorf("temporaries %d, want 1 (the classified block freed by the thread's next call)", st1.Temporary)
	}
}

// TestVerdictWindow: a scan after the window's end gives no class.
func TestVerdictWindow(t *testing.T) {
	var s seq
	s.alloc(1, 0x1000, 100)
	m := New(Options{To: s.t + 5})
	m.Events(s.evs)
	m.Note(event.Verdict{PID: 1, Time: s.t + 10, Blocks: []event.BlockClass{{Addr: 0x1000, Class: event.ClassDefinite}}})
	p := m.Profile()
	if len(p.Verdicts) != 0 || p.Summary.Scanned() != (Amount{}) {
		t.Errorf("a scan after the window applied: %+v %v", p.Verdicts, p.Summary.Classes)
	}
}
