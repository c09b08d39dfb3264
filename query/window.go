package query

import (
	"math/bits"
	"runtime"
	"sort"
	"sync"

	"github.com/heapscope/heapscope/analyze"
	"github.com/heapscope/heapscope/report"
)

// Filter selects what a question is about. Times are in the trace's clock
// (CLOCK_MONOTONIC ns); a window outside the trace is clamped to it.
type Filter struct {
	From, To int64  // the window [From, To); To 0: the end of the trace
	At       int64  // an instant for the "live at an instant" cost; 0: none
	PID      uint32 // only this process (0: all)
	TID      uint32 // only this thread (0: all)
	// Match, when not "", keeps only the sites a Match keeps, as its
	// String writes it. The window's peak and timeline are those of what
	// the filter keeps: of its process, its thread and the sites its
	// Match keeps (see TimelineOf).
	Match string
}

// Span is a window cut to the trace, as sequence numbers: the events
// [S0, S1) happened in it.
type Span struct {
	From, To int64 // clamped, trace clock
	S0, S1   int64
}

// Amount is bytes and blocks.
type Amount struct {
	Bytes  uint64 `json:"bytes"`
	Blocks uint64 `json:"blocks"`
}

func (a *Amount) add(size, n uint64) { a.Bytes += size; a.Blocks += n }

func (a *Amount) plus(o Amount) { a.Bytes += o.Bytes; a.Blocks += o.Blocks }

// The four classes of a block against a window [t0, t1), as WPA names them.
const (
	AIFI = iota // allocated inside, freed inside
	AIFO        // allocated inside, still live at t1
	AOFI        // allocated before t0, freed inside
	AOFO        // allocated before t0, still live at t1
)

// Costs are what one stack or site cost in a window.
type Costs struct {
	Allocations   uint64 // calls that returned a new block, failed ones included, made in the window
	Reallocations uint64
	Failed        uint64
	Bytes         uint64 // bytes allocated in the window
	Frees         uint64 // blocks freed in the window (of any age)
	Temporary     uint64 // blocks made and freed right after, in the window

	Start Amount // live at the window's start
	End   Amount // live at its end
	// Leaked is what was never freed by the window's end: End, and the
	// blocks of the processes that exited before it (which left the heap
	// there, but were not freed).
	Leaked  Amount
	Peak    Amount    // live at the window's peak instant
	Instant Amount    // live at Filter.At
	Classes [4]Amount // AIFI, AIFO, AOFI, AOFO
	// ExitedAIFI is what of AIFI its process's exit ended, not a free:
	// blocks that left the heap in the window, and are leaks.
	ExitedAIFI Amount
}

func (c *Costs) add(o *Costs) {
	c.Allocations += o.Allocations
	c.Reallocations += o.Reallocations
	c.Failed += o.Failed
	c.Bytes += o.Bytes
	c.Frees += o.Frees
	c.Temporary += o.Temporary
	c.Start.plus(o.Start)
	c.End.plus(o.End)
	c.Leaked.plus(o.Leaked)
	c.Peak.plus(o.Peak)
	c.Instant.plus(o.Instant)
	for i := range c.Classes {
		c.Classes[i].plus(o.Classes[i])
	}
	c.ExitedAIFI.plus(o.ExitedAIFI)
}

// Result is the answer to a window: the costs of every site, and the
// totals.
type Result struct {
	Filter Filter
	Span   Span
	// Peak is the instant of the window where the heap (of the filter's
	// process and thread, or of every process) was largest: its sequence
	// number (-1: none), time and size.
	PeakSeq int64
	Peak    analyze.Peak
	Sites   []Costs // by Site.ID
	Total   Costs
	Unmatch uint64 // unmatched frees in the window
	Missed  uint64 // blocks whose free was lost, ended in the window
	// Sampled counts, in a sampled trace, the allocations and
	// reallocations recorded in the window: what its estimates rest on.
	Sampled  uint64
	Hist     [65]uint64 // allocation sizes: bucket i holds sizes in (2^(i-1), 2^i]
	Lifetime Lifetimes

	stacks []Costs // by stack index
	quick  bool    // made by Quick: the costs QuickCost allows, and no stacks
}

