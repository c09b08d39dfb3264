package export

import "time"

// Deltas turns a session's cumulative per-stack totals into intervals. A
// session counts, per stack, the allocations since its totals began; an
// interval wants those of the interval alone. Deltas keeps each stack's
// counts at the end of the previous interval and subtracts them. Its
// memory, and the cost of each Next, are O(stacks given), never O(events).
type Deltas struct {
	end  time.Time
	prev map[stackKey]counts
	lost counts // Lost and StacksLost at the previous end
}

type stackKey struct {
	pid uint32
	id  uint64
}

type counts struct{ a, b uint64 }

// NewDeltas returns Deltas whose first interval starts at start, when the
// counting began (every count is then 0).
func NewDeltas(start time.Time) *Deltas {
	return &Deltas{end: start, prev: map[stackKey]counts{}}
}

// Next returns the interval from the previous call's end (or the start) to
// cum.End, given the cumulative totals cum: each Stack's Allocs and
// AllocBytes since counting began and its live objects and bytes now
// (identified by Stack.ID within its process), and the session's Lost and
// StacksLost since it began. cum.Start is ignored. Stacks with nothing
// allocated in the interval and nothing live are left out. A count smaller
// than the previous one means the counting restarted: the interval then
// has the new count. cum is not modified; the interval shares its
// processes' metadata and frames.
func (d *Deltas) Next(cum *Interval) *Interval {
	iv := &Interval{
		Start: d.end, End: cum.End, Host: cum.Host, SampleRate: cum.SampleRate,
		Lost: sub(cum.Lost, d.lost.a), StacksLost: sub(cum.StacksLost, d.lost.b), LostFrom: d.end,
		Processes: make([]Process, len(cum.Processes)),
	}
	next := make(map[stackKey]counts, len(d.prev))
	for i := range cum.Processes {
		cp := &cum.Processes[i]
		p := *cp
		p.Stacks = make([]Stack, 0, len(cp.Stacks))
		for _, st := range cp.Stacks {
			k := stackKey{cp.PID, st.ID}
			was := d.prev[k]
			next[k] = counts{st.Allocs, st.AllocBytes}
			st.Allocs, st.AllocBytes = sub(st.Allocs, was.a), sub(st.AllocBytes, was.b)
			if !st.empty() {
				p.Stacks = append(p.Stacks, st)
			}
		}
		iv.Processes[i] = p
	}
	d.prev = next
	d.end = cum.End
	d.lost = counts{cum.Lost, cum.StacksLost}
	return iv
}

// sub is now - was, or now when the count restarted.
func sub(now, was uint64) uint64 {
	if now < was {
		return now
	}
	return now - was
}
