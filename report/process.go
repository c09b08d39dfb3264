package report

// ProcessTotals are one process's share of a report, summed over its
// stacks: what it allocated, freed and leaked (suppressed leaks left out),
// and what it had live at the peak of all processes together.
type ProcessTotals struct {
	Allocations   uint64
	Reallocations uint64
	Bytes         uint64
	Frees         uint64
	LeakedBytes   uint64
	LeakedBlocks  uint64
	PeakBytes     uint64
	PeakBlocks    uint64
}

// ByProcess returns the totals of each process of the report, by PID.
func (r *Report) ByProcess() map[uint32]*ProcessTotals {
	out := map[uint32]*ProcessTotals{}
	for _, p := range r.Profile.Processes {
		out[p.PID] = &ProcessTotals{}
	}
	for _, s := range r.Sites {
		for _, st := range s.members {
			t := out[st.PID]
			if t == nil {
				t = &ProcessTotals{}
				out[st.PID] = t
			}
			t.Allocations += st.Allocations
			t.Reallocations += st.Reallocations
			t.Bytes += st.Bytes
			t.Frees += st.Frees
			if s.SuppressedBy == nil {
				t.LeakedBytes += st.LiveBytes
				t.LeakedBlocks += st.LiveBlocks
			}
			t.PeakBytes += st.PeakBytes
			t.PeakBlocks += st.PeakBlocks
		}
	}
	return out
}
