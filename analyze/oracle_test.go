package analyze

import (
	"math/rand"
	"reflect"
	"testing"

	"github.com/heapscope/heapscope/event"
)

// oracle is the obvious, slow heap model: it copies every stack's live
// values at each new peak. The Model must agree with it exactly.
type oracle struct {
	blocks    map[[2]uint64]oblock // (pid, addr)
	stacks    map[[2]uint64]*Stack // (pid, stack id)
	last      map[[2]uint64]uint64 // (pid, tid) → address of its last allocation
	live      uint64
	peak      Peak
	atPeak    map[[2]uint64][2]uint64
	unmatched uint64
}

type oblock struct {
	size  uint64
	stack [2]uint64
	tid   uint32
}

func newOracle() *oracle {
	return &oracle{blocks: map[[2]uint64]oblock{}, stacks: map[[2]uint64]*Stack{}, last: map[[2]uint64]uint64{}, atPeak: map[[2]uint64][2]uint64{}}
}

func (o *oracle) stack(pid uint32, id event.StackID) *Stack {
	k := [2]uint64{uint64(pid), uint64(id)}
	if o.stacks[k] == nil {
		o.stacks[k] = &Stack{PID: pid, ID: id}
	}
	return o.stacks[k]
}

func (o *oracle) free(e *event.Event, addr uint64) {
	k := [2]uint64{uint64(e.PID), addr}
	b, ok := o.blocks[k]
	if !ok {
		o.unmatched++
		return
	}
	delete(o.blocks, k)
	s := o.stacks[b.stack]
	s.LiveBytes -= b.size
	s.LiveBlocks--
	s.Frees++
	s.FreedBytes += b.size
	o.live -= b.size
	if o.last[[2]uint64{uint64(e.PID), uint64(e.TID)}] == addr && b.tid == e.TID {
		s.Temporary++
	}
}

func (o *oracle) alloc(e *event.Event, s *Stack) {
	o.blocks[[2]uint64{uint64(e.PID), e.Addr}] = oblock{e.Size, [2]uint64{uint64(e.PID), uint64(e.Stack)}, e.TID}
	s.LiveBytes += e.Size
	s.LiveBlocks++
	s.Bytes += e.Size
	o.live += e.Size
}

func (o *oracle) event(e *event.Event) {
	tk := [2]uint64{uint64(e.PID), uint64(e.TID)}
	switch e.Kind {
	case event.KindAlloc:
		s := o.stack(e.PID, e.Stack)
		s.Allocations++
		if e.Addr == 0 {
			s.Failed++
		} else {
			o.alloc(e, s)
		}
		o.last[tk] = e.Addr
	case event.KindRealloc:
		s := o.stack(e.PID, e.Stack)
		s.Reallocations++
		if e.Addr == 0 && e.Size != 0 {
			s.Failed++
			o.last[tk] = 0
			break
		}
		if e.OldAddr != 0 {
			o.free(e, e.OldAddr)
		}
		if e.Addr != 0 {
			o.alloc(e, s)
		}
		o.last[tk] = e.Addr
	case event.KindFree:
		o.free(e, e.Addr)
		o.last[tk] = 0
	}
	if o.live > o.peak.Bytes {
		o.peak = Peak{Time: e.Time, Bytes: o.live, Blocks: uint64(len(o.blocks))}
		clear(o.atPeak)
		for k, s := range o.stacks {
			o.atPeak[k] = [2]uint64{s.LiveBytes, s.LiveBlocks}
		}
	}
}