// Lifetimes is the distribution of how long the blocks allocated in a
// window lived: Buckets[i] counts lifetimes in [2^(i-1), 2^i) ns (bucket 0:
// under 1 ns, the same timestamp), Live those still live at the end of the
// trace.
type Lifetimes struct {
	Buckets [64]uint64
	Live    uint64
}

// Span cuts f's window to the trace. It waits for the windowed index
// (see Open).
func (x *Index) Span(f Filter) Span {
	x.await()
	start, end := x.Start(), x.End()+1
	from, to := f.From, f.To
	if to == 0 || to > end {
		to = end
	}
	from = min(max(from, start), end)
	to = max(to, start)
	if from > to {
		from = to
	}
	return Span{From: from, To: to, S0: x.seqAt(from), S1: x.seqAt(to)}
}

// seqAt returns the first sequence number whose time is at or after t:
// the group is found by its first event's time, the event in it from its
// rows.
func (x *Index) seqAt(t int64) int64 {
	c := &x.evs
	g := sort.Search(len(c.groups), func(i int) bool { return c.groups[i].base >= t })
	if g == 0 {
		return 0
	}
	var d groupEvents
	c.detail(g-1, &d)
	i := sort.Search(d.n, func(i int) bool { return d.time[i] >= t })
	return int64((g-1)<<groupBits + i)
}

// peakIn returns the state of largest live bytes among the states at the
// window's start (after event s0-1) and after each of its events: the
// first such, as the model takes the first instant of its peak. The
// groups inside the window answer with their summaries; the one or two
// it cuts are rebuilt.
func (x *Index) peakIn(s0, s1 int64) int64 {
	c := &x.evs
	p := int64(-1)
	var best uint64
	lo := max(s0-1, 0)
	var d groupEvents
	for i := int(lo); i < int(s1); {
		g := i >> groupBits
		first := g << groupBits
		if i == first && first+groupLen <= int(s1) {
			if gr := &c.groups[g]; p < 0 || gr.peak > best {
				p, best = int64(first+int(gr.peakOff)), gr.peak
			}
			i += groupLen
			continue
		}
		c.detail(g, &d)
		end := min(first+d.n, int(s1))
		for ; i < end; i++ {
			if v := d.live[i-first]; p < 0 || v > best {
				p, best = int64(i), v
			}
		}
	}
	if p >= 0 && best == 0 {
		return -1 // nothing was live
	}
	return p
}

// Peak returns the first instant of the span where the heap of every
// process was largest; ok is false when nothing was live.
func (x *Index) Peak(sp Span) (p analyze.Peak, ok bool) {
	i := x.peakIn(sp.S0, sp.S1)
	if i < 0 {
		return analyze.Peak{}, false
	}
	return x.peakAt(i), true
}

// peakAt is the heap after event i, as a peak.
func (x *Index) peakAt(i int64) analyze.Peak {
	live, blocks := x.evs.state(int(i))
	return analyze.Peak{Time: x.evs.time(int(i)), Bytes: live, Blocks: uint64(blocks)}
}

