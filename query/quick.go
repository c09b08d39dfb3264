package query

// QuickCost reports whether cost c of the whole trace is known from the
// report's pass alone (Quick), before the windowed index is built: what
// is live at the end and at the peak, what was allocated, calls and
// temporaries. Live at an instant and the AIFI class need the index.
func QuickCost(c Cost) bool { return c != CostInstant && c != CostAIFI }

// Quick answers the question about the whole trace (the zero Filter)
// from the heap model's counters, as Window would once the index is built,
// for the costs QuickCost allows: its Sites and Total, Peak, Unmatch and
// Missed (not its Span's sequence numbers, Hist or Lifetime). ok is false
// for another question, or for an aggregate trace.
func (x *Index) Quick(f Filter) (res *Result, ok bool) {
	if f != (Filter{}) || x.quick == nil {
		return nil, false
	}
	return x.quick, true
}

// quickResult is the whole trace's Result from the report's profile, or
// nil for an aggregate trace. (A sampled trace's profile holds the
// estimates the index's weighed rows give.) For the whole trace every
// block is allocated inside it: what is live at its end is AIFO, and AOFI
// and AOFO are empty.
func (x *Index) quickResult() *Result {
	if x.Aggregate() {
		return nil
	}
	pr := x.Report.Profile
	res := &Result{
		Span:    Span{From: x.Start(), To: x.End() + 1},
		PeakSeq: -1,
		Sites:   make([]Costs, len(x.sites)),
		Unmatch: pr.Summary.UnmatchedFrees,
		Missed:  pr.Summary.MissedFrees,
		Sampled: pr.Summary.Sampled,
		quick:   true,
	}
	if pr.Peak.Bytes > 0 {
		res.PeakSeq, res.Peak = 0, pr.Peak
	}
	for i := range pr.Stacks {
		st := &pr.Stacks[i]
		c := &res.Sites[x.stacks[i].site]
		c.Allocations += st.Allocations
		c.Reallocations += st.Reallocations
		c.Failed += st.Failed
		c.Bytes += st.Bytes
		c.Frees += st.Frees
		c.Temporary += st.Temporary
		c.Leaked.plus(Amount{Bytes: st.LiveBytes, Blocks: st.LiveBlocks})
		live := Amount{Bytes: st.LiveBytes - st.ExitedBytes, Blocks: st.LiveBlocks - st.ExitedBlocks}
		c.End.plus(live)
		c.Classes[AIFO].plus(live)
		c.Peak.plus(Amount{Bytes: st.PeakBytes, Blocks: st.PeakBlocks})
	}
	for i := range res.Sites {
		res.Total.add(&res.Sites[i])
	}
	return res
}
