package ebpf

import (
	"errors"
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/internal/errs"
	"github.com/heapscope/heapscope/internal/testutil"
)

// TestSampleConfig: a sampling size that is negative, too big, or with
// mmap tracing is refused, in either mode; aggregate mode samples.
func TestSampleConfig(t *testing.T) {
	for _, c := range []Config{
		{Sample: -1},
		{Sample: maxSample + 1},
		{Sample: -1, Mode: event.Aggregate},
		{Sample: maxSample + 1, Mode: event.Aggregate},
		{Sample: 4096, Families: event.FamilyAll},
		{Sample: 4096, Families: event.FamilyAll, Mode: event.Aggregate},
	} {
		if _, err := c.withDefaults(); !errors.Is(err, errs.ErrInvalidFlags) {
			t.Errorf("%+v: %v; want ErrInvalidFlags", c, err)
		}
	}
	for _, c := range []Config{{Sample: 4096}, {Sample: 4096, Mode: event.Aggregate}} {
		if _, err := c.withDefaults(); err != nil {
			t.Error(err)
		}
	}
}

// TestSampleStream traces ebpf_churn (2 threads × 100000 pairs of
// malloc(16..527) and free, the same sizes every run) exactly, then sampled
// in BPF every 4 KiB. From the sizes it allocates, the sampled run should
// record Σ 1 - exp(-S/R) allocations (about 6% of them); it must be within
// 5 standard deviations of that (and a few of the program's start-up). Every free it records is of a block whose
// allocation it recorded (an unsampled block's free is dropped in BPF), no
// sampled block's free is missing, nothing is lost, and the ring carried
// fewer events by about the sampling factor.
func TestSampleStream(t *testing.T) {
	t.Cleanup(testutil.Cleanup)
	bin := testutil.MustBuild(t, "ebpf_churn", testutil.Options{})
	const pairs, rate = 100000, 4096
	run := func(sample int64) ([]event.Event, event.Stats) {
		rec := newRecorder(t)
		tr := newTracer(t, Config{Sample: sample}, rec)
		w := startWorkloadNoReady(t, bin, strconv.Itoa(pairs), "2", "wait")
		if err := tr.Attach(w.pid()); err != nil {
			t.Fatal(err)
		}
		w.release(t)
		w.wait(t)
		mustFlush(t, tr)
		return rec.eventsOf(w.pid()), tr.Stats()
	}
	exact, exactStats := run(0)
	sampled, sampledStats := run(rate)

	ch := churnSampled(pairs, 2, rate)
	want, variance := ch.samples, ch.samplesVar
	allocs := 0
	for _, e := range exact {
		if e.Kind == event.KindAlloc {
			allocs++
		}
	}
	// What the exact run put in the ring, delivered or lost (a busy
	// machine's consumer may fall behind).
	exactEvents := exactStats.Delivered + exactStats.TotalLost()
	if exactEvents < 4*pairs {
		t.Fatalf("the exact run had %d events; want at least %d", exactEvents, 4*pairs)
	}

	live := map[uint64]bool{}
	var got, frees, unmatched int
	for _, e := range sampled {
		switch e.Kind {
		case event.KindAlloc:
			got++
			live[e.Addr] = true
		case event.KindRealloc:
			got++
			if e.OldAddr != 0 {
				if !live[e.OldAddr] {
					unmatched++
				}
				delete(live, e.OldAddr)
			}
			live[e.Addr] = true
		case event.KindFree:
			frees++
			if !live[e.Addr] {
				unmatched++
			}
			delete(live, e.Addr)
		}
	}
	sd := math.Sqrt(variance)
	t.Logf("exact: %d events (%d allocations delivered, %d events lost); sampled every %d bytes: %d allocations (expected %.0f ± %.0f), %d frees, %d events: %.1f× fewer (expected %.1f×)",
		exactEvents, allocs, exactStats.TotalLost(), rate, got, want, sd, frees, sampledStats.Delivered,
		float64(exactEvents)/float64(sampledStats.Delivered), 2*pairs/want)
	if math.Abs(float64(got)-want) > 5*sd+8 {
		t.Errorf("%d allocations sampled; want %.0f ± %.0f (5 sd, and 8 for the start-up's)", got, want, 5*sd+8)
	}
	if unmatched != 0 {
		t.Errorf("%d frees or reallocs of blocks whose allocation was not recorded; want 0", unmatched)
	}
	// The loop frees every block it allocates: only the few blocks of the
	// program's start-up and exit may stay live.
	if len(live) > 8 {
		t.Errorf("%d sampled blocks never freed: their frees were lost", len(live))
	}
	if n := sampledStats.TotalLost(); n != 0 {
		t.Errorf("%d events lost", n)
	}
	// The ring carries only what was sampled: an allocation and its free
	// each, so the traffic falls by the sampling factor.
	wantDelivered := 2 * want
	if d := float64(sampledStats.Delivered); d > wantDelivered*1.1+50 || d < wantDelivered*0.9 {
		t.Errorf("%d events delivered sampled; want about %.0f", sampledStats.Delivered, wantDelivered)
	}
}

