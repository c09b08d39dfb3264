package query

import (
	"encoding/json"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/internal/testutil"
	"github.com/heapscope/heapscope/internal/tracetest"
	"github.com/heapscope/heapscope/report"
)

func TestMain(m *testing.M) { testutil.Main(m) }

func record(t *testing.T, workload string) string {
	t.Helper()
	bin := testutil.MustBuild(t, workload, testutil.Options{})
	path := filepath.Join(t.TempDir(), workload+".hst")
	tracetest.Record(t, path, bin)
	return path
}

func build(t *testing.T, path string) *Index {
	t.Helper()
	x, err := Build(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	return x
}

// comparable drops what differs by construction between a report of the
// model and one of the index: the timeline (the model's is sampled, the
// index's bucketed) and the events (the model counts free(NULL)).
func comparable(d *report.JSON) *report.JSON {
	d.Timeline = nil
	d.Trace.Events = 0
	d.Trace.DurationNs = 0
	return d
}

func roundTrip(t *testing.T, d *report.JSON) string {
	b, err := json.MarshalIndent(d, "", " ")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// The index's answer for the whole trace, rendered by package report, is
// the report of the heap model: the same sites, leaks, peak, histogram and
// totals.
func TestWholeTraceEqualsReport(t *testing.T) {
	for _, w := range []string{"report_known", "serve_phases"} {
		t.Run(w, func(t *testing.T) {
			path := record(t, w)
			x := build(t, path)
			rep, err := report.Load(path, report.LoadOptions{})
			if err != nil {
				t.Fatal(err)
			}
			want := comparable(rep.Document(0))
			got := comparable(report.New(x.Profile(x.Window(Filter{})), x.trace(), x.res).Document(0))
			if g, w := roundTrip(t, got), roundTrip(t, want); g != w {
				t.Errorf("index:\n%s\nreport:\n%s", g, w)
			}
			// The index's own report (of the model) is the report too.
			if g, w := roundTrip(t, comparable(x.Report.Document(0))), roundTrip(t, want); g != w {
				t.Errorf("index's report:\n%s\nreport:\n%s", g, w)
			}
		})
	}
}

// phases finds the two pauses of serve_phases in the index's events: the
// two largest gaps between consecutive events. It returns the middle of
// each.
func phases(t *testing.T, x *Index) (gap1, gap2 int64) {
	t.Helper()
	var a, b int // indices of the events after the largest gaps
	tm := func(i int) int64 { return x.evs.time(i) }
	for i := 1; i < x.evs.len(); i++ {
		d := tm(i) - tm(i-1)
		switch {
		case a == 0 || d > tm(a)-tm(a-1):
			b, a = a, i
		case b == 0 || d > tm(b)-tm(b-1):
			b = i
		}
	}
	if a > b {
		a, b = b, a
	}
	return (tm(a) + tm(a-1)) / 2, (tm(b) + tm(b-1)) / 2
}

func fnOf(s *Site) string {
	if len(s.Frames) == 0 {
		return ""
	}
	return s.Frames[0].Function
}

// The window of serve_phases' middle phase has the classes the program
// made, by site and in total, and they agree with the timeline.
func TestWindowClasses(t *testing.T) {
	x := build(t, record(t, "serve_phases"))
	g1, g2 := phases(t, x)
	res := x.Window(Filter{From: g1, To: g2})
	want := map[string][4]Amount{
		"early_leak":  {AOFO: {10000, 5}},
		"early_freed": {AOFI: {1200, 4}},
		"mid_temp":    {AIFI: {640, 10}},
		"mid_kept":    {AIFO: {15000, 3}},
	}
	var total [4]Amount
	for fn, w := range want {
		for c := range w {
			total[c].Bytes += w[c].Bytes
			total[c].Blocks += w[c].Blocks
		}
		_ = fn
	}
	for _, s := range x.Sites() {
		fn := fnOf(s)
		if w, ok := want[fn]; ok {
			if got := res.Sites[s.ID].Classes; got != w {
				t.Errorf("%s: classes %v, want %v", fn, got, w)
			}
		} else if res.Sites[s.ID].Classes != [4]Amount{} {
			t.Errorf("%s: classes %v, want none", fn, res.Sites[s.ID].Classes)
		}
	}
	if res.Total.Classes != total {
		t.Errorf("total classes %v, want %v", res.Total.Classes, total)
	}
	// AOFI+AOFO is the heap at t0, AIFO+AOFO at t1, as the timeline has them.
	c := res.Total.Classes
	at := func(s int64) uint64 {
		if s == 0 {
			return 0
		}
		live, _ := x.evs.state(int(s - 1))
		return live
	}
	if c[AOFI].Bytes+c[AOFO].Bytes != at(res.Span.S0) || c[AIFO].Bytes+c[AOFO].Bytes != at(res.Span.S1) {
		t.Errorf("classes %v disagree with the heap at t0 (%d) and t1 (%d)", c, at(res.Span.S0), at(res.Span.S1))
	}
	if res.Total.Temporary != 10 || res.Total.Allocations != 13 || res.Total.Bytes != 15640 || res.Total.Frees != 14 {
		t.Errorf("window totals %+v", res.Total)
	}
	if res.Peak.Bytes != 25000 || res.Peak.Blocks != 8 {
		t.Errorf("window peak %+v, want 25000 bytes in 8 blocks", res.Peak)
	}
}

// What the window allocated agrees with `report --from --to`: its calls
// and bytes, and its leaks are the window's AIFO.
func TestWindowAgreesWithWindowedReport(t *testing.T) {
	path := record(t, "serve_phases")
	x := build(t, path)
	g1, g2 := phases(t, x)
	start := x.Header.MonoStart
	rep, err := report.Load(path, report.LoadOptions{From: timeD(g1 - start), To: timeD(g2 - start)})
	if err != nil {
		t.Fatal(err)
	}
	res := x.Window(Filter{From: g1, To: g2})
	d := rep.Document(0)
	byFn := map[string]uint64{}
	for _, l := range d.Leaks {
		byFn[l.Stack[0].Function] += l.Bytes
	}
	got := map[string]uint64{}
	for _, s := range x.Sites() {
		if b := res.Sites[s.ID].Classes[AIFO].Bytes; b > 0 {
			got[fnOf(s)] += b
		}
	}
	if !reflect.DeepEqual(got, byFn) {
		t.Errorf("AIFO by function %v, windowed report's leaks %v", got, byFn)
	}
	if d.Summary.Allocations != res.Total.Allocations || d.Summary.BytesAllocated != res.Total.Bytes ||
		d.Summary.TemporaryAllocations != res.Total.Temporary {
		t.Errorf("window totals %+v, windowed report %+v", res.Total, d.Summary)
	}
}

// A window outside the trace is clamped to it.
func TestWindowClamped(t *testing.T) {
	x := build(t, record(t, "serve_phases"))
	for _, f := range []Filter{{From: -5, To: 1}, {From: x.End() + 1e9, To: x.End() + 2e9}, {From: 0, To: 1 << 62}} {
		sp := x.Span(f)
		if sp.From < x.Start() || sp.To > x.End()+1 || sp.From > sp.To || sp.S0 < 0 || sp.S1 > int64(x.Events()) {
			t.Errorf("%+v: span %+v outside the trace [%d, %d]", f, sp, x.Start(), x.End())
		}
		x.Window(f)
		x.Timeline(sp, 100)
	}
	whole := x.Window(Filter{From: 0, To: 1 << 62})
	if whole.Total.Leaked.Bytes != 11400 || whole.Total.Leaked.Blocks != 7 || whole.Total.End.Bytes != 0 {
		t.Errorf("leaks of the clamped whole %+v, in the heap at the end %+v (the process exited)", whole.Total.Leaked, whole.Total.End)
	}
}

// The timeline's buckets keep the peak and end with the heap at the end:
// empty, once the process exited (its 11400 bytes of leaks left the heap).
func TestTimeline(t *testing.T) {
	x := build(t, record(t, "serve_phases"))
	sp := x.Span(Filter{})
	for _, n := range []int{1, 7, 500} {
		tl := x.Timeline(sp, n)
		if len(tl) == 0 || len(tl) > n {
			t.Fatalf("%d points: got %d", n, len(tl))
		}
		var max, allocs uint64
		for _, b := range tl {
			max = maxU(max, b.MaxBytes)
			allocs += b.Allocs
		}
		if max != 25000 || tl[len(tl)-1].EndBytes != 0 || allocs != 24 {
			t.Errorf("%d points: max %d, end %d, allocs %d", n, max, tl[len(tl)-1].EndBytes, allocs)
		}
	}
}

func maxU(a, b uint64) uint64 {
	if a > b {
		return a
	}
	return b
}

func timeD(ns int64) time.Duration { return time.Duration(ns) }

// The events rebuilt from the rows and the groups' summaries give back
// the times fed to the builder and the heap after each event, across
// groups, in groups whose times fit offsets from their first and in those
// that do not (a trace idle for seconds, a time before the group's first),
// with blocks of 5 GiB, unmatched frees and failed allocations.
func TestEventsColumn(t *testing.T) {
	b := newBuilder(0)
	var evs []event.Event
	var times []int64
	var lives []uint64
	var blocks []uint32
	var live uint64
	var nlive uint32
	var addrs []uint64
	sizes := map[uint64]uint64{}
	tm := int64(1e12)
	for i := 0; i < 5*groupLen+7; i++ {
		switch {
		case i == groupLen+100:
			tm += 5e9
		case i == 3*groupLen+7:
			tm -= 1000 // before the group's first
		default:
			tm += int64(i % 7)
		}
		e := event.Event{Time: tm, PID: 1, TID: 1, Stack: 1}
		switch {
		case i%11 == 5:
			e.Kind, e.Addr = event.KindFree, 0xdead0000+uint64(i) // unmatched
		case i%13 == 6:
			e.Kind = event.KindAlloc // failed: no block
		case len(addrs) > 0 && i%3 == 0:
			e.Kind, e.Addr = event.KindFree, addrs[len(addrs)-1]
			addrs = addrs[:len(addrs)-1]
			live -= sizes[e.Addr]
			nlive--
		default:
			e.Kind, e.Addr, e.Size = event.KindAlloc, uint64(0x1000+16*i), uint64(1+i%700)
			if i == 2*groupLen+9 {
				e.Size = 5 << 30
			}
			sizes[e.Addr] = e.Size
			addrs = append(addrs, e.Addr)
			live += e.Size
			nlive++
		}
		evs = append(evs, e)
		times, lives, blocks = append(times, tm), append(lives, live), append(blocks, nlive)
	}
	if err := b.Events(evs); err != nil {
		t.Fatal(err)
	}
	c := &b.finish().evs
	if c.len() != len(evs) {
		t.Fatalf("%d events, want %d", c.len(), len(evs))
	}
	if c.wide[0] != nil || c.wide[1] == nil || c.wide[3] == nil || c.wide[4] != nil {
		t.Errorf("wide groups: %v %v %v %v", c.wide[0] != nil, c.wide[1] != nil, c.wide[3] != nil, c.wide[4] != nil)
	}
	for i, w := range times {
		l, k := c.state(i)
		if got := c.time(i); got != w || l != lives[i] || k != blocks[i] {
			t.Fatalf("event %d: time %d, state %d/%d; want time %d, %d/%d", i, got, l, k, w, lives[i], blocks[i])
		}
	}
}

// Timeline and the peak of a window, which read the event columns a chunk
// at a time, agree with reading them an event at a time, on an index of
// several chunks, one of them of whole times (an idle gap of 5 s), one of
// whole heap sizes (a block of 5 GiB).
func TestTimelineChunks(t *testing.T) {
	b := newBuilder(0)
	var evs []event.Event
	tm := int64(1e9)
	var live []uint64
	for i := 0; i < 3*chunkLen+100; i++ {
		tm += int64(i % 5 * 1000)
		if i == chunkLen+10 {
			tm += 5e9
		}
		e := event.Event{Time: tm, PID: 1, TID: 1, Stack: 1}
		if len(live) > 0 && i%3 == 0 {
			e.Kind, e.Addr = event.KindFree, live[len(live)-1]
			live = live[:len(live)-1]
		} else {
			e.Kind, e.Addr, e.Size = event.KindAlloc, uint64(0x1000+16*i), uint64(1+i%700)
			if i == 2*chunkLen+50 {
				e.Size = 5 << 30 // the heap grows by more than an offset holds
			}
			live = append(live, e.Addr)
		}
		evs = append(evs, e)
	}
	if err := b.Events(evs); err != nil {
		t.Fatal(err)
	}
	x := b.finish()
	if x.evs.wide[(chunkLen+10)>>groupBits] == nil || x.big == nil {
		t.Fatal("no group of whole times, or no size of 4 GiB or more")
	}
	mid := x.evs.time(2*chunkLen + 60) // inside the chunk of whole heap sizes
	for _, w := range [][2]int64{{0, 0}, {x.Start() + 3e9, x.Start() + 6e9}, {x.Start() + 1000, x.Start() + 2e6}, {mid, 0}, {mid, x.evs.time(2*chunkLen + 5000)}} {
		sp := x.Span(Filter{From: w[0], To: w[1]})
		for _, points := range []int{1, 7, 1400} {
			got := x.Timeline(sp, points)
			want := timelineOneByOne(x, sp, points)
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("window %v, %d points: timelines differ", w, points)
			}
		}
		p := int64(-1)
		var best uint64
		for i := max(sp.S0-1, 0); i < sp.S1; i++ {
			if v, _ := x.evs.state(int(i)); p < 0 || v > best {
				p, best = i, v
			}
		}
		if got := x.peakIn(sp.S0, sp.S1); got != p {
			t.Errorf("window %v: peak at %d, want %d", w, got, p)
		}
	}
}

// timelineOneByOne is Timeline reading an event at a time.
func timelineOneByOne(x *Index, sp Span, points int) []Bucket {
	out, live, blocks := x.buckets(sp, points)
	n := len(out)
	b := 0
	for s := sp.S0; s < sp.S1; s++ {
		t := x.evs.time(int(s))
		for b+1 < n && t >= out[b+1].Time {
			out[b].EndBytes, out[b].EndBlocks = live, blocks
			b++
			out[b].MaxBytes, out[b].MaxBlocks = live, blocks
		}
		l, k := x.evs.state(int(s))
		live, blocks = l, uint64(k)
		o := &out[b]
		if live > o.MaxBytes {
			o.MaxBytes, o.MaxBlocks = live, blocks
		}
		kind := x.evs.kind(int(s))
		if kind&evMade != 0 {
			o.Allocs++
		}
		if kind&evEnded != 0 {
			o.Frees++
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

// The windowed index holds nothing per event: a trace of blocks made and
// freed costs a row (28 bytes) and an end (4) per block, and the groups'
// summaries, not the 13 bytes an event (26 a block) it held besides.
func TestIndexBytesPerBlock(t *testing.T) {
	b := newBuilder(0)
	const n = 3 * chunkLen
	evs := make([]event.Event, 0, 2*n)
	for i := 0; i < n; i++ {
		addr := uint64(0x1000 + 16*(i%64))
		tm := int64(1e9 + 100*i)
		evs = append(evs,
			event.Event{Kind: event.KindAlloc, Time: tm, PID: 1, TID: 1, Stack: 1, Addr: addr, Size: 48},
			event.Event{Kind: event.KindFree, Time: tm + 50, PID: 1, TID: 1, Addr: addr})
		if len(evs) == cap(evs) || i%64 == 63 {
			if err := b.Events(evs); err != nil {
				t.Fatal(err)
			}
			evs = evs[:0]
		}
	}
	x := b.finish()
	if x.Events() != 2*n || x.Blocks() != n {
		t.Fatalf("%d events, %d blocks; want %d, %d", x.Events(), x.Blocks(), 2*n, n)
	}
	if got := float64(x.columnBytes()) / n; got > 34 {
		t.Errorf("the index holds %.1f bytes a block, want at most 34 (28 a row, 4 an end, the summaries)", got)
	}
}

// A row keeps its thread as a 16-bit index; the threads past the first
// 65535 are kept beside, and every row gives back its own.
func TestManyThreads(t *testing.T) {
	b := newBuilder(0)
	const n = manyThreads + 1000
	evs := make([]event.Event, 0, n)
	for i := 0; i < n; i++ {
		evs = append(evs, event.Event{Kind: event.KindAlloc, Time: int64(1e9 + i), PID: 1, TID: uint32(7 + i%(n-10)), Stack: 1, Addr: uint64(0x1000 + 16*i), Size: 8})
	}
	if err := b.Events(evs); err != nil {
		t.Fatal(err)
	}
	x := b.finish()
	if len(x.bigThread) == 0 {
		t.Fatal("no row past the first 65535 threads")
	}
	for i := 0; i < x.rows.len(); i++ {
		if got, want := x.tid(x.rows.at(i), i), evs[i].TID; got != want {
			t.Fatalf("row %d: thread %d, want %d", i, got, want)
		}
	}
}
