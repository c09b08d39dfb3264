package query

import (
	"sort"

	"github.com/heapscope/heapscope/symbolize"
)

// Consumed is the heap over a window by the functions that held it, as
// heaptrack's "Consumed" chart draws it: the functions that held the most
// at the window's peak, stacked, and the rest as one. Each function is the
// innermost frame of its sites (what Functions calls its self cost), so
// that the series add up to the heap. Every bucket is taken at its
// largest heap, so that no peak is lost however coarse the buckets.
type Consumed struct {
	Times  []int64          // each bucket's start, trace clock
	Width  int64            // the buckets' width, ns
	Total  []uint64         // the heap of the sites kept, at each bucket's largest
	Series []ConsumedSeries // by their bytes at the window's peak, the rest last
}

// ConsumedSeries is one function's bytes in each bucket of a Consumed.
type ConsumedSeries struct {
	Name   string   `json:"name"`
	Module string   `json:"module,omitempty"`
	Other  bool     `json:"other,omitempty"` // the functions past the top, together
	Peak   uint64   `json:"peak"`            // bytes live at the window's peak
	Values []uint64 `json:"values"`
}

// OtherSeries names the functions past a Consumed's top.
const OtherSeries = "[other]"

// siteFunction is the function a site's live bytes are drawn under.
func siteFunction(s *Site) *symbolize.Frame {
	if len(s.Frames) == 0 {
		return &noStack
	}
	return &s.Frames[0]
}

// Consumed returns the heap of res's window (the sites of its filter) in
// at most points buckets, by the top functions at its peak.
func (x *Index) Consumed(res *Result, top, points int) *Consumed {
	sp := res.Span
	// The functions, by their bytes at the peak.
	type fn struct {
		name, module string
		peak, end    uint64
		series       int
	}
	byName := map[string]*fn{}
	var fns []*fn
	for _, s := range x.sites {
		c := &res.Sites[s.ID]
		if c.Peak.Bytes == 0 && c.End.Bytes == 0 && c.Start.Bytes == 0 && c.Bytes == 0 {
			continue
		}
		f := siteFunction(s)
		name := f.Name()
		e := byName[name]
		if e == nil {
			e = &fn{name: name, module: f.Module}
			byName[name] = e
			fns = append(fns, e)
		}
		e.peak += c.Peak.Bytes
		e.end += c.End.Bytes
	}
	sort.Slice(fns, func(i, j int) bool {
		a, b := fns[i], fns[j]
		if a.peak != b.peak {
			return a.peak > b.peak
		}
		if a.end != b.end {
			return a.end > b.end
		}
		return a.name < b.name
	})
	out := &Consumed{}
	n := min(len(fns), max(top, 1))
	for i, f := range fns {
		f.series = min(i, n)
		if i < n {
			out.Series = append(out.Series, ConsumedSeries{Name: f.name, Module: f.module, Peak: f.peak})
		} else if i == n {
			out.Series = append(out.Series, ConsumedSeries{Name: OtherSeries, Other: true})
		}
		if i >= n {
			out.Series[n].Peak += f.peak
		}
	}
	seriesOf := make([]int32, len(x.sites))
	for _, s := range x.sites {
		seriesOf[s.ID] = -1
		if e := byName[siteFunction(s).Name()]; e != nil {
			seriesOf[s.ID] = int32(e.series)
		}
	}
	buckets, walk := x.newBucketWalk(sp, points)
	for _, b := range buckets {
		out.Times = append(out.Times, b.Time)
		out.Width = b.Width
	}
	out.Total = make([]uint64, len(buckets))
	for i := range out.Series {
		out.Series[i].Values = make([]uint64, len(buckets))
	}
	if len(buckets) == 0 {
		return out
	}
	ss := x.subsetOf(res.Filter)
	if ss == nil {
		ss = &subset{} // every row
	}
	c := &consumedSweep{x: x, out: out, walk: walk, seriesOf: seriesOf, cur: make([]uint64, len(out.Series))}
	x.sweep(ss, sp.S0, sp.S1, c)
	walk.finish()
	return out
}

// consumedSweep takes the series' bytes at each bucket's largest heap.
type consumedSweep struct {
	x        *Index
	out      *Consumed
	walk     *bucketWalk
	seriesOf []int32 // by site
	cur      []uint64
	total    uint64
}

func (c *consumedSweep) add(r *rowRec, size uint64, sign int) {
	s := c.seriesOf[c.x.stacks[r.stack].site]
	if s < 0 {
		return // a site that cost nothing in the window: not live in it
	}
	if sign > 0 {
		c.cur[s] += size
		c.total += size
	} else {
		c.cur[s] -= size
		c.total -= size
	}
}

// take sets bucket b to the current heap.
func (c *consumedSweep) take(b int) {
	c.out.Total[b] = c.total
	for i, v := range c.cur {
		c.out.Series[i].Values[b] = v
	}
}

func (c *consumedSweep) live(_ int, r *rowRec, size uint64, _ uint32) { c.add(r, size, 1) }
func (c *consumedSweep) begin(int64) {
	c.take(0)
	c.walk.enter = c.take
}
func (c *consumedSweep) made(seq int64, _ int, r *rowRec, size uint64, _ uint32) {
	c.walk.to(seq)
	c.add(r, size, 1)
}
func (c *consumedSweep) ended(seq int64, _ int, r *rowRec, size uint64, _ uint32) {
	c.walk.to(seq)
	c.add(r, size, -1)
}
func (c *consumedSweep) after(int64) {
	if b := c.walk.b; c.total > c.out.Total[b] {
		c.take(b)
	}
}
