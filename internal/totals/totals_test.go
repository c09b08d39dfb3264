package totals

import (
	"math/rand"
	"reflect"
	"testing"

	"github.com/heapscope/heapscope/analyze"
	"github.com/heapscope/heapscope/event"
)

// randomEvents is a stream of two processes of three threads each: blocks
// freed at once (temporaries), later, by another thread, never, reallocated,
// and frees of blocks never seen.
func randomEvents(n int, seed int64) []event.Event {
	rng := rand.New(rand.NewSource(seed))
	type blk struct {
		pid  uint32
		addr uint64
	}
	var live []blk
	next := uint64(0x1000)
	var evs []event.Event
	for len(evs) < n {
		e := event.Event{Time: int64(len(evs)), PID: uint32(1 + rng.Intn(2)), TID: uint32(10 + rng.Intn(3))}
		switch r := rng.Intn(10); {
		case r < 4 || len(live) == 0:
			next += 16 * uint64(1+rng.Intn(8))
			e.Kind, e.Func, e.Addr, e.Size, e.Stack = event.KindAlloc, event.FuncMalloc, next, uint64(1+rng.Intn(100)), event.StackID(1+rng.Intn(6))
			evs = append(evs, e)
			if rng.Intn(3) == 0 { // a temporary, or a free by another thread of the same process
				f := e
				f.Kind, f.Func, f.Size, f.Stack = event.KindFree, event.FuncFree, 0, 0
				if rng.Intn(4) == 0 {
					f.TID = uint32(10 + rng.Intn(3))
				}
				evs = append(evs, f)
			} else {
				live = append(live, blk{e.PID, e.Addr})
			}
		case r < 8:
			j := rng.Intn(len(live))
			e.PID, e.Kind, e.Func, e.Addr = live[j].pid, event.KindFree, event.FuncFree, live[j].addr
			live[j] = live[len(live)-1]
			live = live[:len(live)-1]
			evs = append(evs, e)
		case r < 9:
			j := rng.Intn(len(live))
			next += 16 * uint64(1+rng.Intn(8))
			e.PID, e.Kind, e.Func, e.OldAddr, e.Addr, e.Size, e.Stack = live[j].pid, event.KindRealloc, event.FuncRealloc, live[j].addr, next, uint64(1+rng.Intn(100)), event.StackID(1+rng.Intn(6))
			live[j].addr = next
			evs = append(evs, e)
		default:
			e.Kind, e.Func, e.Addr = event.KindFree, event.FuncFree, 0xdead0000+uint64(rng.Intn(1000))*16
			evs = append(evs, e)
		}
	}
	return evs
}

type siteTotals struct{ live, blocks, calls, frees, temps uint64 }

// byStack sums an aggregate's sites by process and stack.
func byStack(a *Totals) map[[2]uint32]siteTotals {
	out := map[[2]uint32]siteTotals{}
	sites := append([]site(nil), a.sites...)
	a.held(func(si int32, size uint64) {
		sites[si].liveBytes += size
		sites[si].liveBlocks++
	})
	for _, s := range sites {
		k := [2]uint32{s.pid, uint32(s.stack)}
		t := out[k]
		t.live += s.liveBytes
		t.blocks += s.liveBlocks
		t.calls += s.allocs
		t.frees += s.frees
		t.temps += s.temporary
		out[k] = t
	}
	return out
}

// TestAggregateAgreesWithModel: the session's totals are the heap model's
// (analyze), per process and stack: live bytes and blocks, calls, frees,
// temporaries, unmatched frees.
func TestAggregateAgreesWithModel(t *testing.T) {
	for seed := int64(1); seed <= 5; seed++ {
		evs := randomEvents(20000, seed)
		a := New()
		m := analyze.New(analyze.Options{})
		for i := 0; i < len(evs); i += 333 {
			a.events(evs[i:min(i+333, len(evs))])
			m.Events(evs[i:min(i+333, len(evs))])
		}
		p := m.Profile()
		got := byStack(a)
		for _, st := range p.Stacks {
			want := siteTotals{st.LiveBytes, st.LiveBlocks, st.Allocations + st.Reallocations, st.Frees, st.Temporary}
			if g := got[[2]uint32{st.PID, uint32(st.ID)}]; g != want {
				t.Errorf("seed %d: pid %d stack %d: %+v, want (model) %+v", seed, st.PID, st.ID, g, want)
			}
		}
		if a.unmatched != p.Summary.UnmatchedFrees {
			t.Errorf("seed %d: %d unmatched frees, want %d", seed, a.unmatched, p.Summary.UnmatchedFrees)
		}
	}
}

