package analyze

import (
	"math/rand"
	"testing"

	"github.com/heapscope/heapscope/event"
)

// seq builds event sequences tersely; each event gets the next time.
type seq struct {
	t   int64
	evs []event.Event
}

func (s *seq) add(e event.Event) *seq {
	s.t += 10
	if e.Time == 0 {
		e.Time = s.t
	} else {
		s.t = e.Time
	}
	if e.PID == 0 {
		e.PID = 1
	}
	if e.TID == 0 {
		e.TID = e.PID
	}
	s.evs = append(s.evs, e)
	return s
}

func (s *seq) alloc(stack event.StackID, addr, size uint64) *seq {
	return s.add(event.Event{Kind: event.KindAlloc, Func: event.FuncMalloc, Stack: stack, Addr: addr, Size: size})
}

func (s *seq) free(addr uint64) *seq {
	return s.add(event.Event{Kind: event.KindFree, Func: event.FuncFree, Addr: addr})
}

func (s *seq) realloc(stack event.StackID, old, addr, size uint64) *seq {
	return s.add(event.Event{Kind: event.KindRealloc, Func: event.FuncRealloc, Stack: stack, OldAddr: old, Addr: addr, Size: size})
}

func run(t *testing.T, o Options, s *seq) *Profile {
	t.Helper()
	m := New(o)
	// Feed in uneven batches, as a reader would.
	for i := 0; i < len(s.evs); {
		n := min(1+i%3, len(s.evs)-i)
		if err := m.Events(s.evs[i : i+n]); err != nil {
			t.Fatal(err)
		}
		i += n
	}
	return m.Profile()
}

func stackOf(t *testing.T, p *Profile, pid uint32, id event.StackID) Stack {
	t.Helper()
	for _, s := range p.Stacks {
		if s.PID == pid && s.ID == id {
			return s
		}
	}
	t.Fatalf("no stack %d of pid %d in %+v", id, pid, p.Stacks)
	return Stack{}
}

func TestPeakInstantAndLiveAtPeak(t *testing.T) {
	var s seq
	s.alloc(1, 0x1000, 100). // t=10
					alloc(2, 0x2000, 200). // t=20
					alloc(1, 0x3000, 50).  // t=30: peak 350, A=150/2 B=200/1
					free(0x2000).          // t=40
					alloc(1, 0x4000, 100). // t=50: 250
					alloc(3, 0x5000, 10)   // t=60: 260
	p := run(t, Options{}, &s)
	if want := (Peak{Time: 30, Bytes: 350, Blocks: 3}); p.Peak != want {
		t.Errorf("peak %+v, want %+v", p.Peak, want)
	}
	for _, c := range []struct {
		id                                event.StackID
		peakBytes, peakBlocks, live, nliv uint64
	}{{1, 150, 2, 250, 3}, {2, 200, 1, 0, 0}, {3, 0, 0, 10, 1}} {
		st := stackOf(t, p, 1, c.id)
		if st.PeakBytes != c.peakBytes || st.PeakBlocks != c.peakBlocks || st.LiveBytes != c.live || st.LiveBlocks != c.nliv {
			t.Errorf("stack %d: peak %d/%d live %d/%d, want %d/%d %d/%d", c.id,
				st.PeakBytes, st.PeakBlocks, st.LiveBytes, st.LiveBlocks, c.peakBytes, c.peakBlocks, c.live, c.nliv)
		}
	}

	// A later, higher peak supersedes it; stacks untouched since keep
	// their current values.
	s.free(0x1000). // t=70: 160
			alloc(2, 0x6000, 300) // t=80: 460: A=150/2 B=300/1 C=10/1
	p = run(t, Options{}, &s)
	if want := (Peak{Time: 80, Bytes: 460, Blocks: 4}); p.Peak != want {
		t.Errorf("second peak %+v, want %+v", p.Peak, want)
	}
	s.free(0x6000).free(0x5000) // after the peak: the saved values must hold
	p = run(t, Options{}, &s)
	for id, want := range map[event.StackID]uint64{1: 150, 2: 300, 3: 10} {
		if got := stackOf(t, p, 1, id).PeakBytes; got != want {
			t.Errorf("stack %d at second peak: %d bytes, want %d", id, got, want)
		}
	}
	if p.Summary.LiveBytes != 150 || p.Summary.LiveBlocks != 2 {
		t.Errorf("leaked %d/%d, want 150/2", p.Summary.LiveBytes, p.Summary.LiveBlocks)
	}
}

