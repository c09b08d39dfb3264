package ebpf

import (
	"fmt"
	"sort"
	"testing"

	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/internal/testutil"
)

type block struct {
	size uint64
	site string
}

type siteTotal struct {
	allocs, allocBytes, frees, freeBytes uint64
}

// expectAggregate replays a call log: the blocks live at its end, and per
// call site what it allocated and what of it was freed. With frees false,
// the log's free calls are not traced: a block allocated where one is
// still live replaces it (and that one counts as freed).
func expectAggregate(calls []call, frees bool) (map[uint64]block, map[string]siteTotal) {
	live := map[uint64]block{}
	totals := map[string]siteTotal{}
	free := func(addr uint64) {
		if b, ok := live[addr]; ok {
			st := totals[b.site]
			st.frees++
			st.freeBytes += b.size
			totals[b.site] = st
			delete(live, addr)
		}
	}
	alloc := func(addr, size uint64, site string) {
		if addr == 0 {
			return
		}
		free(addr) // only when frees are not traced
		live[addr] = block{size, site}
		st := totals[site]
		st.allocs++
		st.allocBytes += size
		totals[site] = st
	}
	for _, c := range calls {
		switch kindOf(c.fn) {
		case event.KindAlloc:
			alloc(c.addr, c.size, c.site)
		case event.KindFree:
			if frees {
				free(c.addr)
			}
		case event.KindRealloc:
			if c.old != 0 && (c.addr != 0 || c.size == 0) {
				free(c.old)
			}
			alloc(c.addr, c.size, c.site)
		}
	}
	return live, totals
}

// checkSnapshot compares a snapshot of an ebpf_calls process with what
// its log says: the live blocks with their call sites, and the per-site
// totals.
func checkSnapshot(t *testing.T, rec *recorder, sn event.Snapshot, log callLog, r ranges, frees bool) {
	t.Helper()
	wantLive, wantTotals := expectAggregate(log.calls, frees)
	if len(wantLive) == 0 {
		t.Fatal("the workload left nothing live: nothing to test")
	}
	pid := int(sn.PID)
	siteOf := func(id event.StackID) string {
		fr := rec.frames(pid, id)
		if len(fr) == 0 {
			return "(no stack)"
		}
		for name := range log.sites {
			if r.in(name, fr[0]) {
				return name
			}
		}
		return fmt.Sprintf("(unknown %#x)", fr[0])
	}
	gotLive := map[uint64]block{}
	for _, b := range sn.Live {
		if _, dup := gotLive[b.Addr]; dup {
			t.Errorf("pid %d: block %#x live twice", pid, b.Addr)
		}
		gotLive[b.Addr] = block{b.Size, siteOf(b.Stack)}
	}
	if fmt.Sprint(sortedBlocks(gotLive)) != fmt.Sprint(sortedBlocks(wantLive)) {
		t.Errorf("pid %d: live blocks (final %v):\n got %v\nwant %v", pid, sn.Final, sortedBlocks(gotLive), sortedBlocks(wantLive))
	}
	gotTotals := map[string]siteTotal{}
	seen := map[event.StackID]bool{}
	for _, st := range sn.Totals {
		if seen[st.Stack] {
			t.Errorf("pid %d: stack %d has two totals", pid, st.Stack)
		}
		seen[st.Stack] = true
		s := siteOf(st.Stack)
		g := gotTotals[s]
		g.allocs += st.Allocs
		g.allocBytes += st.AllocBytes
		g.frees += st.Frees
		g.freeBytes += st.FreeBytes
		gotTotals[s] = g
	}
	if fmt.Sprint(gotTotals) != fmt.Sprint(wantTotals) {
		t.Errorf("pid %d: totals (final %v):\n got %v\nwant %v", pid, sn.Final, gotTotals, wantTotals)
	}
}

// snapshotsOf returns the snapshots of pid received so far.
func (r *recorder) snapshotsOf(pid int) []event.Snapshot {
	return ofPID(r, &r.snapshots, pid, func(s *event.Snapshot) uint32 { return s.PID })
}