// burstyEvents is randomEvents with runs in it: a thread allocating and
// freeing at once at one stack, over and over (as a loop making
// temporaries does), cut by failed allocations, frees of NULL, blocks it
// keeps, and other threads' events.
func burstyEvents(n int, seed int64) []event.Event {
	rng := rand.New(rand.NewSource(seed))
	other := randomEvents(n, seed+100)
	var evs []event.Event
	next, kept := uint64(0x7000_0000), uint64(0x6000_0000)
	for len(evs) < n {
		if rng.Intn(3) == 0 {
			k := 1 + rng.Intn(20)
			evs = append(evs, other[:k]...)
			other = other[k:]
			continue
		}
		e := event.Event{PID: uint32(1 + rng.Intn(2)), TID: uint32(10 + rng.Intn(3)), Stack: event.StackID(1 + rng.Intn(3))}
		addr := next + uint64(rng.Intn(4))*16
		next += 4096
		for k := rng.Intn(40); k > 0; k-- {
			a := e
			a.Kind, a.Func, a.Addr, a.Size = event.KindAlloc, event.FuncMalloc, addr, uint64(1+rng.Intn(500))
			f := e
			f.Kind, f.Func, f.Addr, f.Stack = event.KindFree, event.FuncFree, addr, 0
			evs = append(evs, a, f)
			switch rng.Intn(30) {
			case 0:
				a.Addr = 0 // failed
				evs = append(evs, a)
			case 1:
				f.Addr = 0 // free(NULL)
				evs = append(evs, f)
			case 2:
				a.Addr = kept // kept
				kept += 16
				evs = append(evs, a)
			case 3:
				a.Stack++ // another stack, kept
				a.Addr = kept
				kept += 16
				evs = append(evs, a)
			}
		}
	}
	for i := range evs {
		evs[i].Time = int64(i)
	}
	return evs[:n]
}

// TestAggregateRuns: the loop that counts runs of temporaries (see
// Totals.temporaries) agrees with the heap model (analyze) and with the
// general loop alone (batches of one event, too short for it).
func TestAggregateRuns(t *testing.T) {
	for seed := int64(1); seed <= 5; seed++ {
		evs := burstyEvents(30000, seed)
		a, one := New(), New()
		m := analyze.New(analyze.Options{})
		for i := 0; i < len(evs); i += 1000 {
			a.events(evs[i:min(i+1000, len(evs))])
			m.Events(evs[i:min(i+1000, len(evs))])
		}
		for i := range evs {
			one.events(evs[i : i+1])
		}
		p := m.Profile()
		got, ref := byStack(a), byStack(one)
		for _, st := range p.Stacks {
			k := [2]uint32{st.PID, uint32(st.ID)}
			want := siteTotals{st.LiveBytes, st.LiveBlocks, st.Allocations + st.Reallocations - st.Failed, st.Frees, st.Temporary}
			if g := got[k]; g != want || ref[k] != want {
				t.Errorf("seed %d: pid %d stack %d: %+v, one at a time %+v, want (model) %+v", seed, st.PID, st.ID, g, ref[k], want)
			}
		}
		if len(a.sites) != len(one.sites) {
			t.Fatalf("seed %d: %d sites, one at a time %d", seed, len(a.sites), len(one.sites))
		}
		for i := range a.sites {
			if a.sites[i] != one.sites[i] {
				t.Errorf("seed %d: site %d: %+v, one at a time %+v", seed, i, a.sites[i], one.sites[i])
			}
		}
		if a.unmatched != p.Summary.UnmatchedFrees || a.lastTime != one.lastTime || a.lastTime != evs[len(evs)-1].Time {
			t.Errorf("seed %d: %d unmatched frees, want %d; last time %d, one at a time %d, want %d", seed,
				a.unmatched, p.Summary.UnmatchedFrees, a.lastTime, one.lastTime, evs[len(evs)-1].Time)
		}
	}
}

