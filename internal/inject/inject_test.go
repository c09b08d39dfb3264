package inject

import (
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/internal/preload"
	"github.com/heapscope/heapscope/internal/proc"
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
		last uint64
		n    int
		tid  uint32
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

// TestKilledMidInjection kills the injecting process (SIGKILL) at every
// point of an injection, its calls in the target included, into a program
// whose threads allocate all the time: the program runs on, no thread
// stays traced, no GOT entry stays redirected, and a later injection works.
func TestKilledMidInjection(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	kill := func(tg *workload, point string) {
		t.Helper()
		cmd := exec.Command(self, "-test.run=^$")
		cmd.Env = append(os.Environ(), helperEnv+"="+fmt.Sprintf("kill %d %s", tg.pid, point))
		out, _ := cmd.CombinedOutput()
		said := strings.TrimSpace(string(out))
		untracedNow(t, tg.pid, point)
		if l := tg.say("pause"); !strings.HasPrefix(l, "paused") {
			t.Fatalf("killed at %s (%s): target: %q", point, said, l)
		}
		tg.say("run")
		t.Logf("killed at %s: %s", point, said)
	}
	// The library not loaded yet: the first call is dlopen. A process of
	// its own for each point, since the dlopen goes on to its end.
	for _, point := range []string{"stopped", "cave", "call1.1", "call1.2", "call1.3", "call1.5", "call1.8", "call1.13", "call2.2", "call3.3", "call3.8"} {
		tg := startWorkload(t, 4, testutil.Options{})
		tg.say("run")
		kill(tg, point)
	}
	// Loaded: open (call 1) and start (call 2), in one process.
	tg := startWorkload(t, 4, testutil.Options{})
	tg.say("run")
	kill(tg, "call1.2") // its dlopen finishes on its own
	for _, point := range []string{"cave", "call1.1", "call1.2", "call2.1", "call2.2", "call2.3", "call2.5", "call2.8", "call2.13", "call2.21", "served", "started"} {
		kill(tg, point)
	}
	// a session after all that, to its end
	s := newSink()
	c := collector(t, s, preload.Config{Unwind: event.UnwindFP})
	mustInject(t, tg.pid, c, Options{})
	time.Sleep(50 * time.Millisecond)
	mustEject(t, tg.pid, Options{})
	c.Close()
	if checkSequence(t, s.events, tg.pid, 4) == 0 {
		t.Errorf("the last session saw nothing")
	}
	untracedNow(t, tg.pid, "the end")
}

// untracedNow waits until no thread of pid is traced or in a tracing stop
// and the interposer, if loaded, has no session, watcher or redirected
// GOT entry.
func untracedNow(t *testing.T, pid int, what string) {
	t.Helper()
	lib, err := preload.InjectLibrary()
	if err != nil {
		t.Fatal(err)
	}
	var why string
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		why = ""
		tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
		for _, task := range tasks {
			st, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/status", pid, task.Name()))
			for _, l := range strings.Split(string(st), "\n") {
				if strings.HasPrefix(l, "TracerPid:") && strings.TrimSpace(l[10:]) != "0" {
					why = "thread " + task.Name() + " is traced"
				}
				if strings.HasPrefix(l, "State:") && strings.Contains(l, "tracing stop") {
					why = "thread " + task.Name() + " is in a tracing stop"
				}
			}
		}
		maps, _ := proc.ReadMaps(pid)
		for _, m := range maps {
			if m.Offset != 0 || !isInterposer(m.Path) {
				continue
			}
			f, err := os.Open(fmt.Sprintf("/proc/%d/mem", pid))
			if err != nil {
				t.Fatal(err)
			}
			b := make([]byte, preload.InjectStateSize)
			_, err = f.ReadAt(b, int64(m.Start+lib.State))
			f.Close()
			if err != nil {
				t.Fatal(err)
			}
			le := binary.LittleEndian
			if a, w, e := le.Uint32(b[preload.InjectStateActive:]), le.Uint32(b[preload.InjectStateWatcher:]), le.Uint32(b[preload.InjectStateEntries:]); a != 0 || w != 0 || e != 0 {
				why = fmt.Sprintf("the interposer is active %d, watcher %d, %d entries redirected", a, w, e)
			}
		}
		if why == "" {
			return
		}
	}
	t.Fatalf("%s: pid %d: %s", what, pid, why)
}