// TestAggregate traces ebpf_calls in aggregate mode: the snapshot taken
// while it is paused holds exactly the blocks its log says are live, each
// with its call site, and per-site totals equal to the log's; the final
// snapshot at Close says the same.
func TestAggregate(t *testing.T) {
	run := runAggregate(t, Config{Mode: event.Aggregate})
	rec, tr, log := run.rec, run.tr, run.log
	for _, sn := range run.snaps {
		checkSnapshot(t, rec, sn, log, run.r, true)
	}
	rec.mu.Lock()
	stats := append([]event.Stats(nil), rec.stats...)
	rec.mu.Unlock()
	last := stats[len(stats)-1]
	if last.Delivered+last.TotalLost() != uint64(len(log.calls)) || last.Unmatched != 0 {
		t.Errorf("stats %+v for %d calls", last, len(log.calls))
	}
	if after := tr.Stats(); after != last {
		t.Errorf("Stats() after Close = %+v, the last sent was %+v", after, last)
	}
}

// aggregateRun is a run of ebpf_calls (20 rounds) in aggregate mode: the
// snapshots of a flush while it is paused and of the tracer's Close, with
// its call log and its sites' addresses to check them by.
type aggregateRun struct {
	rec   *recorder
	tr    *Tracer
	log   callLog
	r     ranges
	snaps []event.Snapshot
}

func runAggregate(t *testing.T, cfg Config) aggregateRun {
	t.Helper()
	bin := testutil.MustBuild(t, "ebpf_calls", testutil.Options{})
	rec := newRecorder(t)
	tr := newTracer(t, cfg, rec)
	w := traced(t, tr, bin, "20")
	log := parseLog(t, w.lines(t, "done"))
	mustFlush(t, tr)
	if err := tr.Close(); err != nil {
		t.Fatal(err)
	}
	snaps := rec.snapshotsOf(w.pid())
	if len(snaps) != 2 || snaps[0].Final || !snaps[1].Final {
		t.Fatalf("%d snapshots, want a flush's and a final one", len(snaps))
	}
	return aggregateRun{rec, tr, log, siteRanges(t, bin, log.sites), snaps}
}

// TestAggregateProcesses traces two processes in aggregate mode, detaches
// the first and attaches a third, which takes the first's place in the
// tables: each snapshot holds its own process's blocks and totals, and
// none of the first's are left for the third.
func TestAggregateProcesses(t *testing.T) {
	bin := testutil.MustBuild(t, "ebpf_calls", testutil.Options{})
	rec := newRecorder(t)
	tr := newTracer(t, Config{Mode: event.Aggregate}, rec)
	a := startWorkload(t, bin, "20")
	b := startWorkload(t, bin, "30")
	attachAll(t, tr, a, b)
	a.release(t)
	b.release(t)
	logA := parseLog(t, a.lines(t, "done"))
	logB := parseLog(t, b.lines(t, "done"))
	if err := tr.Detach(a.pid()); err != nil {
		t.Fatal(err)
	}
	c := startWorkload(t, bin, "10")
	if err := tr.Attach(c.pid()); err != nil {
		t.Fatal(err)
	}
	c.release(t)
	logC := parseLog(t, c.lines(t, "done"))
	mustFlush(t, tr)
	for _, x := range []struct {
		w     *workload
		log   callLog
		snaps int
	}{{a, logA, 1}, {b, logB, 1}, {c, logC, 1}} {
		snaps := rec.snapshotsOf(x.w.pid())
		if len(snaps) != x.snaps {
			t.Fatalf("pid %d: %d snapshots, want %d", x.w.pid(), len(snaps), x.snaps)
		}
		checkSnapshot(t, rec, snaps[0], x.log, siteRanges(t, bin, x.log.sites), true)
	}
	if st := tr.Stats(); st.Unmatched != 0 || st.TotalLost() != 0 {
		t.Errorf("stats %+v", st)
	}
}