// TestAggregateMerge: a seed of the first part of a stream merged with the
// aggregate of the rest (which kept the frees it could not match) is the
// aggregate of the whole stream; only a temporary across the cut counts as
// a plain free.
func TestAggregateMerge(t *testing.T) {
	for seed := int64(1); seed <= 5; seed++ {
		evs := randomEvents(20000, seed)
		whole := New()
		whole.events(evs)
		cut := len(evs) / 3 * int(seed%3+1) / 2
		a, b := New(), New()
		b.KeepMisses(true)
		a.events(evs[:cut])
		b.events(evs[cut:])
		a.Merge(b)
		want, got := byStack(whole), byStack(a)
		for k, w := range want {
			g := got[k]
			if g.temps > w.temps || g.temps+6 < w.temps {
				t.Errorf("seed %d: pid %d stack %d: %d temporaries, want %d (or a few less)", seed, k[0], k[1], g.temps, w.temps)
			}
			g.temps, w.temps = 0, 0
			if g != w {
				t.Errorf("seed %d: pid %d stack %d: %+v, want %+v", seed, k[0], k[1], g, w)
			}
		}
		if a.unmatched != whole.unmatched {
			t.Errorf("seed %d: %d unmatched, want %d", seed, a.unmatched, whole.unmatched)
		}
	}
}

// BenchmarkAggregateChurn: what the totals cost a session per event of
// malloc+free pairs made one after the other, in batches of the size the
// preload collector hands the sink (1024 events, in L2), by one thread, by
// two taking turns pair by pair, and by two interleaved at random (two
// threads running at once, their events merged in time order).
func BenchmarkAggregateChurn(b *testing.B) {
	for _, mode := range []string{"1thread", "2pairs", "2mixed"} {
		b.Run(mode, func(b *testing.B) {
			const batch = 1024
			evs := make([]event.Event, 0, batch*64)
			x := uint64(0x9E3779B97F4A7C15)
			var held [2]uint64
			for len(evs) < cap(evs) {
				x ^= x << 13
				x ^= x >> 7
				x ^= x << 17
				th := 0
				switch mode {
				case "2pairs":
					th = len(evs) / 2 % 2
				case "2mixed":
					th = int(x>>40) % 2
				}
				e := event.Event{Time: int64(20 * len(evs)), PID: 1, TID: 2 + uint32(th)}
				if held[th] == 0 {
					held[th] = 0x5555_0000_0000 + uint64(th)<<20 + (x%32)*32
					e.Kind, e.Stack, e.Addr, e.Size = event.KindAlloc, 1, held[th], 16+x%512
				} else {
					e.Kind, e.Addr, held[th] = event.KindFree, held[th], 0
				}
				evs = append(evs, e)
			}
			a := New()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				for j := 0; j < len(evs); j += batch {
					a.events(evs[j : j+batch])
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(evs)), "ns/event")
		})
	}
}

