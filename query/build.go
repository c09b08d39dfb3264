package query

import (
	"math"
	"math/bits"

	"github.com/heapscope/heapscope/analyze"
	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/internal/blocks"
)

// maxDenseID bounds the stack IDs kept in a slice; larger ones go to a map.
const maxDenseID = 1 << 22

// bproc is the builder's state for one process.
type bproc struct {
	pid    uint32
	live   blocks.Table[liveRef] // address → the live block there
	ids    []int32               // StackID → stack index + 1, for small IDs
	idm    map[event.StackID]int32
	lastTK uint64 // the thread of the last event, and its last allocation
	last   *uint64
	// exits counts the process's exits, the latest at exitTime.
	exits    int
	exitTime int64
}

// builder is the event.Sink that fills an Index. It applies the events with
// the heap model's rules (see package analyze): the same blocks are live
// after each event, the same frees are counted, the same allocations are
// temporary.
type builder struct {
	x *Index
	// rate is the trace's sampling rate (0: exact): each row then weighs
	// what the heap model counts it (analyze.SampledBlock), its bytes in
	// its size and its objects in Index.weights.
	rate     int64
	made     uint32 // objects the current event made, and ended
	ended    uint32
	procs    map[uint32]*bproc
	lastProc *bproc
	last     map[uint64]*uint64 // pid<<32|tid → the address its last heap event allocated, or 0
	tooLarge bool

	liveBytes  uint64
	liveBlocks uint32 // objects, in a sampled trace
	// times are the current group's events' times, until it is known
	// whether they fit offsets from its first.
	times [groupLen]int64

	// threads numbers the threads of the rows (see Index.threads);
	// lastTID was numbered lastThread (a map lookup a row is not free).
	threads    map[uint32]uint16
	lastTID    uint32
	lastThread int32 // -1: none
	// known is how many stacks were seeded (see seed); unknown is the
	// first stack past them that a row used (-1: none).
	known, unknown int
}

func newBuilder(rate int64) *builder {
	// Its columns are complete when the builder's events end: ready.
	x := &Index{ready: make(chan struct{})}
	close(x.ready)
	a := newArena(x)
	x.rows.arena, x.ends.arena, x.weights.arena = a, a, a
	x.evs.x = x
	return &builder{x: x, rate: max(rate, 0), procs: map[uint32]*bproc{}, last: map[uint64]*uint64{}, threads: map[uint32]uint16{}, lastThread: -1, unknown: -1}
}

var _ event.Sink = (*builder)(nil)

func (b *builder) Process(event.Process) error   { return nil }
func (b *builder) Module(event.Module) error     { return nil }
func (b *builder) Snapshot(event.Snapshot) error { return nil }
func (b *builder) Stats(event.Stats) error       { return nil }

func (b *builder) proc(pid uint32) *bproc {
	if p := b.lastProc; p != nil && p.pid == pid {
		return p
	}
	p := b.procs[pid]
	if p == nil {
		p = &bproc{pid: pid}
		b.procs[pid] = p
	}
	b.lastProc = p
	return p
}

// stackIndex returns the index of stack id of p, adding it.
func (b *builder) stackIndex(p *bproc, id event.StackID) int32 {
	if int(id) < len(p.ids) {
		if i := p.ids[id]; i != 0 {
			return i - 1
		}
	} else if id >= maxDenseID {
		if i, ok := p.idm[id]; ok {
			return i - 1
		}
	}
	x := b.x
	i := int32(len(x.stacks))
	x.stacks = append(x.stacks, stackRef{pid: p.pid, id: id})
	b.seed(p.pid, id, i)
	return i
}

// seed numbers stack id of process pid i, as the report's profile does;
// b.x.stacks[i] must be it.
func (b *builder) seed(pid uint32, id event.StackID, i int32) {
	p := b.proc(pid)
	if id < maxDenseID {
		if int(id) >= len(p.ids) {
			n := max(2*len(p.ids), int(id)+1, 4)
			p.ids = append(p.ids, make([]int32, n-len(p.ids))...)
		}
		p.ids[id] = i + 1
		return
	}
	if p.idm == nil {
		p.idm = map[event.StackID]int32{}
	}
	p.idm[id] = i + 1
}

