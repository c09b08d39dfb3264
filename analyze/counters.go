package analyze

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
}

// Calls is the allocation calls: allocations and reallocations.
func (c *Counters) Calls() uint64 { return c.Allocations + c.Reallocations }