// shapedEvents is a stream of shapes burstyEvents does not make: three
// processes of up to five threads, two of whose TIDs share a slot of
// proc.hot (10 and 26), taking turns run by run or event by event;
// runs of temporaries whose site changes, that begin with a free of the block a thread holds,
// whose block another thread frees, that a realloc of the held block
// (moved, in place, to size 0, failed) or of NULL cuts, at stack 0 (no
// stack) and at stacks above smallStacks; failed allocations and frees of
// NULL inside runs. Times are in order within a thread, not across threads
// (eBPF's ring holds events in the order their probes finished).
func shapedEvents(n int, seed int64) []event.Event {
	rng := rand.New(rand.NewSource(seed))
	tids := []uint32{10, 26, 11, 12, 27}
	stacks := []event.StackID{0, 1, 2, smallStacks + 5, 1 << 30}
	type thr struct {
		pid, tid uint32
		stack    event.StackID
		held     uint64 // the block allocated last, not yet freed
		kept     []uint64
	}
	var ths []*thr
	for pid := uint32(1); pid <= 3; pid++ {
		for _, tid := range tids[:2+rng.Intn(4)] {
			ths = append(ths, &thr{pid: pid, tid: tid, stack: stacks[rng.Intn(len(stacks))]})
		}
	}
	next := uint64(0x10_0000)
	newAddr := func() uint64 { next += 16 * uint64(1+rng.Intn(4)); return next }
	var evs []event.Event
	emit := func(th *thr, kind event.Kind, addr, size, old uint64) {
		evs = append(evs, event.Event{PID: th.pid, TID: th.tid, Kind: kind, Stack: th.stack, Addr: addr, Size: size, OldAddr: old})
	}
	for len(evs) < n {
		th := ths[rng.Intn(len(ths))]
		if rng.Intn(8) == 0 {
			th.stack = stacks[rng.Intn(len(stacks))]
		}
		k := 1 + rng.Intn(12)
		if rng.Intn(3) == 0 {
			k = 40 + rng.Intn(200) // a long run, likely across batches
		}
		for ; k > 0; k-- {
			switch r := rng.Intn(100); {
			case r < 70: // the run: free what is held, or make a temporary
				if th.held != 0 {
					emit(th, event.KindFree, th.held, 0, 0)
					th.held = 0
				} else {
					if rng.Intn(16) == 0 {
						th.stack = stacks[rng.Intn(len(stacks))] // the loop calls another site
					}
					th.held = newAddr()
					emit(th, event.KindAlloc, th.held, uint64(1+rng.Intn(300)), 0)
				}
			case r < 73:
				emit(th, event.KindAlloc, 0, 64, 0) // failed
			case r < 76:
				emit(th, event.KindFree, 0, 0, 0) // free(NULL)
			case r < 80: // another thread of the process frees the held block
				if th.held != 0 {
					for _, o := range ths {
						if o.pid == th.pid && o != th {
							emit(o, event.KindFree, th.held, 0, 0)
							th.held = 0
							break
						}
					}
				}
			case r < 86: // realloc of the held block
				if th.held != 0 {
					switch rng.Intn(4) {
					case 0: // moved
						a := newAddr()
						emit(th, event.KindRealloc, a, uint64(1+rng.Intn(300)), th.held)
						th.held = a
					case 1: // in place
						emit(th, event.KindRealloc, th.held, uint64(1+rng.Intn(300)), th.held)
					case 2: // to size 0: freed
						emit(th, event.KindRealloc, 0, 0, th.held)
						th.held = 0
					default: // failed: the block stays
						emit(th, event.KindRealloc, 0, 1<<40, th.held)
					}
				} else {
					th.held = newAddr()
					emit(th, event.KindRealloc, th.held, uint64(1+rng.Intn(300)), 0)
				}
			case r < 92: // a block kept, freed later by its thread
				a := newAddr()
				emit(th, event.KindAlloc, a, uint64(1+rng.Intn(300)), 0)
				if th.held != 0 {
					th.kept = append(th.kept, th.held)
				}
				th.held = a
			case r < 97:
				if len(th.kept) > 0 {
					j := rng.Intn(len(th.kept))
					emit(th, event.KindFree, th.kept[j], 0, 0)
					th.kept = append(th.kept[:j], th.kept[j+1:]...)
				}
			default: // a free of a block never seen
				emit(th, event.KindFree, 0xdead_0000+uint64(rng.Intn(64))*16, 0, 0)
			}
			if rng.Intn(4) == 0 {
				th = ths[rng.Intn(len(ths))] // threads running at once
			}
		}
	}
	evs = evs[:n]
	// Each event's time: later than its thread's previous one, but
	// threads' times are out of order with one another.
	last := map[[2]uint32]int64{}
	for i := range evs {
		k := [2]uint32{evs[i].PID, evs[i].TID}
		last[k] = max(last[k]+1, int64(i)-50+int64(rng.Intn(100)))
		evs[i].Time = last[k]
	}
	return evs
}

