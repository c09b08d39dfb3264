package inject

import (
	"testing"

	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/internal/preload"
	"github.com/heapscope/heapscope/internal/testutil"
)

// countLoop counts the events of thread t's loop (sizes 16+t*4096 ..).
func countLoop(evs []event.Event, pid int, t int) (mallocs, frees int) {
	lo, hi := uint64(16+t*4096), uint64(16+t*4096+4093)
	addrs := map[uint64]bool{}
	for _, e := range evs {
		if int(e.PID) != pid {
			continue
		}
		switch e.Kind {
		case event.KindAlloc:
			if e.Size >= lo && e.Size < hi {
				mallocs++
				addrs[e.Addr] = true
			}
		case event.KindFree:
			if addrs[e.Addr] {
				frees++
				delete(addrs, e.Addr)
			}
		}
	}
	return mallocs, frees
}

// TestInjectBurst injects into an idle process, counts a burst exactly,
// ejects, and sees nothing of the next burst.
func TestInjectBurst(t *testing.T) {
	tg := startWorkload(t, 2, testutil.Options{})
	s := newSink()
	c := collector(t, s, preload.Config{Unwind: event.UnwindFP})
	res := mustInject(t, tg.pid, c, Options{})
	t.Logf("injected: %+v", res)
	if res.Entries == 0 {
		t.Errorf("no GOT entry redirected")
	}
	tg.say("burst 1000")
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	for th := 0; th < 2; th++ {
		if m, f := countLoop(s.snapshot(), tg.pid, th); m != 1000 || f != 1000 {
			t.Errorf("thread %d: %d mallocs and %d frees, want 1000 of each", th, m, f)
		}
	}
	er := mustEject(t, tg.pid, Options{})
	t.Logf("ejected: %+v", er)
	if er.Entries != res.Entries {
		t.Errorf("%d entries put back, %d redirected", er.Entries, res.Entries)
	}
	before := len(s.snapshot())
	tg.say("burst 1000")
	c.Flush()
	if n := len(s.snapshot()); n != before {
		t.Errorf("%d events after the eject", n-before)
	}
}
