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
// blocks were made and ended (the rates). A group of events that falls in
// one bucket is added from its summary; the others are rebuilt from their
// rows, an event at a time.
func (x *Index) Timeline(sp Span, points int) []Bucket {
	if points < 1 {
		points = 1
	}
	dur := sp.To - sp.From
	if dur <= 0 {
		return nil
	}
	out, live, blocks := x.buckets(sp, points)
	n := len(out)
	b := 0
	next := int64(math.MaxInt64) // the start of the next bucket
	if n > 1 {
		next = out[1].Time
	}
	// advance moves to the bucket of time t.
	advance := func(t int64) {
		for t >= next {
			out[b].EndBytes, out[b].EndBlocks = live, blocks
			b++
			out[b].MaxBytes, out[b].MaxBlocks = live, blocks
			next = math.MaxInt64
			if b+1 < n {
				next = out[b+1].Time
			}
		}
	}
	c := &x.evs
	var d groupEvents
	for s := int(sp.S0); s < int(sp.S1); {
		g := s >> groupBits
		first := g << groupBits
		gr := &c.groups[g]
		if s == first && first+groupLen <= int(sp.S1) && gr.span != noSpan {
			advance(gr.base)
			if gr.base+int64(gr.span) < next {
				// The whole group is in bucket b.
				o := &out[b]
				if gr.peak > o.MaxBytes {
					o.MaxBytes, o.MaxBlocks = gr.peak, uint64(gr.peakBlocks)
				}
				o.Allocs += uint64(gr.made)
				o.Frees += uint64(gr.ended)
				l, k := c.groupEnd(g)
				live, blocks = l, uint64(k)
				s += groupLen
				continue
			}
		}
		c.detail(g, &d)
		end := min(first+d.n, int(sp.S1))
		for ; s < end; s++ {
			j := s - first
			advance(d.time[j])
			live, blocks = d.live[j], uint64(d.blocks[j])
			o := &out[b]
			if live > o.MaxBytes {
				o.MaxBytes, o.MaxBlocks = live, blocks
			}
			o.Allocs += uint64(d.made[j])
			o.Frees += uint64(d.ended[j])
		}
	}
	for ; b < n; b++ {
		out[b].EndBytes, out[b].EndBlocks = live, blocks
		if b+1 < n {
			out[b+1].MaxBytes, out[b+1].MaxBlocks = live, blocks
		}
	}
	return out
}

// buckets divides sp (From < To) into at most points buckets of one width,
// each starting with the heap as it was before sp's first event (live
// bytes and blocks, returned too).
func (x *Index) buckets(sp Span, points int) (out []Bucket, live, blocks uint64) {
	dur := sp.To - sp.From
	width := max((dur+int64(points)-1)/int64(points), 1)
	out = make([]Bucket, int((dur+width-1)/width))
	if sp.S0 > 0 {
		l, k := x.evs.state(int(sp.S0 - 1))
		live, blocks = l, uint64(k)
	}
	for i := range out {
		out[i] = Bucket{Time: sp.From + int64(i)*width, Width: width, MaxBytes: live, MaxBlocks: blocks}
	}
	return out, live, blocks
}
