package analyze

import (
	"errors"
	"math/rand"
	"os"
	"testing"

	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/tracefile"
)

// churnEvents is the churn workload's stream: malloc+free pairs of random
// sizes from one stack in two threads.
func churnEvents(n int) []event.Event {
	evs := make([]event.Event, 0, n)
	x := uint64(0x9E3779B97F4A7C15)
	for i := 0; len(evs) < n; i++ {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		tid := uint32(2 + i%2)
		addr := 0x5555_0000_0000 + uint64(tid)<<20 + (x%64)*32
		t := int64(i) * 100
		evs = append(evs,
			event.Event{Time: t, PID: 1, TID: tid, Kind: event.KindAlloc, Func: event.FuncMalloc, Stack: 1, Addr: addr, Size: 16 + x%512},
			event.Event{Time: t + 50, PID: 1, TID: tid, Kind: event.KindFree, Func: event.FuncFree, Addr: addr})
	}
	return evs
}

// mixedEvents is a program-like stream: thousands of stacks, a live set of
// about 100k blocks, a quarter of the frees long after the allocation.
func mixedEvents(n int) []event.Event {
	rng := rand.New(rand.NewSource(1))
	evs := make([]event.Event, 0, n)
	var live []uint64
	next := uint64(0x5555_0000_0000)
	for i := 0; len(evs) < n; i++ {
		e := event.Event{Time: int64(i) * 100, PID: 1, TID: 1 + uint32(rng.Intn(4))}
		if len(live) > 100000 || (len(live) > 0 && rng.Intn(2) == 0) {
			j := rng.Intn(len(live))
			if rng.Intn(4) > 0 {
				j = len(live) - 1
			}
			e.Kind, e.Addr = event.KindFree, live[j]
			live[j] = live[len(live)-1]
			live = live[:len(live)-1]
		} else {
			next += 16 * uint64(1+rng.Intn(64))
			e.Kind, e.Addr, e.Size, e.Stack = event.KindAlloc, next, uint64(rng.Intn(1024)), event.StackID(1+rng.Intn(5000))
			live = append(live, e.Addr)
		}
		evs = append(evs, e)
	}
	return evs
}

func benchModel(b *testing.B, evs []event.Event) {
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		m := New(Options{})
		for j := 0; j < len(evs); j += 4096 {
			m.Events(evs[j:min(j+4096, len(evs))])
		}
		m.Profile()
	}
	b.ReportMetric(float64(b.N)*float64(len(evs))/b.Elapsed().Seconds(), "events/s")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(evs)), "ns/event")
}

func BenchmarkModelChurn(b *testing.B) { benchModel(b, churnEvents(1_000_000)) }
func BenchmarkModelMixed(b *testing.B) { benchModel(b, mixedEvents(1_000_000)) }

// BenchmarkModelTrace replays up to 5M events of the trace named by
// $HEAPSCOPE_BENCH_TRACE, held in memory, through the model: the model's
// cost alone on a real program's events (bench/reportbench -keep DIR leaves
// such traces).
func BenchmarkModelTrace(b *testing.B) {
	path := os.Getenv("HEAPSCOPE_BENCH_TRACE")
	if path == "" {
		b.Skip("HEAPSCOPE_BENCH_TRACE names no trace")
	}
	r, err := tracefile.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	c := &collect{max: 5_000_000}
	if err := r.Replay(c, tracefile.Window{}); err != nil && err != errEnough {
		b.Fatal(err)
	}
	r.Close()
	benchModel(b, c.evs)
}

var errEnough = errors.New("enough events")

// collect keeps the first max events of a replay.
type collect struct {
	evs []event.Event
	max int
}

func (*collect) Process(event.Process) error   { return nil }
func (*collect) Exit(event.Exit) error         { return nil }
func (*collect) Module(event.Module) error     { return nil }
func (*collect) Stack(event.Stack) error       { return nil }
func (*collect) Stats(event.Stats) error       { return nil }
func (*collect) Snapshot(event.Snapshot) error { return nil }
func (*collect) Note(event.Note) error         { return nil }
func (c *collect) Events(evs []event.Event) error {
	if len(c.evs) >= c.max {
		return errEnough
	}
	c.evs = append(c.evs, evs...)
	return nil
}
