package ebpf

import (
	"testing"

	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/internal/testutil"
)

// TestCXX checks C++ operator new and delete, all variants: each call is
// one event, named after the operator (not also as the malloc or free it
// makes), with its size and a stack that starts at its call site.
// delete of NULL is not an event.
func TestCXX(t *testing.T) {
	bin := testutil.MustBuild(t, "ebpf_cxx", testutil.Options{CXX: true})
	rec := newRecorder(t)
	tr := newTracer(t, Config{Stacks: allStacks}, rec)
	w := traced(t, tr, bin, "20")
	log := parseLog(t, w.lines(t, "done"))
	mustFlush(t, tr)
	checkCalls(t, rec, w.pid(), log, siteRanges(t, bin, log.sites), nil, event.HeapLibc, allStacks)
}

// TestCXXWithoutMallocFamily traces only the C++ family: new and delete
// are still seen (through the malloc and free they call), plain malloc
// and free are not.
func TestCXXWithoutMallocFamily(t *testing.T) {
	bin := testutil.MustBuild(t, "ebpf_cxx", testutil.Options{CXX: true})
	rec := newRecorder(t)
	tr := newTracer(t, Config{Families: event.FamilyCXX, Stacks: allStacks}, rec)
	w := traced(t, tr, bin, "5")
	log := parseLog(t, w.lines(t, "done"))
	mustFlush(t, tr)
	var cxx callLog
	cxx.sites = log.sites
	for _, c := range log.calls {
		if c.fn != "malloc" && c.fn != "free" {
			cxx.calls = append(cxx.calls, c)
		}
	}
	checkCalls(t, rec, w.pid(), cxx, siteRanges(t, bin, log.sites), nil, event.HeapLibc, allStacks)
}