// TestAggregateShapes: on streams of other shapes (shapedEvents) cut into
// batches of random sizes, the aggregate is the one the general loop alone
// makes (the events given one at a time), site by site, agrees with the
// heap model on live bytes and blocks, frees and unmatched frees, and is
// what a seed of the stream up to a random cut merged with the rest makes.
func TestAggregateShapes(t *testing.T) {
	for seed := int64(1); seed <= 20; seed++ {
		evs := shapedEvents(20000, seed)
		rng := rand.New(rand.NewSource(seed))
		a, one := New(), New()
		m := analyze.New(analyze.Options{})
		var latest int64
		for i := 0; i < len(evs); {
			n := min(1+rng.Intn(1500), len(evs)-i)
			a.events(evs[i : i+n])
			for _, e := range evs[i : i+n] {
				latest = max(latest, e.Time)
			}
			if a.lastTime != latest {
				t.Fatalf("seed %d: after event %d: last time %d, want %d", seed, i+n, a.lastTime, latest)
			}
			i += n
		}
		m.Events(evs)
		for i := range evs {
			one.events(evs[i : i+1])
		}
		if len(a.sites) != len(one.sites) {
			t.Fatalf("seed %d: %d sites, one at a time %d", seed, len(a.sites), len(one.sites))
		}
		for i := range a.sites {
			if a.sites[i] != one.sites[i] {
				t.Errorf("seed %d: site %d: %+v, one at a time %+v", seed, i, a.sites[i], one.sites[i])
			}
		}
		if a.unmatched != one.unmatched || a.lastTime != latest || one.lastTime != latest {
			t.Errorf("seed %d: %d unmatched, one at a time %d; last time %d, one at a time %d, want %d",
				seed, a.unmatched, one.unmatched, a.lastTime, one.lastTime, latest)
		}
		for _, p := range a.procList {
			held := 0
			for _, th := range p.thrList {
				if th.pend != 0 {
					held++
				}
			}
			if held != p.pending {
				t.Errorf("seed %d: pid %d: %d threads hold a block, pending says %d", seed, p.pid, held, p.pending)
			}
		}
		// The model counts a realloc to size 0 as a call (top counts the
		// calls that returned a block): calls are left out.
		p := m.Profile()
		got := byStack(a)
		for _, st := range p.Stacks {
			k := [2]uint32{st.PID, uint32(st.ID)}
			g := got[k]
			g.calls = 0
			if want := (siteTotals{live: st.LiveBytes, blocks: st.LiveBlocks, frees: st.Frees, temps: st.Temporary}); g != want {
				t.Errorf("seed %d: pid %d stack %d: %+v, want (model) %+v", seed, st.PID, st.ID, g, want)
			}
		}
		if a.unmatched != p.Summary.UnmatchedFrees {
			t.Errorf("seed %d: %d unmatched frees, want (model) %d", seed, a.unmatched, p.Summary.UnmatchedFrees)
		}

		// A seed of the stream up to a cut, merged with the rest (as
		// subscribe does), is the whole, but for the temporaries across
		// the cut: one per thread at most (five a process).
		cut := rng.Intn(len(evs))
		seedAgg, rest := New(), New()
		rest.KeepMisses(true)
		for i := 0; i < len(evs); {
			n := min(1+rng.Intn(1500), len(evs)-i)
			seedAgg.events(evs[min(i, cut):min(i+n, cut)])
			rest.events(evs[max(i, cut):max(i+n, cut)])
			i += n
		}
		seedAgg.Merge(rest)
		merged := byStack(seedAgg)
		for k, w := range byStack(a) {
			g := merged[k]
			if g.temps > w.temps || g.temps+5 < w.temps {
				t.Errorf("seed %d, cut %d: pid %d stack %d: %d temporaries, want %d (or a few less)", seed, cut, k[0], k[1], g.temps, w.temps)
			}
			g.temps, w.temps = 0, 0
			if g != w {
				t.Errorf("seed %d, cut %d: pid %d stack %d: merged %+v, want %+v", seed, cut, k[0], k[1], g, w)
			}
		}
		if seedAgg.unmatched != a.unmatched || seedAgg.lastTime != a.lastTime {
			t.Errorf("seed %d, cut %d: merged: %d unmatched, last time %d; want %d, %d", seed, cut,
				seedAgg.unmatched, seedAgg.lastTime, a.unmatched, a.lastTime)
		}
	}
}