func TestReallocMoves(t *testing.T) {
	var s seq
	s.alloc(1, 0x100, 10).
		realloc(2, 0x100, 0x200, 30).  // moves: stack 1 freed, stack 2 owns 30
		realloc(3, 0x200, 0x200, 40).  // in place: now stack 3's
		realloc(4, 0, 0x300, 8).       // realloc(NULL, 8)
		realloc(5, 0x300, 0, 0).       // realloc(p, 0): frees
		realloc(6, 0x200, 0, 1000).    // fails: 0x200 stays live
		realloc(7, 0xdead, 0x400, 16). // old block unknown: unmatched, new one live
		free(0x400)
	p := run(t, Options{}, &s)
	if p.Summary.Allocations != 1 || p.Summary.Reallocations != 6 || p.Summary.Failed != 1 {
		t.Errorf("summary %+v", p.Summary)
	}
	if p.Summary.LiveBytes != 40 || p.Summary.LiveBlocks != 1 {
		t.Errorf("leaked %d/%d, want 40/1", p.Summary.LiveBytes, p.Summary.LiveBlocks)
	}
	if p.Summary.UnmatchedFrees != 1 {
		t.Errorf("unmatched %d, want 1", p.Summary.UnmatchedFrees)
	}
	if p.Summary.Bytes != 10+30+40+8+16 {
		t.Errorf("bytes allocated %d", p.Summary.Bytes)
	}
	s1, s2, s3 := stackOf(t, p, 1, 1), stackOf(t, p, 1, 2), stackOf(t, p, 1, 3)
	if s1.Frees != 1 || s1.FreedBytes != 10 || s1.LiveBlocks != 0 {
		t.Errorf("stack 1 %+v", s1)
	}
	if s2.Reallocations != 1 || s2.Bytes != 30 || s2.Frees != 1 || s2.LiveBytes != 0 {
		t.Errorf("stack 2 %+v", s2)
	}
	if s3.LiveBytes != 40 || s3.LiveBlocks != 1 {
		t.Errorf("stack 3 %+v", s3)
	}
	if s6 := stackOf(t, p, 1, 6); s6.Failed != 1 || s6.Bytes != 0 || s6.LiveBlocks != 0 {
		t.Errorf("stack 6 %+v", s6)
	}
	// The peak never counts a moving block twice: 10, 30, 40, 48 with
	// the realloc(NULL) block, 40 again, then 56 with 0x400.
	if want := (Peak{Time: 70, Bytes: 56, Blocks: 2}); p.Peak != want {
		t.Errorf("peak %+v, want %+v", p.Peak, want)
	}
	// malloc then an immediate realloc of it: heaptrack calls the malloc
	// temporary (a realloc is a free and an allocation).
	if s1.Temporary != 1 {
		t.Errorf("stack 1 temporaries %d, want 1", s1.Temporary)
	}
	for _, st := range p.Stacks {
		if st.Bytes-st.FreedBytes != st.LiveBytes {
			t.Errorf("stack %d: bytes %d - freed %d != live %d", st.ID, st.Bytes, st.FreedBytes, st.LiveBytes)
		}
	}
}

func TestUnmatchedAndNullFrees(t *testing.T) {
	var s seq
	s.free(0x999).free(0).alloc(1, 0x10, 5).free(0x10).free(0x10)
	p := run(t, Options{}, &s)
	if p.Summary.UnmatchedFrees != 2 || p.Summary.Frees != 1 {
		t.Errorf("unmatched %d frees %d, want 2 and 1", p.Summary.UnmatchedFrees, p.Summary.Frees)
	}
	if p.Summary.Events != 5 {
		t.Errorf("events %d, want 5", p.Summary.Events)
	}
}