// Window answers f: every site's costs in its window.
func (x *Index) Window(f Filter) *Result {
	sp := x.Span(f)
	s0, s1 := sp.S0, sp.S1
	// The peak of the heap asked about: of f's process and thread, and
	// of the sites its Match keeps.
	res := &Result{Filter: f, Span: sp, PeakSeq: -1}
	ss := x.subsetOf(f)
	if ss != nil {
		res.PeakSeq, res.Peak = x.subsetPeak(ss, s0, s1)
	} else if res.PeakSeq = x.peakIn(s0, s1); res.PeakSeq >= 0 {
		res.Peak = x.peakAt(res.PeakSeq)
	}
	p := res.PeakSeq
	at := int64(-1)
	if f.At != 0 {
		at = x.seqAt(f.At+1) - 1 // the state after the last event at or before At
	}
	n := sort.Search(x.rows.len(), func(i int) bool { return int64(x.rows.at(i).alloc) >= s1 })
	n0 := sort.Search(n, func(i int) bool { return int64(x.rows.at(i).alloc) >= s0 })
	q := windowScan{f: f, s0: s0, s1: s1, p: p, at: at, n0: n0}
	if ss != nil {
		q.allow = ss.allow
	}
	// The rows made before the window are mostly skipped (see rowEnds):
	// the cores share the window's own, and the first also reads those.
	parts := parallel(n-n0, func(w *windowPart, lo, hi int) {
		if lo == 0 {
			x.scanRows(&q, w, 0, n0)
		}
		x.scanRows(&q, w, n0+lo, n0+hi)
	}, len(x.stacks))
	res.stacks = parts[0].stacks
	res.Hist, res.Lifetime, res.Missed, res.Sampled = parts[0].hist, parts[0].life, parts[0].missed, parts[0].sampled
	for _, w := range parts[1:] {
		for i := range w.stacks {
			res.stacks[i].add(&w.stacks[i])
		}
		for i, v := range w.hist {
			res.Hist[i] += v
		}
		for i, v := range w.life.Buckets {
			res.Lifetime.Buckets[i] += v
		}
		res.Lifetime.Live += w.life.Live
		res.Missed += w.missed
		res.Sampled += w.sampled
	}
	lo, hi := x.unmatchedIn(int(s0), int(s1))
	res.Unmatch = uint64(hi - lo)
	res.Sites = make([]Costs, len(x.sites))
	for i := range res.stacks {
		res.Sites[x.stacks[i].site].add(&res.stacks[i])
	}
	for i := range res.Sites {
		res.Total.add(&res.Sites[i])
	}
	return res
}

// windowScan is a window's question, as sequence numbers.
type windowScan struct {
	f      Filter
	s0, s1 int64
	p, at  int64 // the peak's and the instant's events; -1: none
	n0     int   // the first row made inside the window

	allow []bool // by site, those Filter.Match keeps; nil: every site
}

// windowPart is what one goroutine's rows cost.
type windowPart struct {
	stacks  []Costs
	hist    [65]uint64
	life    Lifetimes
	missed  uint64
	sampled uint64
}

// The window's rows are read in parts of at least scanMinPart rows, on at
// most scanMaxParts goroutines (0: GOMAXPROCS); variables for the tests.
var scanMinPart, scanMaxParts = chunkLen, 0

// parallel runs scan over [0, n) in parts on the available cores, each
// part with counters of its own (nstacks stacks), and returns the parts,
// in order. A small window is answered on one core.
func parallel(n int, scan func(w *windowPart, lo, hi int), nstacks int) []*windowPart {
	maxParts := scanMaxParts
	if maxParts <= 0 {
		maxParts = min(runtime.GOMAXPROCS(0), 8)
	}
	k := max(1, min(maxParts, n/scanMinPart))
	per := (n + k - 1) / k
	parts := make([]*windowPart, k)
	var wg sync.WaitGroup
	for j := range parts {
		w := &windowPart{stacks: make([]Costs, nstacks)}
		parts[j] = w
		lo, hi := min(j*per, n), min((j+1)*per, n)
		if j == k-1 {
			scan(w, lo, hi)
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			scan(w, lo, hi)
		}()
	}
	wg.Wait()
	return parts
}

// scanRows adds the costs of rows [lo, hi) to w.
func (x *Index) scanRows(q *windowScan, w *windowPart, lo, hi int) {
	s0, at := q.s0, q.at
	for g := lo; g < hi; g = (g | rowGroupMask) + 1 {
		if g&rowGroupMask == 0 && g+rowGroupLen <= q.n0 {
			// Rows made before the window: skip a group over before it.
			if e := int64(x.rowEnds[g>>rowGroupBits]); e < s0 && (at < 0 || e <= at) {
				continue
			}
		}
		x.scanGroup(q, w, g, min((g|rowGroupMask)+1, hi))
	}
}