// TestSampleEveryCall samples at one byte, where an allocation of S bytes
// is sampled with probability 1 - e^-S: surely for the workloads' sizes (0,
// never; at least 24: all but 4e-11). ebpf_calls (the C family, realloc
// of a sampled block and of one not sampled, realloc(p, 0), failed
// allocations) and ebpf_cxx (operator new and delete, reported once under
// the operator's name) are then recorded call for call as sampledCalls
// says, through the sampled paths: nothing of an allocation of 0 bytes or
// one that failed, nor of its free; the realloc of such a block as a new
// draw, with no old block.
func TestSampleEveryCall(t *testing.T) {
	for _, c := range []struct {
		name   string
		opt    testutil.Options
		leaves bool // blocks live at its exit
	}{{"ebpf_calls", testutil.Options{}, true}, {"ebpf_cxx", testutil.Options{CXX: true}, false}} {
		t.Run(c.name, func(t *testing.T) {
			bin := testutil.MustBuild(t, c.name, c.opt)
			rec := newRecorder(t)
			tr := newTracer(t, Config{Stacks: allStacks, Sample: 1}, rec)
			w := traced(t, tr, bin, "5")
			log := parseLog(t, w.lines(t, "done"))
			mustFlush(t, tr)
			want := sampledCalls(log)
			if len(want.calls) < len(log.calls)/2 {
				t.Fatalf("only %d of %d calls are sampled surely: not a test of the sampled paths", len(want.calls), len(log.calls))
			}
			checkCalls(t, rec, w.pid(), want, siteRanges(t, bin, log.sites), aliases(t, libcPath(t, w.pid())), event.HeapLibc, allStacks)

			if !c.leaves {
				return
			}
			// The blocks still live when it exits (ebpf_calls leaves some
			// live on purpose) leave the map of sampled blocks with it.
			live := map[uint64]bool{}
			for _, e := range rec.eventsOf(w.pid()) {
				switch e.Kind {
				case event.KindAlloc:
					live[e.Addr] = true
				case event.KindRealloc:
					delete(live, e.OldAddr)
					live[e.Addr] = true
				case event.KindFree:
					delete(live, e.Addr)
				}
			}
			delete(live, 0)
			if len(live) == 0 {
				t.Fatal("no block live at the end: nothing to check")
			}
			pid := w.pid()
			w.release(t) // it waits for a line after "done"
			w.wait(t)
			for i := 0; ; i++ {
				rec.mu.Lock()
				n := len(rec.exits)
				rec.mu.Unlock()
				if n > 0 {
					break
				}
				if i == 1000 {
					t.Fatal("no Exit after the workload ended")
				}
				time.Sleep(10 * time.Millisecond)
			}
			var k smpKey
			var v uint8
			left := 0
			for it := tr.coll.Maps["sampled"].Iterate(); it.Next(&k, &v); {
				if k.Pid == uint32(pid) {
					left++
				}
			}
			if left != 0 {
				t.Errorf("%d of its blocks left in the sampled map (%d were live at its exit)", left, len(live))
			}
		})
	}
}

// sampledCalls is what sampling at one byte records of log's calls.
func sampledCalls(log callLog) callLog {
	const minSure = 16 // sampled but for a 1e-7 chance
	out := callLog{sites: log.sites}
	kept := map[uint64]bool{} // live blocks whose allocation was recorded
	for _, c := range log.calls {
		switch kindOf(c.fn) {
		case event.KindFree:
			if !kept[c.addr] {
				continue
			}
			delete(kept, c.addr)
		case event.KindRealloc:
			if c.old != 0 && kept[c.old] {
				delete(kept, c.old)
				if c.addr != 0 {
					kept[c.addr] = true
				} else if c.size != 0 {
					kept[c.old] = true // failed: the old block stays
				} else {
					// realloc(p, 0): a draw of 0 bytes, never sampled;
					// the old block leaves the sample as a free
					c = call{site: c.site, fn: "free", addr: c.old}
				}
				break
			}
			if c.addr == 0 || c.size < minSure {
				continue
			}
			c.old = 0
			kept[c.addr] = true
		default:
			if c.addr == 0 || c.size < minSure {
				continue
			}
			kept[c.addr] = true
		}
		out.calls = append(out.calls, c)
	}
	return out
}

// churnExpect is what sampling at a rate makes of ebpf_churn's loop: how
// many allocations it samples, and the bytes they stand for, with the
// variance of each.
type churnExpect struct {
	allocs, bytes           float64 // the truth
	samples, samplesVar     float64
	estBytesVar, estObjsVar float64 // of the estimates Σ S/p and Σ 1/p
}

// churnSampled computes churnExpect from the sizes ebpf_churn allocates:
// each thread's xorshift from its index, as in its loop.
func churnSampled(pairs, threads int, rate float64) churnExpect {
	var c churnExpect
	for id := uint64(0); id < uint64(threads); id++ {
		x := 0x9E3779B97F4A7C15 * (id + 1)
		for i := 0; i < pairs; i++ {
			x ^= x << 13
			x ^= x >> 7
			x ^= x << 17
			size := float64(16 + x%512)
			p := -math.Expm1(-size / rate)
			c.allocs++
			c.bytes += size
			c.samples += p
			c.samplesVar += p * (1 - p)
			// A sum of w·Bernoulli(p) with w = S/p or 1/p: w²p(1-p) each.
			c.estBytesVar += size * size * (1 - p) / p
			c.estObjsVar += (1 - p) / p
		}
	}
	return c
}