func TestFailedAllocations(t *testing.T) {
	var s seq
	s.alloc(1, 0, 1<<40).alloc(1, 0x10, 8)
	p := run(t, Options{}, &s)
	st := stackOf(t, p, 1, 1)
	if st.Allocations != 2 || st.Failed != 1 || st.LiveBlocks != 1 || st.LiveBytes != 8 || st.Bytes != 8 {
		t.Errorf("stack %+v", st)
	}
	if p.Peak.Bytes != 8 {
		t.Errorf("peak %+v", p.Peak)
	}
}

func TestTemporaries(t *testing.T) {
	var s seq
	s.add(event.Event{TID: 1, Kind: event.KindAlloc, Stack: 1, Addr: 0xa, Size: 1}).
		add(event.Event{TID: 1, Kind: event.KindFree, Addr: 0xa}). // temporary
		add(event.Event{TID: 1, Kind: event.KindAlloc, Stack: 2, Addr: 0xb, Size: 1}).
		add(event.Event{TID: 1, Kind: event.KindAlloc, Stack: 3, Addr: 0xc, Size: 1}).
		add(event.Event{TID: 1, Kind: event.KindFree, Addr: 0xb}). // not: 0xc came between
		add(event.Event{TID: 1, Kind: event.KindFree, Addr: 0xc}). // not: a free came between
		add(event.Event{TID: 1, Kind: event.KindAlloc, Stack: 4, Addr: 0xd, Size: 1}).
		add(event.Event{TID: 2, Kind: event.KindAlloc, Stack: 5, Addr: 0xe, Size: 1}).
		add(event.Event{TID: 1, Kind: event.KindFree, Addr: 0xd}). // temporary: other threads do not count
		add(event.Event{TID: 1, Kind: event.KindAlloc, Stack: 6, Addr: 0xf, Size: 1}).
		add(event.Event{TID: 2, Kind: event.KindFree, Addr: 0xf}). // not: freed by another thread
		add(event.Event{TID: 2, Kind: event.KindFree, Addr: 0xe})  // not: a free came between
	p := run(t, Options{}, &s)
	want := map[event.StackID]uint64{1: 1, 2: 0, 3: 0, 4: 1, 5: 0, 6: 0}
	for id, n := range want {
		if got := stackOf(t, p, 1, id).Temporary; got != n {
			t.Errorf("stack %d: %d temporaries, want %d", id, got, n)
		}
	}
	if p.Summary.Temporary != 2 {
		t.Errorf("summary temporaries %d, want 2", p.Summary.Temporary)
	}
}

func TestProcessesKeepSeparateAddresses(t *testing.T) {
	var s seq
	s.add(event.Event{PID: 1, Kind: event.KindAlloc, Stack: 1, Addr: 0x10, Size: 4}).
		add(event.Event{PID: 2, Kind: event.KindAlloc, Stack: 1, Addr: 0x10, Size: 6}).
		add(event.Event{PID: 1, Kind: event.KindFree, Addr: 0x10}).
		add(event.Event{PID: 3, Kind: event.KindFree, Addr: 0x10}) // not pid 2's block
	p := run(t, Options{}, &s)
	if p.Summary.LiveBytes != 6 || p.Summary.UnmatchedFrees != 1 || p.Summary.MissedFrees != 0 {
		t.Errorf("summary %+v", p.Summary)
	}
	if st := stackOf(t, p, 2, 1); st.LiveBytes != 6 {
		t.Errorf("pid 2 stack %+v", st)
	}
	if len(p.Processes) != 3 {
		t.Errorf("processes %+v", p.Processes)
	}
}

func TestMissedFree(t *testing.T) {
	// A second allocation at a live address means the free was lost.
	var s seq
	s.alloc(1, 0x10, 4).alloc(2, 0x10, 6)
	p := run(t, Options{}, &s)
	if p.Summary.MissedFrees != 1 || p.Summary.LiveBytes != 6 || p.Summary.LiveBlocks != 1 {
		t.Errorf("summary %+v", p.Summary)
	}
}

func TestWideKeys(t *testing.T) {
	// Addresses above 2^48 (5-level paging) take the slow path and still work.
	var s seq
	s.alloc(1, 1<<50, 7).alloc(1, 0x10, 1).free(1 << 50)
	p := run(t, Options{}, &s)
	if p.Summary.LiveBytes != 1 || p.Summary.UnmatchedFrees != 0 {
		t.Errorf("summary %+v", p.Summary)
	}
}

