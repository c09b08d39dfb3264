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