func (b *builder) Stack(st event.Stack) error {
	i := b.stackIndex(b.proc(st.PID), st.ID)
	if b.x.stacks[i].frames == nil {
		// A stack the report's profile left out (it made nothing).
		b.x.stacks[i].frames = append([]uint64(nil), st.Frames...)
	}
	return nil
}

// liveRef is a live block: its row, and what ending it needs of the row,
// kept here so that a free does not read the row back (a cache miss per
// free, on 11 M rows).
type liveRef struct {
	row  uint32
	tid  uint32 // in a sampled trace (no temporaries), its objects
	size uint64 // bytes, as counted
	t    int64  // when it was made
}

// objects is what l counts in live blocks.
func (b *builder) objects(l liveRef) uint32 {
	if b.rate > 0 {
		return l.tid
	}
	return 1
}

// dt returns time t of the current event less its group's base time; a
// time that does not fit makes the group's times whole.
func (b *builder) dt(t int64) uint32 {
	c := &b.x.evs
	g := len(c.groups) - 1
	d := t - c.groups[g].base
	if d >= 0 && d < noSpan {
		return uint32(d)
	}
	if c.wide[int32(g)] == nil {
		if c.wide == nil {
			c.wide = map[int32][]int64{}
		}
		w := make([]int64, groupLen)
		copy(w, b.times[:c.n&groupMask])
		c.wide[int32(g)] = w
		c.groups[g].span = noSpan
	}
	return 0
}

// thread returns the index of thread tid for row i.
func (b *builder) thread(i, tid uint32) uint16 {
	x := b.x
	if b.lastThread >= 0 && b.lastTID == tid {
		return uint16(b.lastThread)
	}
	if k, ok := b.threads[tid]; ok {
		b.lastTID, b.lastThread = tid, int32(k)
		return k
	}
	if len(x.threads) < manyThreads {
		k := uint16(len(x.threads))
		x.threads = append(x.threads, tid)
		b.threads[tid] = k
		b.lastTID, b.lastThread = tid, int32(k)
		return k
	}
	if x.bigThread == nil {
		x.bigThread = map[uint32]uint32{}
	}
	x.bigThread[i] = tid
	return manyThreads
}

// row appends a row made by the event numbered seq at time t and returns
// its index. In a sampled trace w is its weight.
func (b *builder) row(seq uint32, t int64, stack int32, tid uint32, size uint64, flags uint8, w weight) uint32 {
	x := b.x
	if b.rate > 0 {
		*x.weights.add() = w
	}
	if int(stack) >= b.known && b.unknown < 0 {
		b.unknown = int(stack)
	}
	i := uint32(x.rows.len())
	r := x.rows.add()
	r.alloc, r.end = seq, never
	r.at = b.dt(t)
	if flags&fNoBlock != 0 {
		r.end, r.life = seq, 1
		r.et = r.at
	}
	if size > math.MaxUint32 {
		if x.big == nil {
			x.big = map[uint32]uint64{}
		}
		x.big[i] = size
		flags |= fBig
	} else {
		r.size = uint32(size)
	}
	r.stack = stack
	r.thread = b.thread(i, tid)
	r.flags = flags
	return i
}

// alloc makes a live block; a live block at the same address lost its free.
func (b *builder) alloc(seq uint32, kind *uint8, p *bproc, e *event.Event, flags uint8) {
	if old, ok := p.live.Get(e.Addr); ok {
		b.end(seq, e.Time, kind, old, b.replacedFlag(old))
	}
	size, n, w := e.Size, uint32(1), weight{n: 1}
	tid := e.TID
	if b.rate > 0 {
		size, n = analyze.SampledBlock(e.Size, e.Addr, e.Time, b.rate)
		w = weight{n: n, bucket: uint8(sizeBucket(e.Size))}
		tid = n
	}
	r := b.row(seq, e.Time, b.stackIndex(p, e.Stack), e.TID, size, flags, w)
	p.live.Put(e.Addr, liveRef{row: r, tid: tid, size: size, t: e.Time})
	b.liveBytes += size
	b.liveBlocks += n
	b.made += n
	*kind |= evMade
}

