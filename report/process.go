package report

import "github.com/heapscope/heapscope/analyze"

// ProcessTotals are one process's share of a report, summed over its
// stacks: what it allocated, freed and leaked (LiveBytes and LiveBlocks,
// suppressed leaks left out), and what it had live at the peak of all
// processes together.
type ProcessTotals struct {
	analyze.Counters
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
			c := st.Counters
			if s.SuppressedBy != nil {
				c.LiveBytes, c.LiveBlocks = 0, 0
				c.Classes = [len(c.Classes)]analyze.Amount{}
			}
			t.Add(&c)
		}
	}
	return out
}
