package query

import (
	"math/rand"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/heapscope/heapscope/analyze"
	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/report"
	"github.com/heapscope/heapscope/tracefile"
)

// writeRandomTrace writes a few processes and threads allocating,
// reallocating (moving, in place, to 0, failing), freeing, freeing what
// was never allocated, losing frees (a new block at a live address) and
// freeing NULL, with many timestamps shared, from many stacks.
func writeRandomTrace(t *testing.T, path string, seed int64) {
	t.Helper()
	writeRandomTraceN(t, path, seed, 40000)
}

// writeRandomTraceN is writeRandomTrace with n events (an idle gap at the
// 30000th when n passes it).
func writeRandomTraceN(t testing.TB, path string, seed int64, n int) {
	t.Helper()
	writeRandomTraceRate(t, path, seed, n, 0)
}

// writeRandomTraceRate is writeRandomTraceN of a trace that says it was
// sampled at rate (its events are then the ones recorded).
func writeRandomTraceRate(t testing.TB, path string, seed int64, n int, rate int64) {
	t.Helper()
	const start = int64(1_000_000_000)
	w, err := tracefile.Create(path, tracefile.Header{Session: "random", Provider: "preload", MonoStart: start,
		WallStart: time.Unix(1700000000, 0), SampleRate: rate}, tracefile.Options{ChunkSize: 16 << 10})
	if err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	for pid := uint32(1); pid <= 3; pid++ {
		must(w.Process(event.Process{PID: pid, Time: start, Exe: "/bin/true"}))
		for id := event.StackID(1); id <= 40; id++ {
			must(w.Stack(event.Stack{PID: pid, ID: id, Frames: []uint64{0x1000 + uint64(id)*8, 0x1020}}))
		}
	}
	rng := rand.New(rand.NewSource(seed))
	var live [4][]uint64
	tm := start
	next := uint64(0x100000)
	for i := 0; i < n; i++ {
		if rng.Intn(3) == 0 {
			tm += int64(rng.Intn(50000)) // else the same timestamp
		}
		if i == 30000 {
			tm += 5e9 // idle: the index keeps this part's times whole
		}
		switch i {
		case 20000:
			// Process 3 exits with blocks live, and execs: the new
			// program's blocks are not the old one's.
			must(w.Exit(event.Exit{PID: 3, Time: tm}))
			must(w.Process(event.Process{PID: 3, Time: tm, Exe: "/bin/false"}))
			live[3] = nil
		case 35000:
			must(w.Exit(event.Exit{PID: 2, Time: tm})) // and makes no more events
		}
		pid := uint32(1 + rng.Intn(3))
		if i >= 35000 && pid == 2 {
			pid = 1
		}
		e := event.Event{Time: tm, PID: pid, TID: pid*10 + uint32(rng.Intn(2)), Stack: event.StackID(1 + rng.Intn(40))}
		l := &live[pid]
		switch r := rng.Intn(100); {
		case r < 45 || len(*l) == 0:
			next += 16
			e.Kind, e.Func, e.Addr, e.Size = event.KindAlloc, event.FuncMalloc, next, uint64(rng.Intn(2000))
			if rng.Intn(1000) == 0 {
				e.Size = 5<<30 + uint64(rng.Intn(100)) // beyond a row's 32 bits
			}
			if r < 2 {
				e.Addr = 0 // failed
			} else {
				*l = append(*l, next)
			}
		case r < 47: // a new block where one is live: its free was lost
			j := rng.Intn(len(*l))
			e.Kind, e.Func, e.Addr, e.Size = event.KindAlloc, event.FuncMalloc, (*l)[j], 64
		case r < 55:
			j := rng.Intn(len(*l))
			e.Kind, e.Func, e.OldAddr, e.Size = event.KindRealloc, event.FuncRealloc, (*l)[j], uint64(rng.Intn(4000))
			switch rng.Intn(4) {
			case 0: // in place
				e.Addr = e.OldAddr
			case 1: // to size 0: freed
				e.Size = 0
				(*l)[j] = (*l)[len(*l)-1]
				*l = (*l)[:len(*l)-1]
			case 2: // failed
			default:
				next += 16
				e.Addr = next
				(*l)[j] = next
			}
		case r < 57:
			e.Kind, e.Func, e.Addr = event.KindFree, event.FuncFree, 0x10 // never allocated
		case r < 58:
			e.Kind, e.Func = event.KindFree, event.FuncFree // free(NULL)
		default:
			j := rng.Intn(len(*l))
			e.Kind, e.Func, e.Addr = event.KindFree, event.FuncFree, (*l)[j]
			(*l)[j] = (*l)[len(*l)-1]
			*l = (*l)[:len(*l)-1]
		}
		must(w.Events([]event.Event{e}))
	}
	must(w.Stats(event.Stats{Time: tm + 1, Delivered: 40000}))
	must(w.Close())
}