// TestSampleAggregateEveryCall is TestSampleEveryCall in aggregate mode:
// at one byte, each block of ebpf_calls that is sampled surely weighs its
// own size and one object (S/p and 1/p round to them), so the snapshot must
// hold exactly the aggregate of the calls sampledCalls keeps: the live
// blocks with their sites, and per-site totals. The free of a block never
// sampled (malloc(0)'s, failed allocations) is dropped after one lookup:
// nothing is unmatched.
func TestSampleAggregateEveryCall(t *testing.T) {
	run := runAggregate(t, Config{Mode: event.Aggregate, Sample: 1})
	log := run.log
	want := sampledCalls(log)
	if len(want.calls) == len(log.calls) {
		t.Fatal("every call is sampled surely: no unsampled block to free")
	}
	for _, sn := range run.snaps {
		checkSnapshot(t, run.rec, sn, want, run.r, true)
	}
	st := run.tr.Stats()
	if st.Unmatched != 0 || st.TotalLost() != 0 || st.Delivered != uint64(len(want.calls)) {
		t.Errorf("stats %+v; want %d calls delivered of %d, none lost or unmatched", st, len(want.calls), len(log.calls))
	}
}

// TestSampleAggregate traces ebpf_churn (2 threads × 100000 pairs of
// malloc(16..527) and free) in aggregate mode sampled every 4 KiB. Its
// loop's stacks must estimate what it allocated, in bytes and objects,
// within 5 standard deviations of the estimator (about 4%); every block it
// allocates is freed, so its frees must take away exactly what its
// allocations added (the weights remembered with each block), leaving no
// live estimate; the free of a block not sampled (94% of them) must touch
// nothing (none unmatched), and the tables see only the sampled calls.
func TestSampleAggregate(t *testing.T) {
	t.Cleanup(testutil.Cleanup)
	bin := testutil.MustBuild(t, "ebpf_churn", testutil.Options{})
	const pairs, rate = 100000, 4096
	rec := newRecorder(t)
	tr := newTracer(t, Config{Mode: event.Aggregate, Sample: rate}, rec)
	w := startWorkloadNoReady(t, bin, strconv.Itoa(pairs), "2", "wait")
	if err := tr.Attach(w.pid()); err != nil {
		t.Fatal(err)
	}
	w.release(t)
	w.wait(t)
	if err := tr.Close(); err != nil {
		t.Fatal(err)
	}
	snaps := rec.snapshotsOf(w.pid())
	if len(snaps) == 0 {
		t.Fatal("no snapshot")
	}
	sn := snaps[len(snaps)-1]
	// The loop's stacks are the ones with most allocations; the
	// program's start-up and exit allocate a few blocks elsewhere.
	var allocs, bytes, frees, freeBytes uint64
	for _, st := range sn.Totals {
		if st.Allocs < 1000 {
			continue
		}
		allocs += st.Allocs
		bytes += st.AllocBytes
		frees += st.Frees
		freeBytes += st.FreeBytes
	}
	ch := churnSampled(pairs, 2, rate)
	t.Logf("estimated %d allocations of %.0f, %d bytes of %.0f (± %.0f, 1 sd); freed %d, %d bytes",
		allocs, ch.allocs, bytes, ch.bytes, math.Sqrt(ch.estBytesVar), frees, freeBytes)
	if d := math.Abs(float64(bytes) - ch.bytes); d > 5*math.Sqrt(ch.estBytesVar) {
		t.Errorf("estimated %d bytes allocated; want %.0f ± %.0f (5 sd)", bytes, ch.bytes, 5*math.Sqrt(ch.estBytesVar))
	}
	if d := math.Abs(float64(allocs) - ch.allocs); d > 5*math.Sqrt(ch.estObjsVar) {
		t.Errorf("estimated %d allocations; want %.0f ± %.0f (5 sd)", allocs, ch.allocs, 5*math.Sqrt(ch.estObjsVar))
	}
	if frees != allocs || freeBytes != bytes {
		t.Errorf("the loop freed every block: estimated frees %d, %d bytes; want its allocations, %d, %d bytes", frees, freeBytes, allocs, bytes)
	}
	if len(sn.Live) > 8 {
		t.Errorf("%d sampled blocks live at the end: their frees were lost", len(sn.Live))
	}
	st := tr.Stats()
	if st.Unmatched != 0 || st.TotalLost() != 0 {
		t.Errorf("stats %+v: a free of a block not sampled reached the tables, or calls were lost", st)
	}
	if d := float64(st.Delivered); d > 2*ch.samples*1.1+50 || d < 2*ch.samples*0.9 {
		t.Errorf("%d calls accounted in the tables; want about %.0f (the sampled allocations and their frees)", st.Delivered, 2*ch.samples)
	}
}
