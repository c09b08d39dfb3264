package totals

import (
	"testing"

	"github.com/heapscope/heapscope/analyze"
	"github.com/heapscope/heapscope/event"
)

// TestLiveBlocksAndClasses: LiveBlocks is each process's live set as the
// model counts it, held allocations included; a verdict classifies them,
// the rows show it, and frees after it take their bytes out of the class.
func TestLiveBlocksAndClasses(t *testing.T) {
	evs := randomEvents(50000, 7)
	a := New()
	m := analyze.New(analyze.Options{})
	a.Events(evs)
	m.Events(evs)
	prof := m.Profile()
	for _, pid := range []uint32{1, 2} {
		var bytes, blocks uint64
		for _, st := range prof.Stacks {
			if st.PID == pid {
				bytes += st.LiveBytes
				blocks += st.LiveBlocks
			}
		}
		live := a.LiveBlocks(pid)
		var got uint64
		seen := map[uint64]bool{}
		for _, b := range live {
			got += b.Size
			if seen[b.Addr] {
				t.Fatalf("pid %d: block %#x twice", pid, b.Addr)
			}
			seen[b.Addr] = true
		}
		if uint64(len(live)) != blocks || got != bytes {
			t.Errorf("pid %d: %d blocks of %d bytes, the model has %d of %d", pid, len(live), got, blocks, bytes)
		}
	}
	// Many live blocks, some held by their thread (its last allocation),
	// classified in turn lost, possible, reachable.
	a = New()
	var more []event.Event
	for i := 0; i < 300; i++ {
		more = append(more, event.Event{Time: int64(i), PID: 1, TID: uint32(10 + i%3), Kind: event.KindAlloc, Stack: event.StackID(1 + i%4), Addr: uint64(0x10000 + 64*i), Size: uint64(1 + i)})
	}
	a.Events(more)
	v := event.Verdict{PID: 1, Time: 1 << 40}
	for i, b := range a.LiveBlocks(1) {
		v.Blocks = append(v.Blocks, event.BlockClass{Addr: b.Addr, Class: []event.Class{event.ClassDefinite, event.ClassPossible, event.ClassReachable}[i%3]})
	}
	if len(v.Blocks) != 300 {
		t.Fatalf("%d live blocks, want 300", len(v.Blocks))
	}
	a.Note(v)
	check := func(when string) {
		t.Helper()
		_, sum, _ := a.View(0, 0, 0).Rows(&Client{}, ByLive, 1000, 0)
		if sum.LostBytes+sum.PossibleBytes+sum.ReachableBytes != sum.LiveBytes || sum.LostBytes == 0 || sum.ReachableBytes == 0 {
			t.Errorf("%s: lost %d + possible %d + reachable %d != live %d", when, sum.LostBytes, sum.PossibleBytes, sum.ReachableBytes, sum.LiveBytes)
		}
	}
	check("after the scans")
	if !a.View(1, 0, 0).Scanned {
		t.Error("the view does not say the process was scanned")
	}
	// Free half of process 1's blocks.
	var frees []event.Event
	for i, b := range a.LiveBlocks(1) {
		if i%2 == 0 {
			frees = append(frees, event.Event{Time: 1<<40 + int64(i), PID: 1, TID: 10, Kind: event.KindFree, Addr: b.Addr})
		}
	}
	a.Events(frees)
	check("after frees")
}

// TestClassesThenExit: a process checked at its exit keeps its rows'
// classes once it exited (its leaks, classified), its blocks leave the
// heap (the sum's live bytes, LiveBlocks) and the program an exec starts
// under the PID meets none of them.
func TestClassesThenExit(t *testing.T) {
	a := New()
	a.Events([]event.Event{
		{Time: 1, PID: 1, TID: 1, Kind: event.KindAlloc, Stack: 1, Addr: 0x1000, Size: 100},
		{Time: 2, PID: 1, TID: 1, Kind: event.KindAlloc, Stack: 2, Addr: 0x2000, Size: 30},
		{Time: 3, PID: 2, TID: 2, Kind: event.KindAlloc, Stack: 1, Addr: 0x1000, Size: 5},
	})
	a.Note(event.Verdict{PID: 1, Time: 4, Blocks: []event.BlockClass{{Addr: 0x1000, Class: event.ClassDefinite}, {Addr: 0x2000, Class: event.ClassReachable}}})
	a.Exit(event.Exit{PID: 1, Time: 5})
	rows, sum, _ := a.View(0, 0, 0).Rows(&Client{}, ByLive, 100, 0)
	var lost, reach, live uint64
	for _, r := range rows {
		if r.PID == 1 {
			lost += r.LostBytes
			reach += r.ReachableBytes
			live += r.LiveBytes
		}
	}
	if lost != 100 || reach != 30 || live != 130 {
		t.Errorf("pid 1's rows after its exit: lost %d, reachable %d, leaked %d; want 100, 30, 130", lost, reach, live)
	}
	if sum.LiveBytes != 5 || sum.LostBytes != 100 || sum.ReachableBytes != 30 {
		t.Errorf("sum: live %d (want 5, the heap), lost %d, reachable %d", sum.LiveBytes, sum.LostBytes, sum.ReachableBytes)
	}
	if n := len(a.LiveBlocks(1)); n != 0 {
		t.Errorf("pid 1 exited: %d live blocks to check", n)
	}
	// The next program frees at an old block's address: no block of the
	// exited one, so the classes stand.
	a.Events([]event.Event{{Time: 6, PID: 1, TID: 1, Kind: event.KindFree, Addr: 0x1000}})
	if _, sum, _ := a.View(1, 0, 0).Rows(&Client{}, ByLive, 100, 0); sum.LostBytes != 100 {
		t.Errorf("after the next program's free: lost %d, want 100", sum.LostBytes)
	}
}
