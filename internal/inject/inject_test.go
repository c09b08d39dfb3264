package inject

import (
	"strings"
	"testing"
	"time"

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

// checkSequence checks, for each thread of the loop, that the sizes of the
// mallocs delivered follow the loop's sequence: no allocation between two
// delivered ones was missed. It returns the mallocs seen.
func checkSequence(t *testing.T, evs []event.Event, pid, threads int) int {
	t.Helper()
	type run struct {
		last  uint64
		n     int
		tid   uint32
		fresh bool
	}
	runs := make([]run, threads)
	total := 0
	for _, e := range evs {
		if int(e.PID) != pid || e.Kind != event.KindAlloc || e.Size < 16 {
			continue
		}
		th := int((e.Size - 16) / 4096)
		r := (e.Size - 16) % 4096
		if th >= threads || r >= 4093 {
			continue
		}
		ru := &runs[th]
		if ru.n > 0 {
			if e.TID != ru.tid {
				t.Errorf("thread %d's loop on two threads (%d, %d)", th, ru.tid, e.TID)
			}
			if want := (ru.last + 7) % 4093; r != want {
				t.Errorf("thread %d: after size residue %d came %d, not %d: allocations were missed", th, ru.last, r, want)
				return total
			}
		}
		ru.last, ru.tid = r, e.TID
		ru.n++
		total++
	}
	return total
}

// TestInjectAgainAndAgain: 8 threads allocate all the time; the process is
// attached, traced a moment and detached 20 times, each time by a
// collector of its own (a session), in block mode: nothing may be lost or
// missed while traced, and the process goes on working.
func TestInjectAgainAndAgain(t *testing.T) {
	const threads, cycles = 8, 20
	debugf = t.Logf
	defer func() { debugf = func(string, ...any) {} }()
	tg := startWorkload(t, threads, testutil.Options{})
	tg.say("run")
	var strict, released, kept int
	for i := 0; i < cycles; i++ {
		s := newSink()
		c, err := preload.New(preload.Config{Unwind: event.UnwindFP, OnFull: event.Block}, s)
		if err != nil {
			t.Fatal(err)
		}
		res, err := Inject(tg.pid, Options{Serve: c.Serve})
		if err != nil {
			c.Close()
			t.Fatalf("cycle %d: Inject: %v", i, err)
		}
		time.Sleep(30 * time.Millisecond)
		er, err := Eject(tg.pid, Options{})
		if err != nil {
			c.Close()
			t.Fatalf("cycle %d: Eject: %v", i, err)
		}
		if err := c.Close(); err != nil {
			t.Fatalf("cycle %d: Close: %v", i, err)
		}
		if res.Strict {
			strict++
		}
		if res.Released || er.Released {
			released++
		}
		if er.RingsKept {
			kept++
		}
		if er.Entries != res.Entries {
			t.Errorf("cycle %d: %d entries redirected, %d put back", i, res.Entries, er.Entries)
		}
		n := checkSequence(t, s.events, tg.pid, threads)
		if lost := s.stats.TotalLost(); lost != 0 {
			t.Errorf("cycle %d: %d events lost in block mode", i, lost)
		}
		if s.stats.Delivered != uint64(len(s.events)) {
			t.Errorf("cycle %d: %d delivered, %d received", i, s.stats.Delivered, len(s.events))
		}
		t.Logf("cycle %d: %d mallocs of the loop, %d events; inject %v (tries %d, strict %v, paused %v), eject %v (tries %d, paused %v, rings kept %v)",
			i, n, len(s.events), res.Took.Round(time.Millisecond), res.Tries, res.Strict, res.Paused.Round(time.Microsecond),
			er.Took.Round(time.Millisecond), er.Tries, er.Paused.Round(time.Microsecond), er.RingsKept)
		if n == 0 {
			t.Errorf("cycle %d: no allocation of the loop seen", i)
		}
	}
	if l := tg.say("pause"); !strings.HasPrefix(l, "paused") {
		t.Fatalf("after the cycles: %q", l)
	}
	t.Logf("%d of %d injections at a strict safe point, %d let the other threads go, %d ejects kept their rings", strict, cycles, released, kept)
}
