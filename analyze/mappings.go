package analyze

import (
	"sort"

	"github.com/heapscope/heapscope/event"
)

// Mappings (mmap, munmap, mremap) are ranges of pages, not blocks: munmap
// may remove a mapping's head, tail or middle, or several mappings at
// once, and a mapping made over live ones (MAP_FIXED) replaces the pages it
// covers. Allocators and runtimes map twice what they need and trim both
// ends to align. So each process keeps its live mappings as disjoint
// ranges, split and trimmed as the kernel does, apart from the malloc
// blocks (whose table stays as fast as it was).

// mapping is what one mmap (or mremap) call made; its pages may since be
// split into several pieces. It is one live block until its last piece is
// gone.
type mapping struct {
	addr   uint64 // where it was made, for temporaries
	site   int32
	tid    uint32
	pieces int
}

// piece is a live range [start, end) of a mapping.
type piece struct {
	start, end uint64
	m          *mapping
}

// mappings are a process's live pieces, sorted by start, disjoint.
type mappings struct {
	pieces []piece
}

// mmap records a mapping of size bytes at addr made by site: the live
// pages it covers are unmapped first, as the kernel does for MAP_FIXED.
func (m *Model) mmap(p *proc, si int32, t *thread, addr, size uint64) {
	if size == 0 {
		return
	}
	if p.maps == nil {
		p.maps = &mappings{}
	}
	end := addr + size
	if end < addr {
		end = ^uint64(0)
	}
	m.unmapRange(p, nil, addr, end)
	mp := &mapping{addr: addr, site: si, tid: t.tid, pieces: 1}
	ps := &p.maps.pieces
	i := sort.Search(len(*ps), func(i int) bool { return (*ps)[i].start >= addr })
	*ps = append(*ps, piece{})
	copy((*ps)[i+1:], (*ps)[i:])
	(*ps)[i] = piece{start: addr, end: end, m: mp}

	s := &m.sites[si]
	m.touch(s)
	s.liveBytes += end - addr
	s.liveBlocks++
	s.bytes += end - addr
	m.liveBytes += end - addr
	m.liveBlocks++
	m.hist[sizeBucket(end-addr)]++
}

// munmap removes the pages [addr, addr+size). Pages of no live mapping
// (mapped before tracing, or not anonymous) are ignored; an munmap that
// covers none at all counts as an unmatched free. Size 0 (which the kernel
// refuses) removes the piece that starts at addr, as older providers meant.
func (m *Model) munmap(p *proc, t *thread, addr, size uint64) {
	if size == 0 && p.maps != nil {
		ps := p.maps.pieces
		if i := sort.Search(len(ps), func(i int) bool { return ps[i].start >= addr }); i < len(ps) && ps[i].start == addr {
			size = ps[i].end - addr
		}
	}
	end := addr + size
	if end < addr {
		end = ^uint64(0)
	}
	if size == 0 || !m.unmapRange(p, t, addr, end) {
		m.unmatched++
	}
}

// unmapRange removes [start, end) from p's live mappings, as an munmap of
// thread t (nil: a new mapping replaces them): pieces inside go, pieces
// across its ends are trimmed, and a piece around it is split in two. It
// returns whether any live page was in the range.
func (m *Model) unmapRange(p *proc, t *thread, start, end uint64) bool {
	if p.maps == nil || len(p.maps.pieces) == 0 {
		return false
	}
	ps := p.maps.pieces
	// The first piece that ends after start.
	i := sort.Search(len(ps), func(i int) bool { return ps[i].end > start })
	j := i
	for j < len(ps) && ps[j].start < end {
		j++
	}
	if i == j {
		return false
	}
	// Pieces i..j-1 overlap. What remains of the first and the last.
	var keep [2]piece
	nk := 0
	if ps[i].start < start {
		keep[nk] = piece{start: ps[i].start, end: start, m: ps[i].m}
		nk++
	}
	if ps[j-1].end > end {
		keep[nk] = piece{start: end, end: ps[j-1].end, m: ps[j-1].m}
		nk++
	}
	for k := 0; k < nk; k++ {
		keep[k].m.pieces++
	}
	for k := i; k < j; k++ {
		pc := &ps[k]
		lo, hi := max(pc.start, start), min(pc.end, end)
		m.unmapBytes(pc.m, hi-lo)
		if pc.m.pieces--; pc.m.pieces == 0 {
			m.unmapped(pc.m, t, start)
		}
	}
	// Replace ps[i:j] by keep[:nk].
	n := len(ps) - (j - i) + nk
	if nk <= j-i {
		copy(ps[i:], keep[:nk])
		copy(ps[i+nk:], ps[j:])
		clear(ps[n:])
		ps = ps[:n]
	} else { // one piece split in two
		ps = append(ps, piece{})
		copy(ps[j+1:], ps[j:])
		copy(ps[i:], keep[:nk])
	}
	p.maps.pieces = ps
	return true
}

// unmapBytes takes n bytes of mapping mp out of the live set.
func (m *Model) unmapBytes(mp *mapping, n uint64) {
	s := &m.sites[mp.site]
	m.touch(s)
	s.liveBytes -= n
	s.freedBytes += n
	m.liveBytes -= n
}

// unmapped notes that mapping mp's last piece is gone, by an munmap at
// addr of thread t (nil: replaced by a new mapping).
func (m *Model) unmapped(mp *mapping, t *thread, addr uint64) {
	s := &m.sites[mp.site]
	m.touch(s)
	s.liveBlocks--
	s.frees++
	m.liveBlocks--
	if t != nil && t.last == mp.addr && addr == mp.addr && mp.tid == t.tid {
		s.temporary++
	}
}

// mremap moves or resizes the mapping pages [OldAddr, OldAddr+OldSize) to
// [Addr, Addr+Size): the old pages go as by munmap, the new ones come as
// by mmap, from the mremap's stack. An OldSize of 0 (not known) means the
// piece at OldAddr.
func (m *Model) mremap(p *proc, si int32, t *thread, e *event.Event) {
	if e.OldAddr != 0 {
		m.munmap(p, t, e.OldAddr, e.OldSize)
	}
	if e.Addr != 0 {
		m.mmap(p, si, t, e.Addr, e.Size)
		m.peaked(e.Time)
	}
	t.last = e.Addr
}