// TestExitAgreesWithModel: a process that exits with blocks live keeps them
// as its sites' live bytes (leaks), but the heap (the sum of a View's
// rows) counts them no more, as the heap model's final timeline point
// does; the program an exec starts under the same PID finds none of them,
// as the model does not. Also when the exit comes after a seed (Merge).
func TestExitAgreesWithModel(t *testing.T) {
	for seed := int64(1); seed <= 3; seed++ {
		evs := randomEvents(6000, seed)
		cut := len(evs) / 2
		exit := event.Exit{PID: 2, Time: evs[cut].Time}
		// After the exit, process 2 (an exec's new program) allocates at
		// the addresses the old one had live.
		var after []event.Event
		for i := 0; i < 50; i++ {
			after = append(after, event.Event{Time: exit.Time + int64(i), PID: 2, TID: 10, Kind: event.KindAlloc,
				Func: event.FuncMalloc, Addr: 0x1000 + 16*uint64(i), Size: 8, Stack: 7})
		}
		for _, merge := range []bool{false, true} {
			a := New()
			m := analyze.New(analyze.Options{})
			m.Events(evs[:cut])
			b := a
			if merge {
				a.events(evs[:cut])
				b = New()
				b.KeepMisses(true)
			} else {
				b.events(evs[:cut])
			}
			b.Exit(exit)
			m.Exit(exit)
			b.events(after)
			m.Events(after)
			b.events(evs[cut:])
			m.Events(evs[cut:])
			if merge {
				a.Merge(b)
			}
			p := m.Profile()
			got := byStack(a)
			for _, st := range p.Stacks {
				want := siteTotals{st.LiveBytes, st.LiveBlocks, st.Allocations + st.Reallocations, st.Frees, st.Temporary}
				if g := got[[2]uint32{st.PID, uint32(st.ID)}]; g != want {
					t.Errorf("seed %d merge %v: pid %d stack %d: %+v, want (model) %+v", seed, merge, st.PID, st.ID, g, want)
				}
			}
			_, sum, _ := a.View(0, 0, 0).Rows(&Client{}, ByLive, 0, 0)
			end := p.Timeline[len(p.Timeline)-1]
			if sum.LiveBytes != end.Bytes || sum.LiveBlocks != end.Blocks || sum.LiveBytes == p.Summary.LiveBytes {
				t.Errorf("seed %d merge %v: the heap %d bytes in %d blocks, want the model's %+v (leaks %d)", seed, merge,
					sum.LiveBytes, sum.LiveBlocks, end, p.Summary.LiveBytes)
			}
		}
	}
}

// TestSampledAgreesWithModel: the totals of a sampled session are the heap
// model's estimates of the same sampled stream, per process and stack, to
// the byte and object: calls, bytes allocated, live bytes and objects,
// frees (each block weighed as analyze.SampledBlock weighs it). A seed of
// the stream up to a cut merged with the rest is the whole, exactly: the
// sampled totals hold nothing back as a temporary.
func TestSampledAgreesWithModel(t *testing.T) {
	type totals struct{ live, blocks, calls, bytes, frees uint64 }
	sum := func(a *Totals) map[[2]uint32]totals {
		out := map[[2]uint32]totals{}
		for _, s := range a.sites {
			k := [2]uint32{s.pid, uint32(s.stack)}
			t := out[k]
			t.live += s.liveBytes
			t.blocks += s.liveBlocks
			t.calls += s.allocs
			t.bytes += s.allocBytes
			t.frees += s.frees
			out[k] = t
			if s.temporary != 0 || s.liveBytes != s.allocBytes-s.freedBytes {
				panic("sampled totals with temporaries, or bytes that do not add up")
			}
		}
		return out
	}
	for _, rate := range []int64{64, 4096} {
		for seed := int64(1); seed <= 4; seed++ {
			evs := randomEvents(20000, seed)
			if seed%2 == 0 {
				// Failed calls and reallocs to 0: not calls of the totals.
				evs = shapedEvents(20000, seed)
			}
			a := NewSampled(rate)
			m := analyze.New(analyze.Options{SampleRate: rate})
			for i := 0; i < len(evs); i += 333 {
				a.events(evs[i:min(i+333, len(evs))])
			}
			m.Events(evs)
			p := m.Profile()
			got := sum(a)
			var live uint64
			for _, st := range p.Stacks {
				want := totals{st.LiveBytes, st.LiveBlocks, st.Allocations + st.Reallocations - st.Failed, st.Bytes, st.Frees}
				g := got[[2]uint32{st.PID, uint32(st.ID)}]
				if seed%2 == 0 {
					g.calls, want.calls = 0, 0
				}
				if g != want {
					t.Errorf("rate %d seed %d: pid %d stack %d: %+v, want (model) %+v", rate, seed, st.PID, st.ID, g, want)
				}
				live += st.LiveBytes
			}
			if live == 0 || a.unmatched != p.Summary.UnmatchedFrees {
				t.Errorf("rate %d seed %d: live %d; %d unmatched frees, want %d", rate, seed, live, a.unmatched, p.Summary.UnmatchedFrees)
			}

			cut := len(evs) / 3
			head, rest := NewSampled(rate), NewSampled(rate)
			rest.KeepMisses(true)
			head.events(evs[:cut])
			rest.events(evs[cut:])
			head.Merge(rest)
			if g, w := sum(head), got; !reflect.DeepEqual(g, w) {
				t.Errorf("rate %d seed %d: merged at %d: %v, want %v", rate, seed, cut, g, w)
			}
			if head.unmatched != a.unmatched {
				t.Errorf("rate %d seed %d: merged: %d unmatched, want %d", rate, seed, head.unmatched, a.unmatched)
			}
		}
	}
}

