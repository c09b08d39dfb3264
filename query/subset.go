package query

import (
	"math"
	"sort"

	"github.com/heapscope/heapscope/analyze"
)

// A subset is the rows a Filter keeps: those of the sites its Match keeps,
// of its process and of its thread. The heap of a subset over time (its
// timeline, its peak, the consumed chart) is rebuilt from its rows alone:
// their allocations in row order and their ends in the order of the ends
// are both in event order, so that a merge of the two walks the subset's
// heap event by event, O(the rows of the window) and nothing per event of
// the others. A row counts what it weighs (its bytes, and its objects in a
// sampled trace: Index.objects), and a process's exit ends its live rows,
// as in the whole heap's summaries.
type subset struct {
	allow    []bool // by site; nil: every site
	pid, tid uint32
}

// subsetOf is f's subset, or nil when f keeps every row (no process,
// thread or Match): the whole heap, whose groups' summaries answer.
func (x *Index) subsetOf(f Filter) *subset {
	if f.Match == "" && f.PID == 0 && f.TID == 0 {
		return nil
	}
	return &subset{allow: x.siteMask(f.Match), pid: f.PID, tid: f.TID}
}

// keeps reports whether row r, i is in the subset.
func (ss *subset) keeps(x *Index, r *rowRec, i int) bool {
	st := &x.stacks[r.stack]
	return (ss.allow == nil || ss.allow[st.site]) && (ss.pid == 0 || st.pid == ss.pid) && (ss.tid == 0 || x.tid(r, i) == ss.tid)
}

// A heapVisitor is told how a subset's heap changes through a span: each
// row i (r) with its bytes and its objects n.
type heapVisitor interface {
	// live is a block of the subset live before the span's first event.
	live(i int, r *rowRec, size uint64, n uint32)
	// made and ended are a block the event seq made or ended (an exit's
	// end too: r.exited).
	made(seq int64, i int, r *rowRec, size uint64, n uint32)
	ended(seq int64, i int, r *rowRec, size uint64, n uint32)
	// begin follows the live blocks: the heap after event s0-1.
	begin(s0 int64)
	// after follows every event that changed the subset's heap.
	after(seq int64)
}

// sweep walks the heap of ss through the events [s0, s1) for v.
func (x *Index) sweep(ss *subset, s0, s1 int64, v heapVisitor) {
	n := x.rows.len()
	n0 := sort.Search(n, func(i int) bool { return int64(x.rows.at(i).alloc) >= s0 })
	for g := 0; g < n0; g = (g | rowGroupMask) + 1 {
		if g&rowGroupMask == 0 && int64(x.rowEnds[g>>rowGroupBits]) < s0 {
			continue // every row of the group ended before s0
		}
		for i := g; i < min((g|rowGroupMask)+1, n0); i++ {
			r := x.rows.at(i)
			if r.flags&fNoBlock == 0 && int64(r.end) >= s0 && ss.keeps(x, r, i) {
				v.live(i, r, x.size(r, i), x.objects(i))
			}
		}
	}
	v.begin(s0)
	endOf := func(k int) int64 { return int64(x.rows.at(int(*x.ends.at(k))).end) }
	ne := x.ends.len()
	k := sort.Search(ne, func(k int) bool { return endOf(k) >= s0 })
	i := n0
	const none = math.MaxInt64
	nextAlloc := func() int64 {
		if i < n {
			if a := int64(x.rows.at(i).alloc); a < s1 {
				return a
			}
		}
		return none
	}
	nextEnd := func() int64 {
		if k < ne {
			if e := endOf(k); e < s1 {
				return e
			}
		}
		return none
	}
	a, e := nextAlloc(), nextEnd()
	for a != none || e != none {
		seq := min(a, e)
		changed := false
		for ; e == seq; e = nextEnd() {
			j := int(*x.ends.at(k))
			k++
			if r := x.rows.at(j); ss.keeps(x, r, j) {
				v.ended(seq, j, r, x.size(r, j), x.objects(j))
				changed = true
			}
		}
		for ; a == seq; a = nextAlloc() {
			r := x.rows.at(i)
			if r.flags&fNoBlock == 0 && ss.keeps(x, r, i) {
				v.made(seq, i, r, x.size(r, i), x.objects(i))
				changed = true
			}
			i++
		}
		if changed {
			v.after(seq)
		}
	}
}

