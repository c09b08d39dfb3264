package query

import (
	"github.com/heapscope/heapscope/event"
)

type stackKey struct {
	pid uint32
	id  event.StackID
}

type blockKey struct {
	pid  uint32
	addr uint64
}

// builder is the event.Sink that fills an Index. It applies the events with
// the heap model's rules (see package analyze): the same blocks are live
// after each event, the same frees are counted, the same allocations are
// temporary.
type builder struct {
	x        *Index
	stackIdx map[stackKey]int32
	live     map[blockKey]int32 // the row of each live block
	last     map[uint64]uint64  // pid<<32|tid → the address its last heap event allocated, or 0

	liveBytes, liveBlocks uint64
}

func newBuilder() *builder {
	return &builder{
		x:        &Index{},
		stackIdx: map[stackKey]int32{},
		live:     map[blockKey]int32{},
		last:     map[uint64]uint64{},
	}
}

var _ event.Sink = (*builder)(nil)

func (b *builder) Process(event.Process) error   { return nil }
func (b *builder) Exit(event.Exit) error         { return nil }
func (b *builder) Module(event.Module) error     { return nil }
func (b *builder) Snapshot(event.Snapshot) error { return nil }
func (b *builder) Stats(event.Stats) error       { return nil }

func (b *builder) Stack(st event.Stack) error {
	i := b.x.stackIndex(b, st.PID, st.ID, nil)
	b.x.stacks[i].frames = append([]uint64(nil), st.Frames...)
	return nil
}

// row appends a row made by the event numbered seq and returns its index.
func (b *builder) row(seq int64, pid uint32, e *event.Event, size uint64, flags uint8) int32 {
	x := b.x
	i := int32(len(x.bAlloc))
	end := int64(never)
	if flags&fNoBlock != 0 {
		end = seq
	}
	x.bAlloc = append(x.bAlloc, seq)
	x.bEnd = append(x.bEnd, end)
	x.bSize = append(x.bSize, size)
	x.bStack = append(x.bStack, x.stackIndex(b, pid, e.Stack, nil))
	x.bTID = append(x.bTID, e.TID)
	x.bFlags = append(x.bFlags, flags)
	return i
}

// alloc makes a live block; a live block at the same address lost its free.
func (b *builder) alloc(seq int64, e *event.Event, flags uint8) {
	k := blockKey{e.PID, e.Addr}
	if old, ok := b.live[k]; ok {
		b.end(seq, old, fMissed)
	}
	b.live[k] = b.row(seq, e.PID, e, e.Size, flags)
	b.liveBytes += e.Size
	b.liveBlocks++
	b.x.evKind[seq] |= evMade
}

// end ends row r at seq with the given flags (fFreed, fTemp).
func (b *builder) end(seq int64, r int32, flags uint8) {
	x := b.x
	x.bEnd[r] = seq
	x.bFlags[r] |= flags
	b.liveBytes -= x.bSize[r]
	b.liveBlocks--
	x.evKind[seq] |= evEnded
}

// free frees addr for thread key tk, as the model does: counted on the
// block's row, temporary when it is the thread's last allocation.
func (b *builder) free(seq int64, e *event.Event, addr uint64, tk uint64) {
	k := blockKey{e.PID, addr}
	r, ok := b.live[k]
	if !ok {
		b.x.unmatched = append(b.x.unmatched, seq)
		return
	}
	delete(b.live, k)
	fl := uint8(fFreed)
	if b.last[tk] == addr && b.x.bTID[r] == e.TID {
		fl |= fTemp
	}
	b.end(seq, r, fl)
}

func (b *builder) Events(evs []event.Event) error {
	x := b.x
	for i := range evs {
		e := &evs[i]
		tk := uint64(e.PID)<<32 | uint64(e.TID)
		switch e.Kind {
		case event.KindAlloc, event.KindMmap, event.KindFree, event.KindRealloc, event.KindMunmap:
		default:
			continue
		}
		if e.Kind == event.KindFree && e.Addr == 0 {
			continue // free(NULL) does nothing
		}
		seq := int64(len(x.evTime))
		x.evTime = append(x.evTime, e.Time)
		x.evKind = append(x.evKind, 0)
		switch e.Kind {
		case event.KindAlloc, event.KindMmap:
			if e.Addr == 0 {
				b.row(seq, e.PID, e, 0, fFailed|fNoBlock)
				b.last[tk] = 0
				break
			}
			b.alloc(seq, e, 0)
			b.last[tk] = e.Addr
		case event.KindFree:
			b.free(seq, e, e.Addr, tk)
			b.last[tk] = 0
		case event.KindRealloc:
			if e.Addr == 0 && (e.Size != 0 || e.OldAddr == 0) {
				b.row(seq, e.PID, e, 0, fRealloc|fFailed|fNoBlock)
				b.last[tk] = 0
				break
			}
			if e.OldAddr != 0 {
				b.free(seq, e, e.OldAddr, tk)
			}
			if e.Addr != 0 {
				b.alloc(seq, e, fRealloc)
			} else {
				b.row(seq, e.PID, e, 0, fRealloc|fNoBlock)
			}
			b.last[tk] = e.Addr
		case event.KindMunmap:
			b.unmap(seq, e, tk)
			b.last[tk] = 0
		}
		x.evLive = append(x.evLive, b.liveBytes)
		x.evBlocks = append(x.evBlocks, b.liveBlocks)
	}
	return nil
}

// unmap removes [Addr, Addr+Size) from the mapping that starts at Addr. A
// partial unmap from the start ends the block's row and starts a row for
// the rest (fCont: not a call, no bytes allocated), at the address after
// the cut, as the model moves the block.
func (b *builder) unmap(seq int64, e *event.Event, tk uint64) {
	x := b.x
	k := blockKey{e.PID, e.Addr}
	r, ok := b.live[k]
	if !ok {
		x.unmatched = append(x.unmatched, seq)
		return
	}
	if e.Size == 0 || e.Size >= x.bSize[r] {
		b.free(seq, e, e.Addr, tk)
		return
	}
	delete(b.live, k)
	rest := x.bSize[r] - e.Size
	b.end(seq, r, 0)
	n := int32(len(x.bAlloc))
	x.bAlloc = append(x.bAlloc, seq)
	x.bEnd = append(x.bEnd, never)
	x.bSize = append(x.bSize, rest)
	x.bStack = append(x.bStack, x.bStack[r])
	x.bTID = append(x.bTID, x.bTID[r])
	x.bFlags = append(x.bFlags, fCont|x.bFlags[r]&fRealloc)
	b.live[blockKey{e.PID, e.Addr + e.Size}] = n
	b.liveBytes += rest
	b.liveBlocks++
}

func (b *builder) finish() *Index { return b.x }
