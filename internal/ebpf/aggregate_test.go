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
// call site what it allocated and what of it was freed.
func expectAggregate(calls []call) (map[uint64]block, map[string]siteTotal) {
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
			free(c.addr)
		case event.KindRealloc:
			if c.old != 0 && (c.addr != 0 || c.size == 0) {
				free(c.old)
			}
			alloc(c.addr, c.size, c.site)
		}
	}
	return live, totals
}

// TestAggregate traces ebpf_calls in aggregate mode: the snapshot taken
// while it is paused holds exactly the blocks its log says are live, each
// with its call site, and per-site totals equal to the log's; the final
// snapshot at Close says the same.
func TestAggregate(t *testing.T) {
	bin := testutil.MustBuild(t, "ebpf_calls", testutil.Options{})
	rec := newRecorder(t)
	tr := newTracer(t, Config{Mode: Aggregate}, rec)
	w := startWorkload(t, bin, "20")
	if err := tr.Attach(w.pid()); err != nil {
		t.Fatal(err)
	}
	w.release(t)
	log := parseLog(t, w.lines(t, "done"))
	if err := tr.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := tr.Close(); err != nil {
		t.Fatal(err)
	}
	r := siteRanges(t, bin, log.sites)
	wantLive, wantTotals := expectAggregate(log.calls)
	if len(wantLive) == 0 {
		t.Fatal("the workload left nothing live: nothing to test")
	}

	rec.mu.Lock()
	snaps := append([]event.Snapshot(nil), rec.snapshots...)
	stats := append([]event.Stats(nil), rec.stats...)
	rec.mu.Unlock()
	if len(snaps) != 2 || snaps[0].Final || !snaps[1].Final {
		t.Fatalf("%d snapshots, want a flush's and a final one", len(snaps))
	}
	siteOf := func(id event.StackID) string {
		fr := rec.frames(w.pid(), id)
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
	for _, sn := range snaps {
		gotLive := map[uint64]block{}
		for _, b := range sn.Live {
			gotLive[b.Addr] = block{b.Size, siteOf(b.Stack)}
		}
		if fmt.Sprint(sortedBlocks(gotLive)) != fmt.Sprint(sortedBlocks(wantLive)) {
			t.Errorf("live blocks (final %v):\n got %v\nwant %v", sn.Final, sortedBlocks(gotLive), sortedBlocks(wantLive))
		}
		gotTotals := map[string]siteTotal{}
		for _, st := range sn.Totals {
			s := siteOf(st.Stack)
			g := gotTotals[s]
			g.allocs += st.Allocs
			g.allocBytes += st.AllocBytes
			g.frees += st.Frees
			g.freeBytes += st.FreeBytes
			gotTotals[s] = g
		}
		if fmt.Sprint(gotTotals) != fmt.Sprint(wantTotals) {
			t.Errorf("totals (final %v):\n got %v\nwant %v", sn.Final, gotTotals, wantTotals)
		}
	}
	last := stats[len(stats)-1]
	if last.Delivered+last.TotalLost() != uint64(len(log.calls)) || last.Unmatched != 0 {
		t.Errorf("stats %+v for %d calls", last, len(log.calls))
	}
	if after := tr.Stats(); after != last {
		t.Errorf("Stats() after Close = %+v, the last sent was %+v", after, last)
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
// allocations beyond are lost, counted, and delivered + lost is still
// the calls made.
func TestAggregateMapFull(t *testing.T) {
	bin := testutil.MustBuild(t, "ebpf_calls", testutil.Options{})
	rec := newRecorder(t)
	tr := newTracer(t, Config{Mode: Aggregate, MaxLive: 8}, rec)
	w := startWorkload(t, bin, "20")
	if err := tr.Attach(w.pid()); err != nil {
		t.Fatal(err)
	}
	w.release(t)
	log := parseLog(t, w.lines(t, "done"))
	st := tr.Stats()
	if st.Lost[event.LostMapFull] == 0 || st.Delivered+st.TotalLost() != uint64(len(log.calls)) {
		t.Errorf("stats %+v for %d calls, want map-full losses adding up", st, len(log.calls))
	}
}