// On random traces with every kind of event the index's whole-trace answer
// is the heap model's report, and every window's classes agree with the
// heap at its ends.
func TestRandomTraces(t *testing.T) {
	for seed := int64(1); seed <= 3; seed++ {
		path := filepath.Join(t.TempDir(), "random.hst")
		writeRandomTrace(t, path, seed)
		x := build(t, path)
		rep, err := report.Load(path, report.LoadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		want := comparable(rep.Document(0))
		got := comparable(report.New(x.Profile(x.Window(Filter{})), x.trace(), x.res).Document(0))
		if g, w := roundTrip(t, got), roundTrip(t, want); g != w {
			t.Fatalf("seed %d: the index's report differs from the model's", seed)
		}
		if got.Summary.MissedFrees == 0 || got.Summary.UnmatchedFrees == 0 || got.Summary.FailedAllocations == 0 || got.Summary.TemporaryAllocations == 0 {
			t.Errorf("seed %d: the trace lacks a case: %+v", seed, got.Summary)
		}
		rng := rand.New(rand.NewSource(seed))
		span := x.End() - x.Start()
		for k := 0; k < 20; k++ {
			a := x.Start() + rng.Int63n(span)
			b := a + 1 + rng.Int63n(x.End()-a+1)
			res := x.Window(Filter{From: a, To: b})
			c := res.Total.Classes
			live := func(s int64) (uint64, uint64) {
				if s == 0 {
					return 0, 0
				}
				live, blocks := x.evs.state(int(s - 1))
				return live, uint64(blocks)
			}
			b0, n0 := live(res.Span.S0)
			b1, n1 := live(res.Span.S1)
			if c[AOFI].Bytes+c[AOFO].Bytes != b0 || c[AOFI].Blocks+c[AOFO].Blocks != n0 ||
				c[AIFO].Bytes+c[AOFO].Bytes != b1 || c[AIFO].Blocks+c[AOFO].Blocks != n1 {
				t.Errorf("seed %d window %d: classes %v, heap at t0 %d/%d, at t1 %d/%d", seed, k, c, b0, n0, b1, n1)
			}
			if k >= 3 {
				continue
			}
			// What the window allocated is what `report --from --to` sees.
			base := x.Header.MonoStart
			wr, err := report.Load(path, report.LoadOptions{From: time.Duration(a - base), To: time.Duration(b - base)})
			if err != nil {
				t.Fatal(err)
			}
			ws := wr.Document(0).Summary
			// Its leaks are AIFO and what of AIFI the processes' exits
			// took out of the heap.
			x := res.Total.ExitedAIFI
			if ws.LeakedBytes != c[AIFO].Bytes+x.Bytes || ws.LeakedBlocks != c[AIFO].Blocks+x.Blocks || ws.BytesAllocated != res.Total.Bytes ||
				ws.Allocations != res.Total.Allocations || ws.Reallocations != res.Total.Reallocations || ws.TemporaryAllocations != res.Total.Temporary {
				t.Errorf("seed %d window %d: windowed report %+v, index AIFO %+v, totals %+v", seed, k, ws, c[AIFO], res.Total)
			}
		}
	}
}

// A window read in several parts on several goroutines is the window read
// in one.
func TestWindowParts(t *testing.T) {
	path := filepath.Join(t.TempDir(), "random.hst")
	writeRandomTrace(t, path, 4)
	x := build(t, path)
	defer func(p, m int) { scanMinPart, scanMaxParts = p, m }(scanMinPart, scanMaxParts)
	rng := rand.New(rand.NewSource(4))
	span := x.End() - x.Start()
	for k := 0; k < 10; k++ {
		f := Filter{}
		if k > 0 {
			f.From = x.Start() + rng.Int63n(span)
			f.To = f.From + 1 + rng.Int63n(x.End()-f.From+1)
			f.At = x.Start() + rng.Int63n(span)
		}
		scanMinPart, scanMaxParts = 1<<30, 1
		one := x.Window(f)
		scanMinPart, scanMaxParts = 997, 5
		parts := x.Window(f)
		if !reflect.DeepEqual(one, parts) {
			t.Errorf("window %d: in parts %+v, in one %+v", k, parts.Total, one.Total)
		}
	}
}

// TestSampledTrace: in a sampled trace the index weighs each row as the
// heap model counts it (analyze.SampledBlock), so that every answer is the
// same estimate: the whole trace's report is the model's, the timeline's
// and the window's peak are the model's peak, every window's classes add
// up to the heap at its ends, and the flame graphs and quick answers read
// the same scaled counts.
func TestSampledTrace(t *testing.T) {
	for seed := int64(1); seed <= 2; seed++ {
		path := filepath.Join(t.TempDir(), "sampled.hst")
		writeRandomTraceRate(t, path, seed, 20000, 4096)
		x := build(t, path)
		rep, err := report.Load(path, report.LoadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !rep.Profile.Estimated() {
			t.Fatal("the model does not take the trace for sampled")
		}
		want := comparable(rep.Document(0))
		got := comparable(report.New(x.Profile(x.Window(Filter{})), x.trace(), x.res).Document(0))
		if g, w := roundTrip(t, got), roundTrip(t, want); g != w {
			t.Fatalf("seed %d: the index's report differs from the model's:\nindex %s\nmodel %s", seed, g, w)
		}
		if got.Trace.Estimated == "" {
			t.Errorf("seed %d: the index's report is not labelled an estimate", seed)
		}
		sp := x.Span(Filter{})
		// A process's heap (its timeline, peak and consumed chart) weighs
		// its rows as the model of it alone counts them: bytes and objects.
		for pid := uint32(1); pid <= 3; pid++ {
			alone, err := report.Load(path, report.LoadOptions{Processes: analyze.Processes{PIDs: []uint32{pid}}})
			if err != nil {
				t.Fatal(err)
			}
			f := Filter{PID: pid}
			pk, ok := x.PeakOf(f, sp)
			if !ok || pk != alone.Profile.Peak {
				t.Errorf("seed %d pid %d: peak %+v, the model of it alone %+v", seed, pid, pk, alone.Profile.Peak)
			}
			var top uint64
			for _, v := range x.Consumed(x.Window(f), 5, 300).Total {
				top = maxU(top, v)
			}
			if top != pk.Bytes {
				t.Errorf("seed %d pid %d: the consumed chart's largest %d, its peak %d", seed, pid, top, pk.Bytes)
			}
		}
		pk, ok := x.Peak(sp)
		var top uint64
		for _, b := range x.Timeline(sp, 300) {
			top = maxU(top, b.MaxBytes)
		}
		if !ok || pk.Bytes != rep.Profile.Peak.Bytes || pk.Blocks != rep.Profile.Peak.Blocks || top != pk.Bytes {
			t.Errorf("seed %d: index peak %+v, timeline's largest %d, model's peak %+v", seed, pk, top, rep.Profile.Peak)
		}
		q, ok := x.Quick(Filter{})
		whole := x.Window(Filter{})
		if !ok || q.Total.Bytes != whole.Total.Bytes || q.Total.Leaked != whole.Total.Leaked || q.Total.Peak != whole.Total.Peak {
			t.Errorf("seed %d: quick %+v, window %+v", seed, q.Total, whole.Total)
		}
		for _, c := range []Cost{CostLeaks, CostPeak, CostBytes, CostCalls} {
			if a, b := x.Flame(q, c, false, 0, 0).Total, x.Flame(whole, c, false, 0, 0).Total; a != b || a == 0 {
				t.Errorf("seed %d: cost %v: quick flame total %d, window's %d", seed, c, a, b)
			}
		}
		rng := rand.New(rand.NewSource(seed))
		for k := 0; k < 10; k++ {
			a := x.Start() + rng.Int63n(x.End()-x.Start())
			res := x.Window(Filter{From: a, To: a + 1 + rng.Int63n(x.End()-a+1)})
			c := res.Total.Classes
			b1, n1 := x.evs.state(int(res.Span.S1 - 1))
			if c[AIFO].Bytes+c[AOFO].Bytes != b1 || c[AIFO].Blocks+c[AOFO].Blocks != uint64(n1) {
				t.Errorf("seed %d window %d: classes %v, heap at the end %d/%d", seed, k, c, b1, n1)
			}
		}
	}
}

// TestFilteredHeap: the timeline and the peak of one process (or thread)
// are of its heap alone: a process's are those of the heap model of it
// alone (`report --pid`), and a window of it has its peak there; a
// thread's timeline reaches its peak, and its classes add up to its heap.
func TestFilteredHeap(t *testing.T) {
	path := filepath.Join(t.TempDir(), "random.hst")
	writeRandomTrace(t, path, 5)
	x := build(t, path)
	sp := x.Span(Filter{})
	for pid := uint32(1); pid <= 3; pid++ {
		rep, err := report.Load(path, report.LoadOptions{Processes: analyze.Processes{PIDs: []uint32{pid}}})
		if err != nil {
			t.Fatal(err)
		}
		f := Filter{PID: pid}
		pk, ok := x.PeakOf(f, sp)
		want := rep.Profile.Peak
		if !ok || pk != want {
			t.Errorf("pid %d: peak %+v, the model of it alone %+v", pid, pk, want)
		}
		var top uint64
		for _, b := range x.TimelineOf(f, sp, 200) {
			top = maxU(top, b.MaxBytes)
		}
		if top != want.Bytes {
			t.Errorf("pid %d: timeline's largest %d, its peak %d", pid, top, want.Bytes)
		}
		if res := x.Window(f); res.Peak != want || res.Total.Peak.Bytes != want.Bytes {
			t.Errorf("pid %d: window's peak %+v (sites at it %d), want %+v", pid, res.Peak, res.Total.Peak.Bytes, want)
		}
		if d := x.WindowReport(x.Window(f)).Document(0); d.Summary.PeakBytes != want.Bytes || d.Summary.LeakedBytes != rep.Document(0).Summary.LeakedBytes {
			t.Errorf("pid %d: window report peak %d leaked %d, report --pid %d %d", pid, d.Summary.PeakBytes, d.Summary.LeakedBytes,
				want.Bytes, rep.Document(0).Summary.LeakedBytes)
		}
	}
	rng := rand.New(rand.NewSource(5))
	for _, tid := range []uint32{10, 11, 21, 30} {
		f := Filter{TID: tid}
		pk, ok := x.PeakOf(f, sp)
		var top uint64
		tl := x.TimelineOf(f, sp, 300)
		for _, b := range tl {
			top = maxU(top, b.MaxBytes)
		}
		if !ok || top != pk.Bytes || pk.Bytes == 0 {
			t.Errorf("tid %d: peak %+v, timeline's largest %d", tid, pk, top)
		}
		for k := 0; k < 5; k++ {
			a := x.Start() + rng.Int63n(x.End()-x.Start())
			g := Filter{TID: tid, From: a, To: a + 1 + rng.Int63n(x.End()-a+1)}
			res := x.Window(g)
			c := res.Total.Classes
			// The thread's heap at the window's end: its timeline's.
			end := x.TimelineOf(g, res.Span, 1)
			if n := len(end); n == 0 || c[AIFO].Bytes+c[AOFO].Bytes != end[n-1].EndBytes {
				t.Errorf("tid %d window %d: classes %v, heap at the end %+v", tid, k, c, end)
			}
		}
	}
}