// randomTrace makes n events over a few processes, threads and stacks, with
// reallocs, failures, unmatched frees, and addresses reused after frees.
func randomTrace(rng *rand.Rand, n int) []event.Event {
	type key struct {
		pid  uint32
		addr uint64
	}
	var live []key
	evs := make([]event.Event, 0, n)
	t := int64(1000)
	newAddr := func() uint64 { return 0x10000 + uint64(rng.Intn(4096))*16 }
	for len(evs) < n {
		t += int64(rng.Intn(3000))
		pid := uint32(100 + rng.Intn(3))
		e := event.Event{Time: t, PID: pid, TID: pid + uint32(rng.Intn(3)), Stack: event.StackID(rng.Intn(12))}
		switch r := rng.Intn(100); {
		case r < 40:
			e.Kind, e.Addr, e.Size = event.KindAlloc, newAddr(), uint64(rng.Intn(5000))
			if rng.Intn(50) == 0 {
				e.Addr = 0
			}
		case r < 52 && len(live) > 0:
			i := rng.Intn(len(live))
			e.PID = live[i].pid
			e.TID = e.PID + uint32(rng.Intn(3))
			e.Kind, e.OldAddr, e.Addr, e.Size = event.KindRealloc, live[i].addr, newAddr(), uint64(rng.Intn(9000))
			switch rng.Intn(10) {
			case 0:
				e.Addr = 0 // failed
			case 1:
				e.Addr = e.OldAddr // in place
			case 2:
				e.OldAddr = 0
			}
		case r < 95 && len(live) > 0:
			i := rng.Intn(len(live))
			e.PID, e.Kind, e.Addr = live[i].pid, event.KindFree, live[i].addr
			if rng.Intn(3) > 0 {
				e.TID = e.PID // mostly the allocating thread's process leader
			}
		default:
			e.Kind, e.Addr = event.KindFree, newAddr() // likely unmatched
		}
		// Keep the generator's idea of the live set only roughly right:
		// the models must cope with whatever it produces.
		if e.Kind == event.KindAlloc && e.Addr != 0 {
			live = append(live, key{e.PID, e.Addr})
		}
		if e.Kind == event.KindRealloc && e.Addr != 0 {
			live = append(live, key{e.PID, e.Addr})
		}
		if len(live) > 2000 {
			live = live[1000:]
		}
		evs = append(evs, e)
	}
	return evs
}

// slidingTrace makes n events of one process whose new blocks are at
// addresses never used before, as a heap that grows does, with a live set
// of about live blocks freed in random order: every key of the live-block
// table is new, and keys probe past one another and leave.
func slidingTrace(rng *rand.Rand, n, live int) []event.Event {
	var addrs []uint64
	next := uint64(0x5555_0000_0000)
	evs := make([]event.Event, 0, n)
	for i := 0; len(evs) < n; i++ {
		e := event.Event{Time: int64(1000 + i), PID: 7, TID: 7 + uint32(rng.Intn(2)), Stack: event.StackID(1 + rng.Intn(40))}
		if len(addrs) < live || rng.Intn(2) == 0 {
			next += 16 * uint64(1+rng.Intn(4))
			e.Kind, e.Addr, e.Size = event.KindAlloc, next, uint64(1+rng.Intn(300))
			addrs = append(addrs, next)
		} else {
			j := rng.Intn(len(addrs))
			e.Kind, e.Addr = event.KindFree, addrs[j]
			addrs[j] = addrs[len(addrs)-1]
			addrs = addrs[:len(addrs)-1]
		}
		evs = append(evs, e)
	}
	return evs
}

func TestAgainstOracle(t *testing.T) {
	for seed := int64(1); seed <= 24; seed++ {
		rng := rand.New(rand.NewSource(seed))
		evs := randomTrace(rng, 20000)
		if seed > 20 {
			evs = slidingTrace(rng, 200000, []int{50, 3000, 20000, 70000}[seed-21])
		}
		// Drop allocations at live addresses: the oracle does not model
		// lost frees.
		o := newOracle()
		var clean []event.Event
		for i := range evs {
			e := evs[i]
			if e.Addr != 0 && (e.Kind == event.KindAlloc || e.Kind == event.KindRealloc) && e.Addr != e.OldAddr {
				if _, taken := o.blocks[[2]uint64{uint64(e.PID), e.Addr}]; taken {
					continue
				}
			}
			clean = append(clean, e)
			o.event(&clean[len(clean)-1])
		}
		m := New(Options{})
		must(t, m.Events(clean))
		p := m.Profile()
		if p.Peak != o.peak {
			t.Errorf("seed %d: peak %+v, oracle %+v", seed, p.Peak, o.peak)
		}
		if p.Summary.UnmatchedFrees != o.unmatched || p.Summary.MissedFrees != 0 {
			t.Errorf("seed %d: unmatched %d, oracle %d", seed, p.Summary.UnmatchedFrees, o.unmatched)
		}
		seen := 0
		for _, s := range p.Stacks {
			want := o.stacks[[2]uint64{uint64(s.PID), uint64(s.ID)}]
			if want == nil {
				t.Fatalf("seed %d: stack %d/%d unknown to the oracle", seed, s.PID, s.ID)
			}
			seen++
			w := *want
			ap := o.atPeak[[2]uint64{uint64(s.PID), uint64(s.ID)}]
			w.PeakBytes, w.PeakBlocks = ap[0], ap[1]
			if !reflect.DeepEqual(s, w) {
				t.Errorf("seed %d: stack %d/%d\n got %+v\nwant %+v", seed, s.PID, s.ID, s, w)
			}
		}
		if seen != len(o.stacks) {
			t.Errorf("seed %d: %d stacks, oracle %d", seed, seen, len(o.stacks))
		}
	}
}
