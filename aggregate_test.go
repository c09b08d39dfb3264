package heapscope

import (
	"bufio"
	"math/rand"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/heapscope/heapscope/analyze"
	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/internal/testutil"
)

// TestBlockMap checks the block table against a Go map through inserts and
// deletes that collide (addresses in a small range).
func TestBlockMap(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	var m blockMap
	ref := map[uint64]blockVal{}
	for i := 0; i < 200000; i++ {
		k := uint64(1 + rng.Intn(5000)*16)
		if rng.Intn(3) > 0 {
			v := blockVal{size: uint64(i), site: int32(i)}
			old, ok := m.put(k, v)
			rold, rok := ref[k]
			if ok != rok || old != rold {
				t.Fatalf("put %#x: replaced %v %v, want %v %v", k, old, ok, rold, rok)
			}
			ref[k] = v
		} else {
			v, ok := m.take(k)
			rv, rok := ref[k]
			if ok != rok || v != rv {
				t.Fatalf("take %#x: %v %v, want %v %v", k, v, ok, rv, rok)
			}
			delete(ref, k)
		}
		if m.n != len(ref) {
			t.Fatalf("%d keys, want %d", m.n, len(ref))
		}
	}
	n := 0
	m.each(func(k uint64, v blockVal) {
		n++
		if ref[k] != v {
			t.Errorf("%#x: %v, want %v", k, v, ref[k])
		}
	})
	if n != len(ref) {
		t.Errorf("each saw %d keys, want %d", n, len(ref))
	}
}

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
func byStack(a *aggregate) map[[2]uint32]siteTotals {
	out := map[[2]uint32]siteTotals{}
	sites := append([]aggSite(nil), a.sites...)
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
		a := newAggregate()
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

// TestAggregateMerge: a seed of the first part of a stream merged with the
// aggregate of the rest (which kept the frees it could not match) is the
// aggregate of the whole stream; only a temporary across the cut counts as
// a plain free.
func TestAggregateMerge(t *testing.T) {
	for seed := int64(1); seed <= 5; seed++ {
		evs := randomEvents(20000, seed)
		whole := newAggregate()
		whole.events(evs)
		cut := len(evs) / 3 * int(seed%3+1) / 2
		a, b := newAggregate(), newAggregate()
		b.keepMisses = true
		a.events(evs[:cut])
		b.events(evs[cut:])
		a.merge(b)
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

// TestTopSeeded: a Top client that comes to a session late sees what the
// session traced before it asked (read back from the trace file), then the
// growth of top_grow's grow_heap since its previous query, sorted first.
func TestTopSeeded(t *testing.T) {
	bin := testutil.MustBuild(t, "top_grow", testutil.Options{})
	cmd := exec.Command(bin, "30")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	props := Properties{File: filepath.Join(t.TempDir(), "seed.hst"), FlushInterval: 100 * time.Millisecond}
	s, err := Launch("top-seeded", props, cmd)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Kill()
		s.Stop()
	}()
	if line, _ := bufio.NewReader(stdout).ReadString('\n'); line != "started\n" {
		t.Fatalf("workload said %q", line)
	}
	time.Sleep(1500 * time.Millisecond)
	// 200,000 B/s for 1.5 s: 300 blocks of 1000 bytes before the first query.
	r, err := Top("top-seeded", TopQuery{Client: "t", N: 5})
	if err != nil {
		t.Fatal(err)
	}
	if !r.Seeded || len(r.Sites) == 0 || r.Sites[0].LiveBlocks < 250 || r.Sites[0].LiveBytes != 1000*r.Sites[0].LiveBlocks {
		t.Fatalf("first query: seeded %v, sites %+v: want the 1000-byte blocks of the first 1.5 s (about 300)", r.Seeded, r.Sites)
	}
	if len(r.Processes) != 1 || r.Processes[0].PID != uint32(cmd.Process.Pid) || len(r.Processes[0].Threads) != 1 || len(r.Modules) == 0 {
		t.Errorf("processes %+v, %d modules", r.Processes, len(r.Modules))
	}
	first := r.Sites[0]
	time.Sleep(time.Second)
	r, err = Top("top-seeded", TopQuery{Client: "t", N: 5, Order: TopByGrowth, Modules: r.NModules})
	if err != nil {
		t.Fatal(err)
	}
	g := float64(r.Sites[0].Growth) / (float64(r.Elapsed) / 1e9)
	if r.Sites[0].Frames[0] != first.Frames[0] || g < 180000 || g > 220000 {
		t.Errorf("growth %d B in %v (%.0f B/s) at %#x, want 200,000 B/s ±10%% at %#x", r.Sites[0].Growth, time.Duration(r.Elapsed), g, r.Sites[0].Frames[0], first.Frames[0])
	}
	if len(r.Modules) != 0 {
		t.Errorf("%d modules sent again", len(r.Modules))
	}
	// The churn site: a temporary every millisecond.
	r, err = s.Top(TopQuery{Client: "u", N: 1, Order: TopByTemporary, PID: uint32(cmd.Process.Pid), TID: uint32(cmd.Process.Pid)})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Sites) != 1 || r.Sites[0].Temporary < 1000 || r.Sites[0].TID != uint32(cmd.Process.Pid) {
		t.Errorf("by temporaries: %+v", r.Sites)
	}
	if _, err := s.Top(TopQuery{N: MaxTopSites + 1}); err == nil {
		t.Errorf("a query of %d sites was answered", MaxTopSites+1)
	}
}

// BenchmarkAggregateChurn is the aggregate's cost per event on the churn
// workload's stream (malloc+free pairs, two threads, one stack): what a
// session pays while a Top client asks.
func BenchmarkAggregateChurn(b *testing.B) {
	evs := make([]event.Event, 0, 1<<20)
	x := uint64(0x9E3779B97F4A7C15)
	for i := 0; len(evs) < cap(evs); i++ {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		tid := uint32(2 + i%2)
		addr := 0x5555_0000_0000 + uint64(tid)<<20 + (x%64)*32
		evs = append(evs,
			event.Event{PID: 1, TID: tid, Kind: event.KindAlloc, Stack: 1, Addr: addr, Size: 16 + x%512},
			event.Event{PID: 1, TID: tid, Kind: event.KindFree, Addr: addr})
	}
	a := newAggregate()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for j := 0; j < len(evs); j += 4096 {
			a.events(evs[j : j+4096])
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(evs)), "ns/event")
}