// TestAggregateNoFrees traces ebpf_calls without its frees: a block
// allocated where one is still live (it was freed, untraced) replaces it.
func TestAggregateNoFrees(t *testing.T) {
	bin := testutil.MustBuild(t, "ebpf_calls", testutil.Options{})
	rec := newRecorder(t)
	tr := newTracer(t, Config{Mode: event.Aggregate, Families: event.FamilyHeap &^ event.FamilyFree}, rec)
	w := traced(t, tr, bin, "20")
	log := parseLog(t, w.lines(t, "done"))
	mustFlush(t, tr)
	snaps := rec.snapshotsOf(w.pid())
	if len(snaps) != 1 {
		t.Fatalf("%d snapshots", len(snaps))
	}
	checkSnapshot(t, rec, snaps[0], log, siteRanges(t, bin, log.sites), false)
}

// TestAggregateThreads runs ebpf_churn's threads, which allocate from one
// call site at once (and may add its totals twice at first): the totals
// count every call, and nothing is left live.
func TestAggregateThreads(t *testing.T) {
	bin := testutil.MustBuild(t, "ebpf_churn", testutil.Options{})
	rec := newRecorder(t)
	tr := newTracer(t, Config{Mode: event.Aggregate}, rec)
	const pairs, threads = 20000, 4
	w := startWorkloadNoReady(t, bin, fmt.Sprint(pairs), fmt.Sprint(threads), "wait")
	if err := tr.Attach(w.pid()); err != nil {
		t.Fatal(err)
	}
	w.release(t)
	w.expect(t, "cpu_ns_per_pair")
	mustFlush(t, tr)
	snaps := rec.snapshotsOf(w.pid())
	if len(snaps) != 1 {
		t.Fatalf("%d snapshots", len(snaps))
	}
	// The loop's call site is one stack in every thread; the C library
	// and the threads' start allocate a few blocks besides.
	var loop event.StackTotal
	stacks := map[event.StackID]bool{}
	for _, st := range snaps[0].Totals {
		if stacks[st.Stack] {
			t.Errorf("stack %d has two totals", st.Stack)
		}
		stacks[st.Stack] = true
		if st.Stack == 0 {
			t.Errorf("totals without a stack: %+v", st)
		}
		if st.Allocs > loop.Allocs {
			loop = st
		}
	}
	if loop.Allocs != pairs*threads || loop.Frees != pairs*threads {
		t.Errorf("the loop's stack: %+v, want %d allocations and frees", loop, pairs*threads)
	}
	if st := tr.Stats(); st.TotalLost() != 0 || st.Delivered < 2*pairs*threads {
		t.Errorf("stats %+v for %d pairs", st, pairs*threads)
	}
}

func sortedBlocks(m map[uint64]block) []string {
	var out []string
	for a, b := range m {
		out = append(out, fmt.Sprintf("%#x:%d@%s", a, b.size, b.site))
	}
	sort.Strings(out)
	return out
}

// TestAggregateMapFull gives aggregate mode room for 8 live blocks: the
// blocks beyond, and the frees of the process from then on that
// the table does not find, come through the ring, and this process keeps
// them. Nothing is lost, every call is delivered, and the snapshot holds
// exactly the blocks the log says are live, with their sites' totals. (The
// blocks beyond were lost before, counted as map_full.)
func TestAggregateMapFull(t *testing.T) {
	run := runAggregate(t, Config{Mode: event.Aggregate, MaxLive: 8})
	for _, sn := range run.snaps {
		checkSnapshot(t, run.rec, sn, run.log, run.r, true)
	}
	st := run.tr.Stats()
	if st.TotalLost() != 0 || st.Delivered != uint64(len(run.log.calls)) || st.Unmatched != 0 {
		t.Errorf("stats %+v for %d calls, want all delivered, none lost or unmatched", st, len(run.log.calls))
	}
}
