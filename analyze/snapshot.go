package analyze

import (
	"sort"

	"github.com/heapscope/heapscope/event"
)

// snapProc is what the model keeps of one process's snapshots: the latest
// one in the window, and the totals of the latest one before it.
type snapProc struct {
	latest *event.Snapshot
	base   map[event.StackID]event.StackTotal
	// gone: the process exited after its latest snapshot, whose live
	// blocks are its leaks but no longer in the heap.
	gone bool
}

// Snapshot records the aggregate state of a process. Only the latest
// snapshot of each process in the window is kept (with the totals of the
// latest before the window), so memory stays proportional to its live set.
func (m *Model) Snapshot(sn event.Snapshot) error {
	if sn.Time >= m.to {
		return nil
	}
	m.proc(sn.PID)
	if m.snaps == nil {
		m.snaps = map[uint32]*snapProc{}
		m.snapLiveSums = map[uint32][2]uint64{}
	}
	sp := m.snaps[sn.PID]
	if sp == nil {
		sp = &snapProc{}
		m.snaps[sn.PID] = sp
	}
	if sn.Time < m.from {
		sp.base = make(map[event.StackID]event.StackTotal, len(sn.Totals))
		for _, t := range sn.Totals {
			sp.base[t.Stack] = t
		}
		return nil
	}
	m.seen(sn.Time)
	c := sn
	c.Totals = append([]event.StackTotal(nil), sn.Totals...)
	c.Live = make([]event.LiveBlock, 0, len(sn.Live))
	var bytes, blocks uint64
	for _, b := range sn.Live {
		if b.Time < m.from {
			continue // allocated before the window
		}
		c.Live = append(c.Live, b)
		wb, wn := m.liveWeight(b)
		bytes += wb
		blocks += wn
	}
	sp.latest, sp.gone = &c, false
	m.snapLiveSums[sn.PID] = [2]uint64{bytes, blocks}
	total, totalBlocks := m.snapTotal(sn.Time)
	if total > m.snapPeak.Bytes {
		m.snapPeak = Peak{Time: sn.Time, Bytes: total, Blocks: totalBlocks}
		m.snapPeakSet = make(map[uint32]*event.Snapshot, len(m.snaps))
		for pid, sp := range m.snaps {
			if sp.latest != nil && !sp.gone {
				m.snapPeakSet[pid] = sp.latest
			}
		}
	}
	return nil
}

// snapTotal returns the live bytes and blocks of the processes' latest
// snapshots, and adds them to the timeline at time t when the trace has
// no events.
func (m *Model) snapTotal(t int64) (total, blocks uint64) {
	for _, v := range m.snapLiveSums {
		total += v[0]
		blocks += v[1]
	}
	if m.events == 0 {
		m.timeline.add(t, total, blocks)
	}
	return total, blocks
}

// snapExit takes the live blocks of an exited process's latest snapshot
// out of the heap: they stay its leaks (see Model.Exit).
func (m *Model) snapExit(ev event.Exit) {
	sp := m.snaps[ev.PID]
	if sp.latest == nil || sp.gone || ev.Time >= m.to {
		return
	}
	sp.gone = true
	m.snapLiveSums[ev.PID] = [2]uint64{}
	m.snapTotal(ev.Time)
}

// liveWeight is what a snapshot's live block counts: itself, or in a
// sampled trace what it stands for, as a block of a sampled stream does.
// (The snapshot's totals come already weighed, by the provider.)
func (m *Model) liveWeight(b event.LiveBlock) (bytes, blocks uint64) {
	if m.rate <= 0 {
		return b.Size, 1
	}
	wb, n := m.sampledBlock(b.Size, b.Addr, b.Time)
	return wb, uint64(n)
}

func sub(a, b uint64) uint64 {
	if b > a {
		return 0
	}
	return a - b
}

// snapshotStacks appends to pr the stacks of the processes reported by
// snapshots.
func (m *Model) snapshotStacks(pr *Profile) {
	pids := make([]uint32, 0, len(m.snaps))
	for pid := range m.snaps {
		pids = append(pids, pid)
	}
	sort.Slice(pids, func(i, j int) bool { return pids[i] < pids[j] })
	for _, pid := range pids {
		sp := m.snaps[pid]
		if sp.latest == nil {
			continue
		}
		p := m.procs[pid]
		idx := map[event.StackID]int{}
		get := func(id event.StackID) *Stack {
			i, ok := idx[id]
			if !ok {
				st := Stack{PID: pid, ID: id}
				if si := m.lookupSite(p, id); si >= 0 {
					st.Frames = m.sites[si].frames
				}
				i = len(pr.Stacks)
				idx[id] = i
				pr.Stacks = append(pr.Stacks, st)
			}
			return &pr.Stacks[i]
		}
		for _, t := range sp.latest.Totals {
			b := sp.base[t.Stack]
			s := get(t.Stack)
			s.Allocations += sub(t.Allocs, b.Allocs)
			s.Bytes += sub(t.AllocBytes, b.AllocBytes)
			s.Frees += sub(t.Frees, b.Frees)
			s.FreedBytes += sub(t.FreeBytes, b.FreeBytes)
		}
		for _, lb := range sp.latest.Live {
			s := get(lb.Stack)
			wb, wn := m.liveWeight(lb)
			s.LiveBytes += wb
			s.LiveBlocks += wn
		}
		if ps := m.snapPeakSet[pid]; ps != nil && m.events == 0 {
			for _, lb := range ps.Live {
				s := get(lb.Stack)
				wb, wn := m.liveWeight(lb)
				s.PeakBytes += wb
				s.PeakBlocks += wn
			}
		}
	}
}
