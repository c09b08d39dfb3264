package ebpf

import (
	"fmt"
	"testing"

	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/internal/testutil"
)

// TestMmap traces ebpf_mmap with the mmap family: its anonymous mmaps,
// mremaps and munmaps are events, in order and exactly; its file mapping
// is not (it is not anonymous), while unmapping it is (munmap cannot tell).
// Nothing is seen of an untraced process doing the same.
func TestMmap(t *testing.T) {
	bin := testutil.MustBuild(t, "ebpf_mmap", testutil.Options{})
	rec := newRecorder(t)
	tr := newTracer(t, Config{Families: event.FamilyMmap, Stacks: event.NoStacks}, rec)
	w := startWorkload(t, bin, "5")
	other := startWorkload(t, bin, "5")
	if err := tr.Attach(w.pid()); err != nil {
		t.Fatal(err)
	}
	w.release(t)
	other.release(t)
	log := parseLog(t, w.lines(t, "done"))
	other.lines(t, "done")
	mustFlush(t, tr)
	evs := rec.eventsOf(w.pid())
	if len(evs) != len(log.calls) {
		t.Errorf("%d events, %d calls", len(evs), len(log.calls))
	}
	for i := 0; i < len(evs) && i < len(log.calls); i++ {
		e, c := evs[i], log.calls[i]
		want := fmt.Sprintf("%v %s %#x %d %#x %d", kindOf(c.fn), c.fn, c.addr, c.size, c.old, c.oldSize)
		got := fmt.Sprintf("%v %v %#x %d %#x %d", e.Kind, e.Func, e.Addr, e.Size, e.OldAddr, e.OldSize)
		if got != want || e.Heap != event.HeapMmap {
			t.Errorf("call %d: got %s heap %v, want %s", i, got, e.Heap, want)
		}
	}
	if n := len(rec.eventsOf(other.pid())); n != 0 {
		t.Errorf("%d events of an untraced process", n)
	}
}
