package export

import (
	"time"

	"github.com/heapscope/heapscope/analyze"
)

// Clock maps a trace's CLOCK_MONOTONIC times to wall-clock times: the
// trace header's MonoStart and WallStart.
type Clock struct {
	MonoStart int64
	WallStart time.Time
}

// Wall returns the wall-clock time of monotonic time t.
func (c Clock) Wall(t int64) time.Time { return c.WallStart.Add(time.Duration(t - c.MonoStart)) }

// FromProfile returns the interval that a trace's profile (the whole trace,
// or the window p.From to p.To) covers: each stack's allocations in it and
// what it held at its end, with the processes' module records as mappings.
// An open start is the session's start, an open end the profile's last
// record. The trace's Stats are its session's, not the window's: for a
// window, LostFrom is the session's start.
//
// The stacks of every program a PID ran are the process's; its metadata is
// that of the last program it ran.
func FromProfile(p *analyze.Profile, c Clock, host Host) *Interval {
	from, to := p.From, p.To
	if from == 0 {
		from = c.MonoStart
	}
	if to == 0 {
		to = max(p.End, from)
	}
	iv := &Interval{
		Start:      c.Wall(from),
		End:        c.Wall(to),
		Host:       host,
		SampleRate: p.SampleRate,
		LostFrom:   c.Wall(c.MonoStart),
	}
	if p.HasStats {
		iv.Lost, iv.StacksLost = p.Stats.TotalLost(), p.Stats.StacksLost
	}

	byPID := map[uint32]int{}
	proc := func(pid uint32) *Process {
		i, ok := byPID[pid]
		if !ok {
			i = len(iv.Processes)
			byPID[pid] = i
			iv.Processes = append(iv.Processes, Process{PID: pid})
		}
		return &iv.Processes[i]
	}
	for _, pr := range p.Processes {
		x := proc(pr.PID)
		x.PPID, x.Exe, x.Cmdline = pr.PPID, pr.Exe, pr.Cmdline
	}
	type modKey struct {
		pid   uint32
		start uint64
		path  string
	}
	seen := map[modKey]bool{}
	for _, m := range p.Modules {
		k := modKey{m.PID, m.Start, m.Path}
		if seen[k] {
			continue
		}
		seen[k] = true
		x := proc(m.PID)
		x.Mappings = append(x.Mappings, Mapping{Start: m.Start, Limit: m.End, Offset: m.Offset, File: m.Path, BuildID: m.BuildID})
	}
	for i := range p.Stacks {
		st := &p.Stacks[i]
		calls := st.Calls() - min(st.Failed, st.Calls())
		if calls == 0 && st.LiveBlocks == 0 {
			continue
		}
		x := proc(st.PID)
		x.Stacks = append(x.Stacks, Stack{
			ID: uint64(st.ID), Frames: st.Frames, Allocs: calls, AllocBytes: st.Bytes,
			LiveObjects: st.LiveBlocks, LiveBytes: st.LiveBytes,
		})
	}
	return iv
}
