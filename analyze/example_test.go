package analyze_test

import (
	"fmt"

	"github.com/heapscope/heapscope/analyze"
	"github.com/heapscope/heapscope/event"
)

// A Model is a Sink: replay a trace into it (tracefile.Reader.Replay), or
// feed it records directly, then ask for the Profile.
func Example() {
	m := analyze.New(analyze.Options{})
	m.Stack(event.Stack{PID: 42, ID: 1, Frames: []uint64{0x401136, 0x401200}})
	m.Events([]event.Event{
		{Time: 1000, PID: 42, TID: 42, Kind: event.KindAlloc, Func: event.FuncMalloc, Stack: 1, Addr: 0x5000, Size: 64},
		{Time: 2000, PID: 42, TID: 42, Kind: event.KindAlloc, Func: event.FuncMalloc, Stack: 1, Addr: 0x6000, Size: 32},
		{Time: 3000, PID: 42, TID: 42, Kind: event.KindFree, Func: event.FuncFree, Addr: 0x6000},
		{Time: 4000, PID: 42, TID: 42, Kind: event.KindFree, Func: event.FuncFree, Addr: 0x7000},
	})
	p := m.Profile()
	fmt.Printf("peak %d bytes at %d ns, leaked %d bytes in %d blocks\n",
		p.Peak.Bytes, p.Peak.Time, p.Summary.LiveBytes, p.Summary.LiveBlocks)
	fmt.Printf("temporary %d, unmatched frees %d\n", p.Summary.Temporary, p.Summary.UnmatchedFrees)
	for _, s := range p.Stacks {
		fmt.Printf("stack %d %x: %d allocations, %d bytes, %d live\n", s.ID, s.Frames, s.Allocations, s.Bytes, s.LiveBytes)
	}
	// Output:
	// peak 96 bytes at 2000 ns, leaked 64 bytes in 1 blocks
	// temporary 1, unmatched frees 1
	// stack 1 [401136 401200]: 2 allocations, 96 bytes, 64 live
}