// scanGroup adds the costs of rows [lo, hi) to w.
func (x *Index) scanGroup(q *windowScan, w *windowPart, lo, hi int) {
	f, s0, s1, p, at := q.f, q.s0, q.s1, q.p, q.at
	for i := lo; i < hi; i++ {
		row := x.rows.at(i)
		a, e, fl := int64(row.alloc), int64(row.end), row.flags
		inside := a >= s0
		exited := row.exited()
		if !inside && e < s0 && (at < 0 || e <= at) && !exited {
			continue // over before the window, and before the instant
		}
		st := row.stack
		if f.PID != 0 && x.stacks[st].pid != f.PID || f.TID != 0 && x.tid(row, i) != f.TID {
			continue
		}
		if q.allow != nil && !q.allow[x.stacks[st].site] {
			continue
		}
		c := &w.stacks[st]
		size := x.size(row, i)
		block := fl&fNoBlock == 0
		n, bucket := uint64(1), 0
		if x.weights.n > 0 {
			wt := x.weights.at(i)
			n, bucket = uint64(wt.n), int(wt.bucket)
		} else {
			bucket = sizeBucket(size)
		}
		if inside && fl&fCont == 0 {
			if fl&fRealloc != 0 {
				c.Reallocations += n
			} else {
				c.Allocations += n
			}
			if fl&fFailed != 0 {
				c.Failed += n
			} else if x.weights.n > 0 {
				w.sampled++
			}
			if block {
				c.Bytes += size
				w.hist[bucket] += n
				if e == never || exited {
					w.life.Live += n
				} else {
					w.life.Buckets[row.life-1] += n
				}
			}
			if fl&fTemp != 0 && e < s1 {
				c.Temporary++
			}
		}
		if !block {
			continue
		}
		if e >= s1 || exited {
			c.Leaked.add(size, n)
		}
		if e >= s0 && e < s1 {
			if fl&fFreed != 0 {
				c.Frees += n
			}
			if fl&fMissed != 0 {
				w.missed++
			}
		}
		if at >= 0 && a <= at && at < e {
			c.Instant.add(size, n)
		}
		if p >= 0 && a <= p && p < e {
			c.Peak.add(size, n)
		}
		if e < s0 {
			continue
		}
		if !inside {
			c.Start.add(size, n)
		}
		if e >= s1 {
			c.End.add(size, n)
		}
		switch {
		case inside && e < s1:
			c.Classes[AIFI].add(size, n)
			if exited {
				c.ExitedAIFI.add(size, n)
			}
		case inside:
			c.Classes[AIFO].add(size, n)
		case e < s1:
			c.Classes[AOFI].add(size, n)
		default:
			c.Classes[AOFO].add(size, n)
		}
	}
}

func sizeBucket(size uint64) int {
	if size == 0 {
		return 0
	}
	return bits.Len64(size - 1)
}