func TestHistogram(t *testing.T) {
	var s seq
	for i, size := range []uint64{0, 1, 2, 3, 4, 5, 1024, 1025} {
		s.alloc(1, uint64(0x100+i*0x10), size)
	}
	p := run(t, Options{}, &s)
	want := map[uint64]uint64{1: 2, 2: 1, 4: 2, 8: 1, 1024: 1, 2048: 1}
	var total uint64
	for i, b := range p.Histogram {
		if b.Le != 1<<i {
			t.Errorf("bucket %d has le %d", i, b.Le)
		}
		if b.Count != want[b.Le] {
			t.Errorf("le %d: %d, want %d", b.Le, b.Count, want[b.Le])
		}
		total += b.Count
	}
	if total != 8 || p.Histogram[len(p.Histogram)-1].Le != 2048 {
		t.Errorf("histogram %+v", p.Histogram)
	}
}

func TestWindow(t *testing.T) {
	var s seq
	s.alloc(1, 0x10, 100). // t=10: before the window
				alloc(1, 0x20, 1000). // t=20: before
				free(0x10).           // t=30: inside: unmatched (allocated before From)
				alloc(2, 0x30, 50).   // t=40
				alloc(2, 0x40, 60).   // t=50: the window's peak, 110
				free(0x30).           // t=60
				alloc(3, 0x50, 5000). // t=70: at To, outside
				free(0x40)            // t=80: outside
	p := run(t, Options{From: 30, To: 70}, &s)
	if p.Summary.UnmatchedFrees != 1 || p.Summary.Allocations != 2 || p.Summary.Events != 4 {
		t.Errorf("summary %+v", p.Summary)
	}
	if want := (Peak{Time: 50, Bytes: 110, Blocks: 2}); p.Peak != want {
		t.Errorf("peak %+v, want %+v", p.Peak, want)
	}
	if p.Summary.LiveBytes != 60 || p.Summary.LiveBlocks != 1 {
		t.Errorf("live at To %d/%d, want 60/1", p.Summary.LiveBytes, p.Summary.LiveBlocks)
	}
	if p.Start != 30 || p.End != 60 || p.From != 30 || p.To != 70 {
		t.Errorf("start %d end %d from %d to %d", p.Start, p.End, p.From, p.To)
	}
	for _, st := range p.Stacks {
		if st.ID == 3 {
			t.Errorf("stack 3 only allocated after To: %+v", st)
		}
	}
}