// heapState is a subset's live bytes and blocks as a sweep goes.
type heapState struct {
	bytes, blocks uint64
}

func (h *heapState) live(_ int, _ *rowRec, size uint64, n uint32) {
	h.bytes += size
	h.blocks += uint64(n)
}
func (h *heapState) made(_ int64, _ int, _ *rowRec, size uint64, n uint32) {
	h.bytes += size
	h.blocks += uint64(n)
}
func (h *heapState) ended(_ int64, _ int, _ *rowRec, size uint64, n uint32) {
	h.bytes -= size
	h.blocks -= uint64(n)
}

// peakFinder finds the first instant of a subset's largest heap, as peakIn
// does for the whole heap: among the state at the span's start (after
// event s0-1) and after each of its events.
type peakFinder struct {
	heapState
	seq  int64 // -1: none yet
	best heapState
}

func (p *peakFinder) begin(s0 int64) {
	if s0 > 0 {
		p.seq, p.best = s0-1, p.heapState
	}
}

func (p *peakFinder) after(seq int64) {
	if p.seq < 0 || p.bytes > p.best.bytes {
		p.seq, p.best = seq, p.heapState
	}
}

// subsetPeak returns the peak of ss in the span [s0, s1): its event (-1
// when nothing of ss was live) and the heap then.
func (x *Index) subsetPeak(ss *subset, s0, s1 int64) (int64, analyze.Peak) {
	p := &peakFinder{seq: -1}
	x.sweep(ss, s0, s1, p)
	if p.seq < 0 || p.best.bytes == 0 {
		return -1, analyze.Peak{}
	}
	return p.seq, analyze.Peak{Time: x.evs.time(int(p.seq)), Bytes: p.best.bytes, Blocks: p.best.blocks}
}

// bucketWalk follows the buckets of a timeline as a sweep goes: bucket b
// holds the events [bounds[b], bounds[b+1]).
type bucketWalk struct {
	bounds []int64
	b      int
	// enter is called with each bucket the walk enters after the first.
	enter func(b int)
}

// newBucketWalk cuts sp as Timeline does (at most points buckets of one
// width) and returns the buckets, their times set, and their walk.
func (x *Index) newBucketWalk(sp Span, points int) ([]Bucket, *bucketWalk) {
	dur := sp.To - sp.From
	if dur <= 0 {
		return nil, &bucketWalk{bounds: []int64{sp.S0, sp.S1}}
	}
	width := max((dur+int64(max(points, 1))-1)/int64(max(points, 1)), 1)
	n := int((dur + width - 1) / width)
	out := make([]Bucket, n)
	w := &bucketWalk{bounds: make([]int64, n+1)}
	for i := range out {
		out[i] = Bucket{Time: sp.From + int64(i)*width, Width: width}
		if i > 0 {
			w.bounds[i] = min(max(x.seqAt(out[i].Time), sp.S0), sp.S1)
		}
	}
	w.bounds[0], w.bounds[n] = sp.S0, sp.S1
	return out, w
}

// to moves the walk to the bucket of event seq.
func (w *bucketWalk) to(seq int64) {
	for w.b+1 < len(w.bounds)-1 && seq >= w.bounds[w.b+1] {
		w.b++
		w.enter(w.b)
	}
}

// finish moves the walk past the last bucket.
func (w *bucketWalk) finish() {
	for w.b+1 < len(w.bounds)-1 {
		w.b++
		w.enter(w.b)
	}
}

