package ebpf

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/internal/testutil"
)

// TestDeepStacks runs ebpf_churn's loop 40 calls deep, in frames of about
// 200 bytes: a stack of 42 frames over several pages, which the walk reads a
// page at a time. Every allocation of the loop has all of them: 40 frames
// in descend, then worker.
func TestDeepStacks(t *testing.T) {
	bin := testutil.MustBuild(t, "ebpf_churn", testutil.Options{})
	for _, mode := range []event.CaptureMode{event.Stream, event.Aggregate} {
		t.Run(mode.String(), func(t *testing.T) {
			rec := newRecorder(t)
			tr := newTracer(t, Config{Mode: mode}, rec)
			const depth = 40
			w := startWorkloadNoReady(t, bin, "1000", "2", "wait", strconv.Itoa(depth))
			printed := map[string]uint64{}
			for range 2 {
				f := strings.Fields(w.expect(t, "site "))
				addr, err := strconv.ParseUint(f[2], 16, 64)
				if err != nil {
					t.Fatal(err)
				}
				printed[f[1]] = addr
			}
			r := siteRanges(t, bin, printed)
			if err := tr.Attach(w.pid()); err != nil {
				t.Fatal(err)
			}
			w.release(t)
			w.expect(t, "cpu_ns_per_pair")
			mustFlush(t, tr)
			check := func(id event.StackID) string {
				fr := rec.frames(w.pid(), id)
				if len(fr) < depth+1 {
					return fmt.Sprintf("%d frames: %x", len(fr), fr)
				}
				for i := 0; i < depth; i++ {
					if !r.in("descend", fr[i]) {
						return fmt.Sprintf("frame %d not in descend: %x", i, fr)
					}
				}
				if !r.in("worker", fr[depth]) {
					return fmt.Sprintf("frame %d not in worker: %x", depth, fr)
				}
				return ""
			}
			// The loop's stack is the one whose first frames are in
			// descend twice.
			isLoop := func(fr []uint64) bool { return len(fr) > 1 && r.in("descend", fr[0]) && r.in("descend", fr[1]) }
			n := 0
			if mode == event.Stream {
				for _, e := range rec.eventsOf(w.pid()) {
					if e.Kind != event.KindAlloc || !isLoop(rec.frames(w.pid(), e.Stack)) {
						continue
					}
					n++
					if bad := check(e.Stack); bad != "" {
						t.Fatalf("event %+v: %s", e, bad)
					}
				}
			} else {
				for _, sn := range rec.snapshotsOf(w.pid()) {
					for _, st := range sn.Totals {
						if !isLoop(rec.frames(w.pid(), st.Stack)) {
							continue
						}
						n += int(st.Allocs)
						if bad := check(st.Stack); bad != "" {
							t.Fatalf("totals %+v: %s", st, bad)
						}
					}
				}
			}
			if n != 2000 {
				t.Errorf("%d allocations of the loop with its stack, want 2000", n)
			}
			if st := tr.Stats(); st.StacksLost != 0 {
				t.Errorf("%d stacks lost", st.StacksLost)
			}
		})
	}
}

// TestStackCallers checks that calls from one function at one depth, whose
// frame is at the same address each time, get the stacks of their own
// callers: ebpf_calls calls site_malloc from three places in main each
// round, one after another, and the thread's last stack, which a walk that
// finds the same frames reuses, is the one before.
func TestStackCallers(t *testing.T) {
	bin := testutil.MustBuild(t, "ebpf_calls", testutil.Options{})
	rec := newRecorder(t)
	tr := newTracer(t, Config{}, rec)
	w := traced(t, tr, bin, "10")
	log := parseLog(t, w.lines(t, "done"))
	mustFlush(t, tr)
	evs := rec.eventsOf(w.pid())
	var seconds []uint64 // the caller of each site_malloc call, in order
	for i, c := range log.calls {
		if c.site != "site_malloc" || i >= len(evs) {
			continue
		}
		fr := rec.frames(w.pid(), evs[i].Stack)
		if len(fr) < 2 {
			t.Fatalf("call %d: stack %x", i, fr)
		}
		seconds = append(seconds, fr[1])
	}
	distinct := map[uint64]bool{}
	for i, s := range seconds {
		distinct[s] = true
		if i >= 3 && s != seconds[i-3] {
			t.Errorf("call %d of site_malloc from %#x, the same call a round before from %#x", i, s, seconds[i-3])
		}
	}
	if len(seconds) != 30 || len(distinct) != 3 {
		t.Errorf("%d calls of site_malloc from %d places in main, want 30 from 3: %x", len(seconds), len(distinct), seconds)
	}
}

