package query

import (
	"sort"

	"github.com/heapscope/heapscope/event"
)

// Resident is the resident memory of the traced processes at an instant,
// as the kernel counted it when the session sampled each (event.Memory:
// at every flush and at the session's stop): the sum of each process's
// latest sample, from its first sample to its exit.
type Resident struct {
	Time  int64  `json:"t"` // trace clock
	RSS   uint64 `json:"rss"`
	Anon  uint64 `json:"anon"`
	File  uint64 `json:"file"`
	Shmem uint64 `json:"shmem"`
	Swap  uint64 `json:"swap"`
}

// ProcessResident is one process's largest sample in a window.
type ProcessResident struct {
	PID     uint32 `json:"pid"`
	Samples int    `json:"samples"`
	Peak    Resident
}

// MemoryAnswer is the resident memory of a window: at most points
// instants (each a sample, an exit, or the window's start; when there are
// more, the one of largest RSS of each of points equal parts of the
// window), the largest, and each process's largest sample.
type MemoryAnswer struct {
	Points    []Resident
	Peak      Resident // RSS 0: no sample in the window
	Processes []ProcessResident
	Samples   int // the samples in the window
}

// Memory answers the resident memory of the processes (only pid's when
// not 0) over [from, to) (trace clock; to 0: the end of the trace). It
// needs only the report's pass: the samples are the heap model's.
func (x *Index) Memory(from, to int64, pid uint32, points int) *MemoryAnswer {
	pr := x.Report.Profile
	if to == 0 {
		to = int64(^uint64(0) >> 1)
	}
	type change struct {
		t    int64
		m    event.Memory
		exit bool
	}
	var cs []change
	for _, m := range pr.Memory {
		if pid == 0 || m.PID == pid {
			cs = append(cs, change{t: m.Time, m: m})
		}
	}
	for _, p := range pr.Processes {
		if p.Exited && (pid == 0 || p.PID == pid) {
			cs = append(cs, change{t: p.Exit.Time, m: event.Memory{PID: p.PID}, exit: true})
		}
	}
	// Samples before exits at the same time: the sample a session takes
	// at its stop can share the exit's timestamp.
	sort.SliceStable(cs, func(i, j int) bool {
		if cs[i].t != cs[j].t {
			return cs[i].t < cs[j].t
		}
		return !cs[i].exit && cs[j].exit
	})
	latest := map[uint32]event.Memory{}
	total := func(t int64) Resident {
		r := Resident{Time: t}
		for _, m := range latest {
			r.RSS += m.RSS
			r.Anon += m.Anon
			r.File += m.File
			r.Shmem += m.Shmem
			r.Swap += m.Swap
		}
		return r
	}
	out := &MemoryAnswer{}
	procs := map[uint32]*ProcessResident{}
	var all []Resident
	started := false
	for _, c := range cs {
		if c.t >= to {
			break
		}
		if c.t >= from && !started && len(latest) > 0 {
			all = append(all, total(from)) // what was resident when the window began
		}
		started = started || c.t >= from
		if c.exit {
			delete(latest, c.m.PID)
		} else {
			latest[c.m.PID] = c.m // an exec's new program samples under the same PID
		}
		if c.t < from {
			continue
		}
		all = append(all, total(c.t))
		if !c.exit {
			out.Samples++
			p := procs[c.m.PID]
			if p == nil {
				p = &ProcessResident{PID: c.m.PID}
				procs[c.m.PID] = p
			}
			p.Samples++
			if c.m.RSS > p.Peak.RSS {
				p.Peak = Resident{Time: c.t, RSS: c.m.RSS, Anon: c.m.Anon, File: c.m.File, Shmem: c.m.Shmem, Swap: c.m.Swap}
			}
		}
	}
	if !started && len(latest) > 0 {
		all = append(all, total(from))
	}
	for _, r := range all {
		if r.RSS > out.Peak.RSS {
			out.Peak = r
		}
	}
	for _, p := range procs {
		out.Processes = append(out.Processes, *p)
	}
	sort.Slice(out.Processes, func(i, j int) bool { return out.Processes[i].PID < out.Processes[j].PID })
	out.Points = thin(all, max(points, 1))
	return out
}

// thin keeps at most n of rs: the one of largest RSS of each of n equal
// parts of their time span (rs in time order).
func thin(rs []Resident, n int) []Resident {
	if len(rs) <= n {
		return rs
	}
	t0, t1 := rs[0].Time, rs[len(rs)-1].Time+1
	width := max((t1-t0+int64(n)-1)/int64(n), 1)
	var out []Resident
	last := int64(-1)
	for _, r := range rs {
		b := (r.Time - t0) / width
		if b != last {
			out = append(out, r)
			last = b
		} else if r.RSS > out[len(out)-1].RSS {
			out[len(out)-1] = r
		}
	}
	return out
}