func TestStackFramesAndMetadata(t *testing.T) {
	m := New(Options{})
	frames := []uint64{0x401000, 0x402000}
	must(t, m.Process(event.Process{PID: 7, PPID: 1, Time: 5, Exe: "/bin/x", Cmdline: []string{"x", "-y"}}))
	must(t, m.Module(event.Module{PID: 7, Start: 0x400000, End: 0x500000, Path: "/bin/x"}))
	must(t, m.Stack(event.Stack{PID: 7, ID: 3, Frames: frames}))
	frames[0] = 0 // the caller may reuse its buffer
	must(t, m.Stack(event.Stack{PID: 7, ID: 1 << 30, Frames: []uint64{0x403000}}))
	must(t, m.Events([]event.Event{
		{Time: 10, PID: 7, TID: 7, Kind: event.KindAlloc, Stack: 3, Addr: 0x10, Size: 1},
		{Time: 11, PID: 7, TID: 7, Kind: event.KindAlloc, Stack: 1 << 30, Addr: 0x20, Size: 1},
		{Time: 12, PID: 7, TID: 7, Kind: event.KindAlloc, Stack: 0, Addr: 0x30, Size: 1},
	}))
	must(t, m.Exit(event.Exit{PID: 7, Time: 20, Status: 3}))
	must(t, m.Stats(event.Stats{Time: 20, Delivered: 3, Lost: [event.NumLostReasons]uint64{1, 2}}))
	must(t, m.Stats(event.Stats{Time: 21, Delivered: 4, Lost: [event.NumLostReasons]uint64{1, 3}}))
	p := m.Profile()
	if st := stackOf(t, p, 7, 3); len(st.Frames) != 2 || st.Frames[0] != 0x401000 {
		t.Errorf("frames %x", st.Frames)
	}
	if st := stackOf(t, p, 7, 1<<30); len(st.Frames) != 1 || st.Frames[0] != 0x403000 {
		t.Errorf("frames of a large id %x", st.Frames)
	}
	if st := stackOf(t, p, 7, 0); st.Frames != nil || st.LiveBytes != 1 {
		t.Errorf("no-stack site %+v", st)
	}
	if len(p.Processes) != 1 || p.Processes[0].Exe != "/bin/x" || !p.Processes[0].Exited || p.Processes[0].Exit.Status != 3 {
		t.Errorf("processes %+v", p.Processes)
	}
	if !p.HasStats || p.Stats.Delivered != 4 || p.Stats.TotalLost() != 4 {
		t.Errorf("stats %+v", p.Stats)
	}
	if len(p.Modules) != 1 || p.Start != 5 || p.End != 20 {
		t.Errorf("modules %d start %d end %d", len(p.Modules), p.Start, p.End)
	}
	if p.Missing != 0 || p.Aggregate {
		t.Errorf("missing %v", p.Missing)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestTimelineBounded(t *testing.T) {
	var s seq
	rng := rand.New(rand.NewSource(1))
	var live []uint64
	next := uint64(0x1000)
	for i := 0; i < 200000; i++ {
		if len(live) > 0 && rng.Intn(100) < 45 {
			j := rng.Intn(len(live))
			s.free(live[j])
			live[j] = live[len(live)-1]
			live = live[:len(live)-1]
			continue
		}
		s.alloc(event.StackID(1+rng.Intn(5)), next, uint64(1+rng.Intn(4096)))
		live = append(live, next)
		next += 0x10
	}
	for _, max := range []int{2, 3, 64, 512} {
		p := run(t, Options{TimelinePoints: max}, &s)
		if len(p.Timeline) > max || len(p.Timeline) < 2 {
			t.Fatalf("max %d: %d points", max, len(p.Timeline))
		}
		var top uint64
		for i, pt := range p.Timeline {
			if i > 0 && pt.Time <= p.Timeline[i-1].Time {
				t.Errorf("max %d: time goes back at point %d", max, i)
			}
			top = maxu(top, pt.Bytes)
		}
		last := p.Timeline[len(p.Timeline)-1]
		if last.Time != p.End || last.Bytes != p.Summary.LiveBytes || last.Blocks != p.Summary.LiveBlocks {
			t.Errorf("max %d: last point %+v, want the end state", max, last)
		}
		if max > 2 && top != p.Peak.Bytes {
			t.Errorf("max %d: timeline tops at %d, peak is %d", max, top, p.Peak.Bytes)
		}
	}
}

// TestMappingRanges: mappings are ranges, split and trimmed as the kernel
// does: an aligned mapping (map twice, trim both ends), a hole punched in
// the middle, a MAP_FIXED mapping over part of a live one, an munmap across
// several mappings, mremap of part of one, and an munmap of pages never
// mapped (unmatched).
func TestMappingRanges(t *testing.T) {
	const pg = 0x1000
	mmap := func(stack event.StackID, addr, size uint64) event.Event {
		return event.Event{Kind: event.KindMmap, Func: event.FuncMmap, Heap: event.HeapMmap, Stack: stack, Addr: addr, Size: size}
	}
	munmap := func(addr, size uint64) event.Event {
		return event.Event{Kind: event.KindMunmap, Func: event.FuncMunmap, Heap: event.HeapMmap, Addr: addr, Size: size}
	}
	mremap := func(stack event.StackID, old, oldSize, addr, size uint64) event.Event {
		return event.Event{Kind: event.KindRealloc, Func: event.FuncMremap, Heap: event.HeapMmap, Stack: stack,
			OldAddr: old, OldSize: oldSize, Addr: addr, Size: size}
	}
	for _, c := range []struct {
		name             string
		evs              []event.Event
		leaked, blocks   uint64
		unmatched, frees uint64
		byStack          map[event.StackID]uint64 // live bytes
	}{
		{"aligned", []event.Event{mmap(1, 0x100000, 32*pg), munmap(0x100000, 5*pg), munmap(0x100000+21*pg, 11*pg)},
			16 * pg, 1, 0, 0, map[event.StackID]uint64{1: 16 * pg}},
		{"middle", []event.Event{mmap(1, 0x100000, 8*pg), munmap(0x100000+2*pg, 3*pg)},
			5 * pg, 1, 0, 0, nil},
		{"middle then the rest", []event.Event{mmap(1, 0x100000, 8*pg), munmap(0x100000+2*pg, 3*pg),
			munmap(0x100000, 2*pg), munmap(0x100000+5*pg, 3*pg)},
			0, 0, 0, 1, nil},
		{"fixed overlay", []event.Event{mmap(1, 0x100000, 8*pg), mmap(2, 0x100000+2*pg, 2*pg)},
			8 * pg, 2, 0, 0, map[event.StackID]uint64{1: 6 * pg, 2: 2 * pg}},
		{"fixed over all", []event.Event{mmap(1, 0x100000, 2*pg), mmap(1, 0x100000+2*pg, 2*pg), mmap(2, 0x100000, 4*pg)},
			4 * pg, 1, 0, 2, map[event.StackID]uint64{1: 0, 2: 4 * pg}},
		{"across mappings", []event.Event{mmap(1, 0x100000, 4*pg), mmap(2, 0x100000+4*pg, 4*pg), munmap(0x100000+3*pg, 2*pg)},
			6 * pg, 2, 0, 0, map[event.StackID]uint64{1: 3 * pg, 2: 3 * pg}},
		{"mremap part", []event.Event{mmap(1, 0x100000, 8*pg), mremap(2, 0x100000+6*pg, 2*pg, 0x900000, 4*pg)},
			10 * pg, 2, 0, 0, map[event.StackID]uint64{1: 6 * pg, 2: 4 * pg}},
		{"mremap grow in place", []event.Event{mmap(1, 0x100000, 2*pg), mremap(2, 0x100000, 2*pg, 0x100000, 6*pg)},
			6 * pg, 1, 0, 1, map[event.StackID]uint64{1: 0, 2: 6 * pg}},
		{"never mapped", []event.Event{mmap(1, 0x100000, 2*pg), munmap(0x200000, pg)},
			2 * pg, 1, 1, 0, nil},
	} {
		var s seq
		for _, e := range c.evs {
			s.add(e)
		}
		p := run(t, Options{}, &s)
		sum := p.Summary
		if sum.LiveBytes != c.leaked || sum.LiveBlocks != c.blocks || sum.UnmatchedFrees != c.unmatched || sum.Frees != c.frees {
			t.Errorf("%s: leaked %d B in %d blocks, %d unmatched, %d frees; want %d B in %d, %d, %d", c.name,
				sum.LiveBytes, sum.LiveBlocks, sum.UnmatchedFrees, sum.Frees, c.leaked, c.blocks, c.unmatched, c.frees)
		}
		for id, want := range c.byStack {
			for _, st := range p.Stacks {
				if st.ID == id && st.LiveBytes != want {
					t.Errorf("%s: stack %d: %d B live, want %d", c.name, id, st.LiveBytes, want)
				}
			}
		}
	}
}

func maxu(a, b uint64) uint64 {
	if a > b {
		return a
	}
	return b
}

func TestMunmap(t *testing.T) {
	var s seq
	s.add(event.Event{Kind: event.KindMmap, Func: event.FuncMmap, Heap: event.HeapMmap, Stack: 1, Addr: 0x10000, Size: 0x3000}).
		add(event.Event{Kind: event.KindMunmap, Func: event.FuncMunmap, Heap: event.HeapMmap, Addr: 0x10000, Size: 0x1000}).
		add(event.Event{Kind: event.KindMunmap, Func: event.FuncMunmap, Heap: event.HeapMmap, Addr: 0x12000, Size: 0x1000}). // the tail
		add(event.Event{Kind: event.KindMunmap, Func: event.FuncMunmap, Heap: event.HeapMmap, Addr: 0x11000, Size: 0x2000})  // the rest, and gone pages
	p := run(t, Options{}, &s)
	if p.Summary.LiveBytes != 0 || p.Summary.LiveBlocks != 0 || p.Summary.UnmatchedFrees != 0 || p.Summary.Frees != 1 || p.Peak.Bytes != 0x3000 {
		t.Errorf("summary %+v peak %+v", p.Summary, p.Peak)
	}
}

// TestExitLeavesTheHeap: a process's blocks still live when it exits stay
// its leaks, but the heap over time and the peak count them only until
// then (a compiler driver: cc1plus exits with 8 MiB live, then as
// allocates 6: the peak is 8, not 14). A program an exec starts under the
// same PID finds none of the old blocks at their addresses.
func TestExitLeavesTheHeap(t *testing.T) {
	m := New(Options{})
	var a, b seq
	a.add(event.Event{PID: 1, Kind: event.KindAlloc, Stack: 1, Addr: 0x1000, Size: 8 << 20, Time: 10})
	a.add(event.Event{PID: 1, Kind: event.KindAlloc, Stack: 2, Addr: 0x2000, Size: 100, Time: 20})
	a.add(event.Event{PID: 1, Kind: event.KindFree, Addr: 0x2000, Time: 30})
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(m.Events(a.evs))
	must(m.Exit(event.Exit{PID: 1, Time: 40}))
	must(m.Exit(event.Exit{PID: 1, Time: 40})) // restated: changes nothing
	b.add(event.Event{PID: 2, Kind: event.KindAlloc, Stack: 1, Addr: 0x1000, Size: 6 << 20, Time: 50})
	// The program PID 1 execs: its block at the old one's address.
	b.add(event.Event{PID: 1, Kind: event.KindAlloc, Stack: 3, Addr: 0x1000, Size: 1 << 20, Time: 60})
	b.add(event.Event{PID: 1, Kind: event.KindFree, Addr: 0x1000, Time: 70})
	must(m.Events(b.evs))
	p := m.Profile()
	if want := (Peak{Time: 20, Bytes: 8<<20 + 100, Blocks: 2}); p.Peak != want {
		t.Errorf("peak %+v, want %+v", p.Peak, want)
	}
	if p.Summary.MissedFrees != 0 || p.Summary.UnmatchedFrees != 0 {
		t.Errorf("missed %d, unmatched %d frees: the exec'd program met the old blocks", p.Summary.MissedFrees, p.Summary.UnmatchedFrees)
	}
	old := stackOf(t, p, 1, 1)
	if old.LiveBytes != 8<<20 || old.ExitedBytes != 8<<20 || old.ExitedBlocks != 1 || old.PeakBytes != 8<<20 {
		t.Errorf("the exited process's block: %+v, want leaked, exited, live at the peak", old)
	}
	if s := stackOf(t, p, 2, 1); s.PeakBytes != 0 || s.LiveBytes != 6<<20 || s.ExitedBytes != 0 {
		t.Errorf("the later process's block: %+v", s)
	}
	if p.Summary.LiveBytes != 14<<20 {
		t.Errorf("leaked %d, want both processes' blocks", p.Summary.LiveBytes)
	}
	var max uint64
	for _, pt := range p.Timeline {
		max = maxu(max, pt.Bytes)
	}
	if last := p.Timeline[len(p.Timeline)-1]; max != 8<<20+100 || last.Bytes != 6<<20 {
		t.Errorf("timeline max %d, last %+v; want 8 MiB, then 6 MiB in the heap at the end", max, last)
	}
	// The peak moves to the later process when it allocates more.
	must(m.Events([]event.Event{{PID: 2, TID: 2, Kind: event.KindAlloc, Stack: 4, Addr: 0x9000, Size: 3 << 20, Time: 80}}))
	p = m.Profile()
	if want := (Peak{Time: 80, Bytes: 9 << 20, Blocks: 2}); p.Peak != want {
		t.Errorf("peak %+v, want %+v", p.Peak, want)
	}
	if old := stackOf(t, p, 1, 1); old.PeakBytes != 0 {
		t.Errorf("the exited process's block at the later peak: %d bytes", old.PeakBytes)
	}
}
