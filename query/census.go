package query

import (
	"sort"

	"github.com/heapscope/heapscope/analyze"
	"github.com/heapscope/heapscope/event"
)

// A census (event.Census) is applied as the heap model applies it (see
// analyze.Rundown): one event, at the census's time, that ends the live
// blocks the census did not find (their frees were lost: fMissed) and
// makes a row for each block it found that the index did not have live,
// of stack analyze.PreTrace, flagged fCont (not a call: no allocation, no
// bytes allocated). Those rows are allocated before any window after the
// census, so that the window's AOFI and AOFO, and the timeline, count the
// process's whole heap.
//
// One difference from the model remains: the frees between the attach and
// the census of blocks from before the attach (analyze.Rundown.FreedBefore)
// stay unmatched frees in the index's windows, which keep no process per
// unmatched free to tell them from others.

// Note applies a census; the other notes are not indexed.
func (b *builder) Note(n event.Note) error {
	c, ok := n.(event.Census)
	if !ok || b.rate > 0 { // as the model, which applies no census to a sampled trace
		return nil
	}
	x := b.x
	if x.evs.len() >= maxEvents {
		b.tooLarge = true
		return ErrTooLarge
	}
	p := b.proc(c.PID)
	seq := uint32(x.evs.len())
	var kind uint8

	addrs := make([]uint64, len(c.Blocks))
	for i, bl := range c.Blocks {
		addrs[i] = bl.Addr
	}
	sort.Slice(addrs, func(i, j int) bool { return addrs[i] < addrs[j] })
	in := func(a uint64) bool {
		i := sort.Search(len(addrs), func(i int) bool { return addrs[i] >= a })
		return i < len(addrs) && addrs[i] == a
	}
	var gone []uint64
	for a := range p.live.All() {
		if !in(a) {
			gone = append(gone, a)
		}
	}
	sort.Slice(gone, func(i, j int) bool { return gone[i] < gone[j] }) // the model's order does not matter; a fixed one does
	var made []event.LiveBlock
	for _, bl := range c.Blocks {
		if _, ok := p.live.Get(bl.Addr); !ok {
			made = append(made, bl) // else traced since the attach: it keeps its row
		}
	}
	if len(gone) == 0 && len(made) == 0 {
		return nil // an event is a row made or ended: this one would be neither
	}
	b.startEvent(c.Time)
	for _, a := range gone {
		l, _ := p.live.Delete(a)
		b.end(seq, c.Time, &kind, l, fMissed)
	}
	si := b.stackIndex(p, analyze.PreTrace)
	for _, bl := range made {
		r := b.row(seq, c.Time, si, 0, bl.Size, fCont, weight{n: 1})
		p.live.Put(bl.Addr, liveRef{row: r, size: bl.Size, t: c.Time})
		b.liveBytes += bl.Size
		b.liveBlocks++
	}
	b.endEvent(c.Time, kind)
	return nil
}

// replacedFlag is the flag of a live block ended by a new block at its
// address: its free was lost (fMissed), unless it is a block a census found
// (the census saw the new block made before its event came: the model does
// not count a missed free either).
func (b *builder) replacedFlag(l liveRef) uint8 {
	r := b.x.rows.at(int(l.row))
	if r.flags&fCont != 0 && int(r.stack) < len(b.x.stacks) && b.x.stacks[r.stack].id == analyze.PreTrace {
		return 0
	}
	return fMissed
}