// end ends block l at seq, time now, with the given flags (fFreed, fTemp,
// fMissed).
func (b *builder) end(seq uint32, now int64, kind *uint8, l liveRef, flags uint8) {
	row := b.x.rows.at(int(l.row))
	row.end = seq
	row.et = b.dt(now)
	*b.x.ends.add() = l.row
	row.life = uint8(min(bits.Len64(uint64(now-l.t)), 63)) + 1
	row.flags |= flags
	b.liveBytes -= l.size
	n := b.objects(l)
	b.liveBlocks -= n
	b.ended += n
	*kind |= evEnded
}

// free frees addr, as the model does: counted on the block's row, temporary
// when it is the thread's last allocation.
func (b *builder) free(seq uint32, kind *uint8, p *bproc, e *event.Event, addr uint64, last uint64) {
	l, ok := p.live.Delete(addr)
	if !ok {
		b.x.unmatched = append(b.x.unmatched, seq)
		b.x.unmatchedDT = append(b.x.unmatchedDT, b.dt(e.Time))
		return
	}
	fl := uint8(fFreed)
	if last == addr && l.tid == e.TID && b.rate == 0 {
		fl |= fTemp
	}
	b.end(seq, e.Time, kind, l, fl)
}

func (b *builder) Events(evs []event.Event) error {
	x := b.x
	for i := range evs {
		e := &evs[i]
		switch e.Kind {
		case event.KindAlloc, event.KindMmap, event.KindRealloc, event.KindMunmap:
		case event.KindFree:
			if e.Addr == 0 {
				continue // free(NULL) does nothing
			}
		default:
			continue
		}
		if x.evs.len() >= maxEvents {
			b.tooLarge = true
			return ErrTooLarge
		}
		seq := uint32(x.evs.len())
		b.startEvent(e.Time)
		var kind uint8
		p := b.proc(e.PID)
		tk := uint64(e.PID)<<32 | uint64(e.TID)
		if p.last == nil || p.lastTK != tk {
			l := b.last[tk]
			if l == nil {
				l = new(uint64)
				b.last[tk] = l
			}
			p.lastTK, p.last = tk, l
		}
		last := p.last
		switch e.Kind {
		case event.KindAlloc, event.KindMmap:
			if e.Addr == 0 {
				b.row(seq, e.Time, b.stackIndex(p, e.Stack), e.TID, 0, fFailed|fNoBlock, weight{n: 1})
				*last = 0
				break
			}
			b.alloc(seq, &kind, p, e, 0)
			*last = e.Addr
		case event.KindFree:
			b.free(seq, &kind, p, e, e.Addr, *last)
			*last = 0
		case event.KindRealloc:
			if e.Addr == 0 && (e.Size != 0 || e.OldAddr == 0) {
				b.row(seq, e.Time, b.stackIndex(p, e.Stack), e.TID, 0, fRealloc|fFailed|fNoBlock, weight{n: 1})
				*last = 0
				break
			}
			if e.OldAddr != 0 {
				b.free(seq, &kind, p, e, e.OldAddr, *last)
			}
			if e.Addr != 0 {
				b.alloc(seq, &kind, p, e, fRealloc)
			} else {
				b.row(seq, e.Time, b.stackIndex(p, e.Stack), e.TID, 0, fRealloc|fNoBlock, weight{n: 1})
			}
			*last = e.Addr
		case event.KindMunmap:
			if b.rate > 0 {
				// A sampled block goes whole, as the model takes it.
				b.free(seq, &kind, p, e, e.Addr, 0)
			} else {
				b.unmap(seq, &kind, p, e, *last)
			}
			*last = 0
		}
		b.endEvent(e.Time, kind)
	}
	return nil
}