// Profile returns the window's answer as an analyze.Profile, for package
// report's renderers: each stack's counters in the window, what it had not
// freed by the window's end as its leaks, its live bytes at the window's
// peak as its peak. For
// the whole trace it is the heap model's profile (the timeline aside: the
// index's is bucketed by time).
func (x *Index) Profile(res *Result) *analyze.Profile {
	model := x.Report.Profile
	pr := &analyze.Profile{
		From:      res.Span.From,
		To:        res.Span.To,
		Processes: model.Processes,
		Modules:   model.Modules,
		Stats:     model.Stats,
		HasStats:  model.HasStats,
		Peak:      res.Peak,
		// A sampled trace's counts are estimates, as the model's: the
		// rows weigh what the model counts.
		SampleRate: model.SampleRate,
		Missing:    model.Missing,
	}
	if res.Span.S0 == 0 && res.Span.S1 == int64(x.evs.len()) {
		pr.From, pr.To = 0, 0 // the whole trace: no window
	}
	if res.Span.S1 > res.Span.S0 {
		pr.Start, pr.End = x.evs.time(int(res.Span.S0)), x.evs.time(int(res.Span.S1-1))
	}
	// The whole trace's: the model's counts, which a window's are not.
	whole := pr.From == 0 && pr.To == 0 && res.Filter.PID == 0 && res.Filter.TID == 0 && res.Filter.Match == ""
	// Over the whole trace a process or a Match keeps whole stacks: their
	// leaks are the model's, and so are the classes the leak checks gave
	// them (the index keeps no block's class: a window's, or a thread's,
	// are not known, and its report holds no leak check).
	wholeStacks := pr.From == 0 && pr.To == 0 && res.Filter.TID == 0 && len(model.Stacks) == len(x.stacks)
	if wholeStacks {
		for _, v := range model.Verdicts {
			if res.Filter.PID == 0 || v.PID == res.Filter.PID {
				pr.Verdicts = append(pr.Verdicts, v)
			}
		}
	}
	for i := range res.stacks {
		c := &res.stacks[i]
		if c.Allocations == 0 && c.Reallocations == 0 && c.Frees == 0 && c.Leaked.Blocks == 0 {
			continue
		}
		st := &x.stacks[i]
		pr.Stacks = append(pr.Stacks, analyze.Stack{
			PID: st.pid, ID: st.id, Frames: st.frames,
			Counters: analyze.Counters{
				Allocations: c.Allocations, Reallocations: c.Reallocations, Failed: c.Failed,
				Bytes: c.Bytes, Frees: c.Frees, Temporary: c.Temporary,
				LiveBytes: c.Leaked.Bytes, LiveBlocks: c.Leaked.Blocks, PeakBytes: c.Peak.Bytes, PeakBlocks: c.Peak.Blocks,
			},
			ExitedBytes: c.Leaked.Bytes - c.End.Bytes, ExitedBlocks: c.Leaked.Blocks - c.End.Blocks,
		})
		if whole && i < len(model.Stacks) {
			// A sampled trace's variances (the index keeps none).
			st := &pr.Stacks[len(pr.Stacks)-1]
			st.LiveVar, st.PeakVar = model.Stacks[i].LiveVar, model.Stacks[i].PeakVar
		}
		if wholeStacks && len(pr.Verdicts) > 0 {
			pr.Stacks[len(pr.Stacks)-1].Classes = model.Stacks[i].Classes
		}
	}
	sum := &pr.Summary
	sum.Events = uint64(res.Span.S1-res.Span.S0) - uint64(x.exitsIn(res.Span.S0, res.Span.S1))
	sum.UnmatchedFrees = res.Unmatch
	sum.MissedFrees = res.Missed
	sum.Sampled = res.Sampled
	sum.AddStacks(pr.Stacks)
	if whole {
		// The model's count (the index keeps no stream of every
		// thread), and variance.
		sum.HeaptrackTemporary = model.Summary.HeaptrackTemporary
		sum.BytesVar = model.Summary.BytesVar
	}
	pr.Histogram = analyze.SizeBuckets(&res.Hist)
	for _, pt := range x.TimelineOf(res.Filter, res.Span, analyze.DefaultTimelinePoints) {
		pr.Timeline = append(pr.Timeline, analyze.Point{Time: pt.Time, Bytes: pt.MaxBytes, Blocks: pt.MaxBlocks})
	}
	return pr
}

// WindowReport is res as a report: package report's renderers (JSON,
// pprof, collapsed stacks) over the window's counters, the index's
// suppressions applied to the window's leaks.
func (x *Index) WindowReport(res *Result) *report.Report {
	rep := report.New(x.Profile(res), x.trace(), x.res)
	rep.Suppress(x.rules, x.supOpt)
	return rep
}
