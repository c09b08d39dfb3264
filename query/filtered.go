package query

import (
	"math"
	"sort"

	"github.com/heapscope/heapscope/analyze"
)

// The heap of some processes and threads (a Filter's PID and TID): its
// timeline and its peak, from their rows alone. The groups' summaries are
// of every process's heap, so a filtered question reads the rows made and
// ended before its window's end, in the order of their events: as much as
// a filtered window reads.

// step is what one event did to the filtered heap.
type step struct {
	seq           int64
	time          int64
	bytes, blocks int64
	made, ended   uint64
}

// matches reports whether row i (r) is of f's process and thread.
func (x *Index) matches(f *Filter, r *rowRec, i int) bool {
	return (f.PID == 0 || x.stacks[r.stack].pid == f.PID) && (f.TID == 0 || x.tid(r, i) == f.TID)
}

// eventTime returns the time of event seq, whose time less its group's
// base is dt.
func (x *Index) eventTime(seq uint32, dt uint32) int64 {
	g := int(seq >> groupBits)
	if w := x.evs.wide[int32(g)]; w != nil {
		return w[seq&groupMask]
	}
	return x.evs.groups[g].base + int64(dt)
}

// steps calls each, in the order of the events before s1, with what each
// event that made or ended a block of f's did to f's heap.
func (x *Index) steps(f Filter, s1 int64, each func(*step)) {
	nr := sort.Search(x.rows.len(), func(i int) bool { return int64(x.rows.at(i).alloc) >= s1 })
	_, ne := x.endsIn(0, int(s1))
	i, k := 0, 0
	var st step
	have := false
	flush := func() {
		if have {
			each(&st)
			have = false
		}
	}
	add := func(seq uint32, t int64) *step {
		if have && st.seq != int64(seq) {
			flush()
		}
		if !have {
			st = step{seq: int64(seq), time: t}
			have = true
		}
		return &st
	}
	for i < nr || k < ne {
		// The next row made, past those that are not f's blocks.
		for ; i < nr; i++ {
			if r := x.rows.at(i); r.flags&fNoBlock == 0 && x.matches(&f, r, i) {
				break
			}
		}
		for ; k < ne; k++ {
			j := int(*x.ends.at(k))
			if x.matches(&f, x.rows.at(j), j) {
				break
			}
		}
		var ra, ke uint32 = math.MaxUint32, math.MaxUint32
		if i < nr {
			ra = x.rows.at(i).alloc
		}
		if k < ne {
			ke = x.rows.at(int(*x.ends.at(k))).end
		}
		if ra == math.MaxUint32 && ke == math.MaxUint32 {
			break
		}
		if ra <= ke {
			r := x.rows.at(i)
			s := add(r.alloc, x.eventTime(r.alloc, r.at))
			n := uint64(x.objects(i))
			s.bytes += int64(x.size(r, i))
			s.blocks += int64(n)
			if r.flags&fCont == 0 {
				s.made += n
			}
			i++
			continue
		}
		j := int(*x.ends.at(k))
		r := x.rows.at(j)
		s := add(r.end, x.eventTime(r.end, r.et))
		n := uint64(x.objects(j))
		s.bytes -= int64(x.size(r, j))
		s.blocks -= int64(n)
		if !r.exited() {
			s.ended += n
		}
		k++
	}
	flush()
}

// filtered reports whether f selects some processes or threads.
func (f Filter) filtered() bool { return f.PID != 0 || f.TID != 0 }

// PeakOf is Peak of the heap of f's process and thread (of every process
// when f selects none): the first instant of the span where it was
// largest, and its sequence number (the state after that event); ok is
// false, and seq -1, when nothing of it was live.
func (x *Index) PeakOf(sp Span, f Filter) (seq int64, p analyze.Peak, ok bool) {
	if !f.filtered() {
		i := x.peakIn(sp.S0, sp.S1)
		if i < 0 {
			return -1, analyze.Peak{}, false
		}
		return i, x.peakAt(i), true
	}
	x.await()
	seq = -1
	var live, blocks int64
	candidate := func(i, t int64) {
		if live > 0 && (seq < 0 || uint64(live) > p.Bytes) {
			seq, p = i, analyze.Peak{Time: t, Bytes: uint64(live), Blocks: uint64(blocks)}
		}
	}
	started := false
	start := func() {
		// The state at the window's start, after event s0-1.
		started = true
		if sp.S0 > 0 && live > 0 {
			candidate(sp.S0-1, x.evs.time(int(sp.S0-1)))
		}
	}
	x.steps(f, sp.S1, func(s *step) {
		if s.seq >= sp.S0 && !started {
			start()
		}
		live += s.bytes
		blocks += s.blocks
		if s.seq >= sp.S0 {
			candidate(s.seq, s.time)
		}
	})
	if !started {
		start()
	}
	return seq, p, seq >= 0
}

// TimelineOf is Timeline of the heap of f's process and thread (of every
// process when f selects none).
func (x *Index) TimelineOf(sp Span, points int, f Filter) []Bucket {
	if !f.filtered() {
		return x.Timeline(sp, points)
	}
	x.await()
	dur := sp.To - sp.From
	if points < 1 || dur <= 0 {
		return x.Timeline(sp, points) // its answer to those
	}
	width := max((dur+int64(points)-1)/int64(points), 1)
	out := make([]Bucket, int((dur+width-1)/width))
	var live, blocks int64
	b := -1 // the bucket filled so far
	fill := func(upTo int) {
		for ; b < upTo; b++ {
			if b >= 0 {
				out[b].EndBytes, out[b].EndBlocks = uint64(live), uint64(blocks)
			}
			if b+1 < len(out) {
				out[b+1] = Bucket{Time: sp.From + int64(b+1)*width, Width: width, MaxBytes: uint64(live), MaxBlocks: uint64(blocks)}
			}
		}
	}
	x.steps(f, sp.S1, func(s *step) {
		if s.seq < sp.S0 {
			live += s.bytes
			blocks += s.blocks
			return
		}
		fill(min(int((s.time-sp.From)/width), len(out)-1))
		live += s.bytes
		blocks += s.blocks
		o := &out[b]
		if uint64(live) > o.MaxBytes {
			o.MaxBytes, o.MaxBlocks = uint64(live), uint64(blocks)
		}
		o.Allocs += s.made
		o.Frees += s.ended
	})
	fill(len(out))
	return out
}