// TestStacksEvicted: a program with many more distinct stacks than the
// stack map holds (ebpf_stacks: 12 rounds of 700 allocations, each from a
// stack of its own) has a stack for every allocation, none lost: the map
// holds only the stacks not yet read (here, a round's), and the stacks
// read are known by key.
func TestStacksEvicted(t *testing.T) {
	bin := testutil.MustBuild(t, "ebpf_stacks", testutil.Options{Flags: []string{"-fno-optimize-sibling-calls"}})
	const rounds, per = 12, 700
	rec := newRecorder(t)
	tr := newTracer(t, Config{StackMapSize: 1024, UnwindTables: true}, rec)
	w := traced(t, tr, bin, strconv.Itoa(rounds), strconv.Itoa(per))
	for r := 0; r < rounds-1; r++ {
		w.expect(t, "round ")
		mustFlush(t, tr)
		w.release(t)
	}
	w.expect(t, "done")
	mustFlush(t, tr)
	n, without := 0, 0
	distinct := map[string]bool{}
	for _, e := range rec.eventsOf(w.pid()) {
		if e.Kind != event.KindAlloc || e.Size != 24 {
			continue
		}
		n++
		fr := rec.frames(w.pid(), e.Stack)
		if len(fr) == 0 {
			without++
			continue
		}
		distinct[fmt.Sprint(fr)] = true
	}
	st := tr.Stats()
	t.Logf("%d allocations, %d distinct stacks, %d without a stack; stats %+v", n, len(distinct), without, st)
	if n != rounds*per || without != 0 || len(distinct) != rounds*per || st.StacksLost != 0 || st.StacksCut != 0 {
		t.Errorf("%d allocations (want %d), %d distinct stacks, %d without a stack, %d stacks lost, %d cut",
			n, rounds*per, len(distinct), without, st.StacksLost, st.StacksCut)
	}
}

// TestStacksEvictedAggregate is TestStacksEvicted in aggregate mode, with
// no snapshot before the last: the stacks are read as they come (every
// quarter of a second), not only at snapshots, so that the stack map need
// not hold all of them; the totals the tables cannot hold come through
// the ring. Each of the 8,400 stacks has its allocation in the totals.
func TestStacksEvictedAggregate(t *testing.T) {
	bin := testutil.MustBuild(t, "ebpf_stacks", testutil.Options{Flags: []string{"-fno-optimize-sibling-calls"}})
	const rounds, per = 12, 700
	rec := newRecorder(t)
	tr := newTracer(t, Config{Mode: event.Aggregate, StackMapSize: 1024, UnwindTables: true}, rec)
	w := traced(t, tr, bin, strconv.Itoa(rounds), strconv.Itoa(per))
	for r := 0; r < rounds-1; r++ {
		w.expect(t, "round ")
		// A harvest, not a snapshot, reads the round's stacks, and the
		// stack map lets their frames go.
		waitFor(t, func() bool {
			rec.mu.Lock()
			read := len(rec.stacks[uint32(w.pid())])
			rec.mu.Unlock()
			var k uint64
			var v heapscopeStack
			inMap := 0
			for it := tr.objs.stacks.Iterate(); it.Next(&k, &v); {
				inMap++
			}
			return read >= (r+1)*per && inMap == 0
		})
		w.release(t)
	}
	w.expect(t, "done")
	mustFlush(t, tr)
	sns := rec.snapshotsOf(w.pid())
	if len(sns) != 1 {
		t.Fatalf("%d snapshots, want the one of the Flush", len(sns))
	}
	n, distinct := uint64(0), map[string]bool{}
	for _, st := range sns[0].Totals {
		fr := rec.frames(w.pid(), st.Stack)
		if len(fr) > 16 {
			n += st.Allocs
			distinct[fmt.Sprint(fr)] = true
		}
	}
	s := tr.Stats()
	t.Logf("%d allocations in %d distinct deep stacks; stats %+v", n, len(distinct), s)
	if n != rounds*per || len(distinct) != rounds*per || s.StacksLost != 0 || s.TotalLost() != 0 {
		t.Errorf("%d allocations in %d distinct deep stacks (want %d), %d stacks lost, %d events lost", n, len(distinct), rounds*per, s.StacksLost, s.TotalLost())
	}
}