// timelineSweep builds a subset's timeline, as Timeline builds the whole
// heap's, and finds its peak on the way.
type timelineSweep struct {
	peakFinder
	out  []Bucket
	walk *bucketWalk
	// madeNow and endedNow are the blocks (objects) of the subset the
	// current event made by a call and ended other than by an exit: its
	// allocations and frees, as Timeline counts them.
	madeNow, endedNow uint64
}

func (t *timelineSweep) begin(s0 int64) {
	t.peakFinder.begin(s0)
	for i := range t.out {
		t.out[i].MaxBytes, t.out[i].MaxBlocks = t.bytes, t.blocks
	}
	t.walk.enter = func(b int) {
		t.out[b-1].EndBytes, t.out[b-1].EndBlocks = t.bytes, t.blocks
		t.out[b].MaxBytes, t.out[b].MaxBlocks = t.bytes, t.blocks
	}
}

func (t *timelineSweep) made(seq int64, i int, r *rowRec, size uint64, n uint32) {
	t.walk.to(seq)
	t.heapState.made(seq, i, r, size, n)
	if r.flags&fCont == 0 {
		t.madeNow += uint64(n)
	}
}

func (t *timelineSweep) ended(seq int64, i int, r *rowRec, size uint64, n uint32) {
	t.walk.to(seq)
	t.heapState.ended(seq, i, r, size, n)
	if !r.exited() {
		t.endedNow += uint64(n)
	}
}

func (t *timelineSweep) after(seq int64) {
	t.peakFinder.after(seq)
	o := &t.out[t.walk.b]
	if t.bytes > o.MaxBytes {
		o.MaxBytes, o.MaxBlocks = t.bytes, t.blocks
	}
	o.Allocs += t.madeNow
	o.Frees += t.endedNow
	t.madeNow, t.endedNow = 0, 0
}

// subsetTimeline is Timeline for the heap of ss alone, and its peak (as
// subsetPeak's).
func (x *Index) subsetTimeline(ss *subset, sp Span, points int) ([]Bucket, int64, analyze.Peak) {
	out, walk := x.newBucketWalk(sp, points)
	t := &timelineSweep{peakFinder: peakFinder{seq: -1}, out: out, walk: walk}
	if len(out) > 0 {
		x.sweep(ss, sp.S0, sp.S1, t)
		t.walk.finish()
		last := &out[len(out)-1]
		last.EndBytes, last.EndBlocks = t.bytes, t.blocks
	}
	if t.seq < 0 || t.best.bytes == 0 {
		return out, -1, analyze.Peak{}
	}
	return out, t.seq, analyze.Peak{Time: x.evs.time(int(t.seq)), Bytes: t.best.bytes, Blocks: t.best.blocks}
}

// TimelineOf is Timeline for what f keeps: the heap of its process, its
// thread and the sites its Match keeps (the whole heap when it keeps
// every row).
func (x *Index) TimelineOf(f Filter, sp Span, points int) []Bucket {
	b, _, _ := x.TimelinePeakOf(f, sp, points)
	return b
}

// TimelinePeakOf is TimelineOf and PeakOf at once: for a filter, one pass
// over the rows it keeps.
func (x *Index) TimelinePeakOf(f Filter, sp Span, points int) ([]Bucket, analyze.Peak, bool) {
	if ss := x.subsetOf(f); ss != nil {
		b, seq, p := x.subsetTimeline(ss, sp, max(points, 1))
		return b, p, seq >= 0
	}
	p, ok := x.Peak(sp)
	return x.Timeline(sp, points), p, ok
}

// PeakOf is Peak for what f keeps, as TimelineOf: the first instant of
// the span where its heap was largest; ok is false when nothing of it was
// live.
func (x *Index) PeakOf(f Filter, sp Span) (analyze.Peak, bool) {
	if ss := x.subsetOf(f); ss != nil {
		seq, p := x.subsetPeak(ss, sp.S0, sp.S1)
		return p, seq >= 0
	}
	return x.Peak(sp)
}
