package ebpf

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/internal/testutil"
)

var cfiBuild = testutil.Options{NoFramePointers: true, Flags: []string{"-fno-optimize-sibling-calls"}}

// cfiChains runs ebpf_cfi, built without frame pointers, attached while it
// waits, and returns, for each allocation size the workload makes (101 in
// leak_a, 202 in leak_b, 404 in churn), the call chains its stacks gave
// (function names, innermost first, to main) with their counts, and the
// blocks of each size left live.
func cfiChains(t *testing.T, cfg Config, k int) (map[uint64]map[string]int, map[uint64]int, *Tracer) {
	bin := testutil.MustBuild(t, "ebpf_cfi", cfiBuild)
	rec := newRecorder(t)
	tr := newTracer(t, cfg, rec)
	w := startWorkload(t, bin, strconv.Itoa(k))
	if err := tr.Attach(w.pid()); err != nil {
		t.Fatal(err)
	}
	w.release(t)
	log := parseLog(t, w.lines(t, "done"))
	mustFlush(t, tr)
	r := siteRanges(t, bin, log.sites)
	name := func(ret uint64) string {
		for n := range r {
			if r.in(n, ret) {
				return n
			}
		}
		return "?"
	}
	chains := map[uint64]map[string]int{}
	live := map[uint64]uint64{}
	for _, e := range rec.eventsOf(w.pid()) {
		switch e.Kind {
		case event.KindAlloc:
			if e.Size != 101 && e.Size != 202 && e.Size != 404 {
				continue
			}
			live[e.Addr] = e.Size
			var names []string
			for _, f := range rec.frames(w.pid(), e.Stack) {
				n := name(f)
				names = append(names, n)
				if n == "main" || len(names) == 6 {
					break
				}
			}
			c := chains[e.Size]
			if c == nil {
				c = map[string]int{}
				chains[e.Size] = c
			}
			c[strings.Join(names, " ")]++
		case event.KindFree:
			delete(live, e.Addr)
		}
	}
	leaks := map[uint64]int{}
	for _, size := range live {
		leaks[size]++
	}
	return chains, leaks, tr
}

// TestUnwindTables traces code built without frame pointers: with unwind
// tables, every stack is the whole call chain to main (leak_a's through
// mid_a and top_a, leak_b's through mid_b or mid_b2 by turns) and the leaks
// are exact per function; the frame-pointer walk, on the same binary, does
// not find them (which shows the workload tests the tables).
func TestUnwindTables(t *testing.T) {
	const k = 200
	chains, leaks, tr := cfiChains(t, Config{UnwindTables: true}, k)
	want := map[uint64]map[string]int{
		101: {"leak_a mid_a top_a main": k},
		202: {"leak_b mid_b top_b main": k / 2, "leak_b mid_b2 top_b main": k / 2},
		404: {"churn main": k},
	}
	if fmt.Sprint(chains) != fmt.Sprint(want) {
		t.Errorf("call chains by size:\n got %v\nwant %v", chains, want)
	}
	if fmt.Sprint(leaks) != fmt.Sprint(map[uint64]int{101: k, 202: k}) {
		t.Errorf("leaks by size %v, want %d of 101 and of 202", leaks, k)
	}
	for _, tb := range tr.UnwindTables() {
		t.Logf("%s: %d entries, %d bytes, built in %v, %.1f%% fallback, err %v", tb.Path, tb.Entries, tb.Bytes, tb.BuildTime, tb.Fallback, tb.Err)
	}
	cut, fallback := tr.UnwindCounters()
	t.Logf("%d stacks cut, %d frames by frame pointer", cut, fallback)
	for _, err := range tr.Warnings() {
		t.Errorf("warning: %v", err)
	}

	fp, _, _ := cfiChains(t, Config{}, 20)
	if n := fp[101]["leak_a mid_a top_a main"]; n == 20 {
		t.Errorf("the frame-pointer walk found leak_a's whole chain in code without frame pointers: the workload tests nothing")
	}
}