// startEvent opens a group for the event about to be numbered, when it is
// the first of one.
func (b *builder) startEvent(t int64) {
	c := &b.x.evs
	if c.n&groupMask == 0 {
		c.groups = append(c.groups, group{base: t, live: b.liveBytes, blocks: b.liveBlocks})
	}
}

// endEvent adds the event just applied to its group's summary.
func (b *builder) endEvent(t int64, kind uint8) {
	c := &b.x.evs
	g := len(c.groups) - 1
	gr := &c.groups[g]
	off := c.n & groupMask
	b.times[off] = t
	if gr.span != noSpan {
		if d := t - gr.base; d >= 0 && d < noSpan {
			gr.span = max(gr.span, uint32(d))
		} else {
			b.dt(t) // makes the group wide
		}
	}
	if w := c.wide[int32(g)]; w != nil {
		w[off] = t
	}
	if off == 0 || b.liveBytes > gr.peak {
		gr.peak, gr.peakBlocks, gr.peakOff = b.liveBytes, b.liveBlocks, uint16(off)
	}
	gr.made += b.made
	gr.ended += b.ended
	b.made, b.ended = 0, 0
	c.n++
	c.endLive, c.endBlocks = b.liveBytes, b.liveBlocks
}

// unmap removes [Addr, Addr+Size) from the mapping that starts at Addr. A
// partial unmap from the start ends the block's row and starts a row for
// the rest (fCont: not a call, no bytes allocated), at the address after
// the cut, as the model moves the block.
func (b *builder) unmap(seq uint32, kind *uint8, p *bproc, e *event.Event, last uint64) {
	l, ok := p.live.Get(e.Addr)
	if !ok {
		b.x.unmatched = append(b.x.unmatched, seq)
		b.x.unmatchedDT = append(b.x.unmatchedDT, b.dt(e.Time))
		return
	}
	if e.Size == 0 || e.Size >= l.size {
		b.free(seq, kind, p, e, e.Addr, last)
		return
	}
	old := *b.x.rows.at(int(l.row))
	p.live.Delete(e.Addr)
	b.end(seq, e.Time, kind, l, 0)
	size := l.size - e.Size
	n := b.row(seq, e.Time, old.stack, l.tid, size, fCont|old.flags&fRealloc, weight{n: 1})
	if rest := e.Addr + e.Size; rest != 0 {
		// (Only a corrupt trace wraps around to 0: the rest is unknown.)
		p.live.Put(rest, liveRef{row: n, tid: l.tid, size: size, t: e.Time})
	}
	b.liveBytes += size
	b.liveBlocks++
}

// Exit ends the blocks the process has live, as the heap model does (see
// analyze.Model.Exit): they leave the heap at the exit, which is an event
// of the index of its own (listed in Index.exits), and stay leaks: their
// rows end there with no lifetime (rowRec.exited), neither freed nor
// counted as ended in the rates. A program an exec starts under the PID
// starts with no live block.
func (b *builder) Exit(x event.Exit) error {
	p := b.procs[x.PID]
	if p == nil || p.exits > 0 && x.Time <= p.exitTime {
		return nil // nothing of it, or an exit restated
	}
	p.exits++
	p.exitTime = x.Time
	if p.live.Len() == 0 {
		return nil
	}
	if b.x.evs.len() >= maxEvents {
		b.tooLarge = true
		return ErrTooLarge
	}
	seq := uint32(b.x.evs.len())
	b.startEvent(x.Time)
	var kind uint8
	for _, l := range p.live.All() {
		b.end(seq, x.Time, &kind, l, 0)
		b.x.rows.at(int(l.row)).life = 0
	}
	p.live = blocks.Table[liveRef]{}
	b.x.exits = append(b.x.exits, seq)
	b.ended = 0 // an exit frees nothing: no rate
	b.endEvent(x.Time, 0)
	return nil
}

// finish returns the index, its columns complete.
func (b *builder) finish() *Index {
	b.x.summarizeRows()
	return b.x
}
