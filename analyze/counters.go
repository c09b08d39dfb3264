package analyze

import "github.com/heapscope/heapscope/event"

// Counters are what heapscope counts for a set of allocations: one stack
// of one process (Stack), a site of merged stacks (report.Site), a process,
// or a whole profile (Summary). The model, the reports, JSON, pprof and the
// diff all read these fields; only their renderers name them for users.
type Counters struct {
	Allocations   uint64 // calls that returned a new block, failed ones included
	Reallocations uint64 // realloc and reallocarray calls
	Failed        uint64 // allocations and reallocations that returned NULL
	Bytes         uint64 // bytes allocated: sizes of the blocks returned
	Frees         uint64 // blocks freed (by free or by a realloc moving them)
	FreedBytes    uint64
	Temporary     uint64 // blocks freed right after they were made

	LiveBytes  uint64 // live at the end of the window: leaked
	LiveBlocks uint64
	PeakBytes  uint64 // live at the peak instant
	PeakBlocks uint64

	// Classes splits the live blocks (LiveBytes, LiveBlocks) by the
	// reachability class a heap scan recorded in the trace gave each
	// (event.Verdict), indexed by event.Class: Classes[event.ClassDefinite]
	// is what was definitely lost. A live block no scan classified (one
	// made after the last scan of its process, or in a trace without one)
	// is in none of them: see Unscanned.
	Classes [event.NumClasses]Amount
}

// Amount is a number of blocks and their bytes.
type Amount struct {
	Bytes  uint64
	Blocks uint64
}

// Add adds o to a.
func (a *Amount) Add(o Amount) {
	a.Bytes += o.Bytes
	a.Blocks += o.Blocks
}

// Add adds o to c, field by field.
func (c *Counters) Add(o *Counters) {
	c.Allocations += o.Allocations
	c.Reallocations += o.Reallocations
	c.Failed += o.Failed
	c.Bytes += o.Bytes
	c.Frees += o.Frees
	c.FreedBytes += o.FreedBytes
	c.Temporary += o.Temporary
	c.LiveBytes += o.LiveBytes
	c.LiveBlocks += o.LiveBlocks
	c.PeakBytes += o.PeakBytes
	c.PeakBlocks += o.PeakBlocks
	for i := range c.Classes {
		c.Classes[i].Add(o.Classes[i])
	}
}

// Calls is the allocation calls: allocations and reallocations.
func (c *Counters) Calls() uint64 { return c.Allocations + c.Reallocations }

// Lost is what a scan found lost in the narrow sense, as Memcheck's and
// LeakSanitizer's leaks: definitely and indirectly lost.
func (c *Counters) Lost() Amount {
	a := c.Classes[event.ClassDefinite]
	a.Add(c.Classes[event.ClassIndirect])
	return a
}

// Scanned is the live blocks a scan classified, or tried to (its
// ClassUnknown included).
func (c *Counters) Scanned() Amount {
	var a Amount
	for _, x := range c.Classes {
		a.Add(x)
	}
	return a
}

// Unscanned is the live blocks no scan classified.
func (c *Counters) Unscanned() Amount {
	s := c.Scanned()
	return Amount{Bytes: c.LiveBytes - min(s.Bytes, c.LiveBytes), Blocks: c.LiveBlocks - min(s.Blocks, c.LiveBlocks)}
}
