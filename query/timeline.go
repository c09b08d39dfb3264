package query

import "math"

// Bucket is one point of a timeline: the heap during [Time, Time+Width).
type Bucket struct {
	Time      int64  `json:"t"`     // start of the bucket, trace clock
	Width     int64  `json:"width"` // ns
	MaxBytes  uint64 `json:"max_bytes"`
	MaxBlocks uint64 `json:"max_blocks"` // live blocks when the bytes were largest
	EndBytes  uint64 `json:"end_bytes"`  // live at the bucket's end
	EndBlocks uint64 `json:"end_blocks"`
	Allocs    uint64 `json:"allocs"` // blocks made in the bucket
	Frees     uint64 `json:"frees"`  // blocks ended in the bucket
}

// Timeline cuts the span into at most points buckets of equal width and
// returns the heap in each: its largest live bytes (so that no peak is
// lost however coarse the buckets), the state at its end, and how many
// blocks were made and ended (the rates). It reads the events of the span
// once.
func (x *Index) Timeline(sp Span, points int) []Bucket {
	if points < 1 {
		points = 1
	}
	dur := sp.To - sp.From
	if dur <= 0 {
		return nil
	}
	width := (dur + int64(points) - 1) / int64(points)
	if width < 1 {
		width = 1
	}
	n := int((dur + width - 1) / width)
	out := make([]Bucket, n)
	var live, blocks uint64
	if sp.S0 > 0 {
		l, k := x.evs.state(int(sp.S0 - 1))
		live, blocks = l, uint64(k)
	}
	for i := range out {
		out[i] = Bucket{Time: sp.From + int64(i)*width, Width: width, MaxBytes: live, MaxBlocks: blocks}
	}
	b := 0
	for s := int(sp.S0); s < int(sp.S1); {
		// A chunk at a time, over its arrays.
		k, off := s>>chunkBits, s&chunkMask
		m := min(chunkLen-off, int(sp.S1)-s)
		recs := x.evs.recs.chunks[k][off : off+m]
		kinds := x.evs.kinds.chunks[k][off : off+m]
		base, wide := x.evs.base[k], x.evs.wide[k]
		baseLive, wideLive := x.evs.baseLive[k], x.evs.wideLive[k]
		next := int64(math.MaxInt64) // the start of the next bucket
		if b+1 < n {
			next = out[b+1].Time
		}
		for j := range recs {
			r := &recs[j]
			t := base + int64(r.dt)
			if wide != nil {
				t = wide[off+j]
			}
			for t >= next {
				out[b].EndBytes, out[b].EndBlocks = live, blocks
				b++
				out[b].MaxBytes, out[b].MaxBlocks = live, blocks
				next = math.MaxInt64
				if b+1 < n {
					next = out[b+1].Time
				}
			}
			live, blocks = baseLive+uint64(int64(r.dlive)), uint64(r.blocks)
			if wideLive != nil {
				live = wideLive[off+j]
			}
			o := &out[b]
			if live > o.MaxBytes {
				o.MaxBytes, o.MaxBlocks = live, blocks
			}
			kind := kinds[j]
			if kind&evMade != 0 {
				o.Allocs++
			}
			if kind&evEnded != 0 {
				o.Frees++
			}
		}
		s += m
	}
	for ; b < n; b++ {
		out[b].EndBytes, out[b].EndBlocks = live, blocks
		if b+1 < n {
			out[b+1].MaxBytes, out[b+1].MaxBlocks = live, blocks
		}
	}
	return out
}