// TestSampledSnapshot: a sampled eBPF aggregate snapshot's live blocks
// are weighed as the model weighs them; its totals, weighed in BPF, are
// taken as they are.
func TestSampledSnapshot(t *testing.T) {
	const rate = 1000
	sn := event.Snapshot{PID: 7, Time: 100,
		Live: []event.LiveBlock{{Addr: 0x1000, Size: 10, Stack: 1, Time: 5}, {Addr: 0x2000, Size: 10, Stack: 1, Time: 6},
			{Addr: 0x3000, Size: 5000, Stack: 2, Time: 7}},
		Totals: []event.StackTotal{{Stack: 1, Allocs: 300, AllocBytes: 3000, Frees: 100, FreeBytes: 1000},
			{Stack: 2, Allocs: 1, AllocBytes: 5034}}}
	a := NewSampled(rate)
	a.Snapshot(sn)
	m := analyze.New(analyze.Options{SampleRate: rate})
	m.Process(event.Process{PID: 7})
	m.Snapshot(sn)
	v := a.View(0, 0, 0)
	stacks := map[event.StackID]Stack{}
	for _, st := range v.Stacks() {
		stacks[st.ID] = st
	}
	n := 0
	for _, st := range m.Profile().Stacks {
		g := stacks[st.ID]
		if g.LiveBytes != st.LiveBytes || g.LiveBlocks != st.LiveBlocks || g.AllocBytes != st.Bytes {
			t.Errorf("stack %d: %+v, want (model) live %d in %d, %d allocated", st.ID, g, st.LiveBytes, st.LiveBlocks, st.Bytes)
		}
		n++
	}
	if n != 2 || stacks[1].Allocs != 300 || stacks[1].LiveBytes != 2010 { // 10/(1-exp(-10/1000)) = 1005 bytes each
		t.Errorf("%d stacks; %+v", n, stacks)
	}
}

// TestViewStacks: Stacks sums a stack's threads, and gives its frames and
// the processes' records.
func TestViewStacks(t *testing.T) {
	a := New()
	a.Process(event.Process{PID: 1, PPID: 9, Exe: "/bin/x", Cmdline: []string{"x", "-y"}})
	a.Stack(event.Stack{PID: 1, ID: 3, Frames: []uint64{0x10, 0x20}})
	var evs []event.Event
	for i, tid := range []uint32{1, 2, 2, 3} {
		evs = append(evs, event.Event{Kind: event.KindAlloc, PID: 1, TID: tid, Stack: 3, Addr: uint64(0x1000 + 16*i), Size: 100, Time: int64(i)})
	}
	evs = append(evs, event.Event{Kind: event.KindFree, PID: 1, TID: 3, Addr: 0x1000, Time: 9})
	a.Events(evs)
	v := a.View(0, 0, 0)
	st := v.Stacks()
	want := []Stack{{PID: 1, ID: 3, Frames: []uint64{0x10, 0x20}, Allocs: 4, AllocBytes: 400, LiveBlocks: 3, LiveBytes: 300}}
	if !reflect.DeepEqual(st, want) {
		t.Errorf("Stacks = %+v, want %+v", st, want)
	}
	if p := v.Processes; len(p) != 1 || p[0].PPID != 9 || !reflect.DeepEqual(p[0].Cmdline, []string{"x", "-y"}) || p[0].Ended {
		t.Errorf("processes %+v", p)
	}
	a.Exit(event.Exit{PID: 1})
	a.Process(event.Process{PID: 1, Exe: "/bin/z"})
	if p := a.View(0, 0, 0).Processes; p[0].Ended || p[0].Exe != "/bin/z" {
		t.Errorf("after an exec: %+v", p)
	}
}
