package query

import (
	"math"
	"sort"
	"unsafe"
)

// chunked is an append-only column in chunks of fixed size: appending never
// copies what is stored (a doubling slice of a 20 M-event trace copies
// gigabytes), and memory grows one chunk at a time.
//
// T holds no pointers: its chunks may be in an arena (see arena), set by
// the index before the first add.
type chunked[T any] struct {
	chunks [][]T
	n      int
	arena  *arena
}

const (
	chunkBits = 16
	chunkLen  = 1 << chunkBits
	chunkMask = chunkLen - 1
)

// add appends a zero value and returns a pointer to it.
func (c *chunked[T]) add() *T {
	if c.n&chunkMask == 0 {
		c.chunks = append(c.chunks, newChunk[T](c.arena))
	}
	p := &c.chunks[c.n>>chunkBits][c.n&chunkMask]
	c.n++
	return p
}

// at returns a pointer to element i.
func (c *chunked[T]) at(i int) *T { return &c.chunks[i>>chunkBits][i&chunkMask] }

func (c *chunked[T]) len() int { return c.n }

// Events are not stored one by one: every event made a row, ended one, or
// is an unmatched free, and those carry its time. What the timeline and a
// window's peak need of the heap between events is kept per group of
// groupLen events (a 48-byte summary for 256 events); a question reads the
// summaries of the groups it spans whole and rebuilds the events of the
// one or two groups it cuts from their rows (see detail).
const (
	groupBits = 8
	groupLen  = 1 << groupBits
	groupMask = groupLen - 1
)

// group summarizes the events [g*groupLen, (g+1)*groupLen).
type group struct {
	base       int64  // the time of its first event: rows' and unmatched frees' times are offsets from it
	live       uint64 // live bytes before its first event
	peak       uint64 // the largest live bytes after one of its events
	blocks     uint32 // live blocks before its first event
	peakBlocks uint32 // live blocks then
	// span is the latest time of its events less base; math.MaxUint32
	// when it does not fit (its times are then in events.wide).
	span    uint32
	peakOff uint16 // the first of its events after which the heap was peak
	made    uint32 // the blocks its events made (objects, in a sampled trace)
	ended   uint32 // the blocks they ended (not by an exit)
}

// events is the index's view of its heap events, by sequence number, built
// from the groups and the rows.
type events struct {
	n      int
	groups []group
	// wide holds, by group, the times of a group whose times do not fit
	// 32-bit offsets from its first (a trace idle for seconds, a time
	// before the group's first).
	wide map[int32][]int64
	// endLive and endBlocks are the heap after the last event.
	endLive   uint64
	endBlocks uint32
	// x is the Index whose rows, ends and unmatched frees these are.
	x *Index
}

func (c *events) len() int { return c.n }

// groupEvents is one group's events rebuilt: their times, the heap after
// each, their kinds (evMade, evEnded), and the blocks (objects) each made
// and ended.
type groupEvents struct {
	n      int
	time   [groupLen]int64
	live   [groupLen]uint64
	blocks [groupLen]uint32
	kind   [groupLen]uint8
	made   [groupLen]uint32
	ended  [groupLen]uint32
}

// detail rebuilds the events of group g into d from the rows made and
// ended in it and its unmatched frees: O(groupLen) after three searches.
func (c *events) detail(g int, d *groupEvents) {
	x := c.x
	lo := g << groupBits
	hi := min(lo+groupLen, c.n)
	d.n = hi - lo
	gr := &c.groups[g]
	wide := c.wide[int32(g)]
	var dlive [groupLen]int64
	var dblocks [groupLen]int32
	d.kind = [groupLen]uint8{}
	d.made, d.ended = [groupLen]uint32{}, [groupLen]uint32{}
	for i, j := x.rowsAllocIn(lo, hi); i < j; i++ {
		r := x.rows.at(i)
		off := int(r.alloc) - lo
		d.time[off] = gr.base + int64(r.at)
		if r.flags&fNoBlock != 0 {
			continue
		}
		n := x.objects(i)
		dlive[off] += int64(x.size(r, i))
		dblocks[off] += int32(n)
		if r.flags&fCont == 0 {
			d.kind[off] |= evMade
			d.made[off] += n
		}
	}
	for k, j := x.endsIn(lo, hi); k < j; k++ {
		i := int(*x.ends.at(k))
		r := x.rows.at(i)
		off := int(r.end) - lo
		d.time[off] = gr.base + int64(r.et)
		n := x.objects(i)
		dlive[off] -= int64(x.size(r, i))
		dblocks[off] -= int32(n)
		if !r.exited() {
			d.kind[off] |= evEnded
			d.ended[off] += n
		}
	}
	for k, j := x.unmatchedIn(lo, hi); k < j; k++ {
		d.time[int(x.unmatched[k])-lo] = gr.base + int64(x.unmatchedDT[k])
	}
	if wide != nil {
		copy(d.time[:d.n], wide)
	}
	live, blocks := gr.live, gr.blocks
	for i := 0; i < d.n; i++ {
		live += uint64(dlive[i])
		blocks += uint32(dblocks[i])
		d.live[i], d.blocks[i] = live, blocks
	}
}

// time returns the time of event i.
func (c *events) time(i int) int64 {
	var d groupEvents
	c.detail(i>>groupBits, &d)
	return d.time[i&groupMask]
}

// state returns the live bytes and blocks after event i.
func (c *events) state(i int) (uint64, uint32) {
	var d groupEvents
	c.detail(i>>groupBits, &d)
	return d.live[i&groupMask], d.blocks[i&groupMask]
}

// kind returns what event i did: evMade, evEnded.
func (c *events) kind(i int) uint8 {
	var d groupEvents
	c.detail(i>>groupBits, &d)
	return d.kind[i&groupMask]
}

// groupEnd returns the heap after the last event of group g.
func (c *events) groupEnd(g int) (uint64, uint32) {
	if g+1 < len(c.groups) {
		return c.groups[g+1].live, c.groups[g+1].blocks
	}
	return c.endLive, c.endBlocks
}

// rowsAllocIn returns the rows [i, j) made by the events [lo, hi).
func (x *Index) rowsAllocIn(lo, hi int) (int, int) {
	n := x.rows.len()
	i := sort.Search(n, func(k int) bool { return int(x.rows.at(k).alloc) >= lo })
	j := i + sort.Search(n-i, func(k int) bool { return int(x.rows.at(i+k).alloc) >= hi })
	return i, j
}

// endsIn returns the positions [i, j) in x.ends of the blocks ended by the
// events [lo, hi).
func (x *Index) endsIn(lo, hi int) (int, int) {
	n := x.ends.len()
	end := func(k int) int { return int(x.rows.at(int(*x.ends.at(k))).end) }
	i := sort.Search(n, func(k int) bool { return end(k) >= lo })
	j := i + sort.Search(n-i, func(k int) bool { return end(i+k) >= hi })
	return i, j
}

// unmatchedIn returns the positions [i, j) in x.unmatched of the unmatched
// frees among the events [lo, hi).
func (x *Index) unmatchedIn(lo, hi int) (int, int) {
	u := x.unmatched
	i := sort.Search(len(u), func(k int) bool { return int(u[k]) >= lo })
	j := i + sort.Search(len(u)-i, func(k int) bool { return int(u[i+k]) >= hi })
	return i, j
}

// noSpan marks a group whose times are whole (events.wide).
const noSpan = math.MaxUint32

// columnBytes returns the memory the windowed index's columns hold: what
// grows with the trace (the rows, the ends, the groups' summaries, the
// unmatched frees and the groups of whole times).
func (x *Index) columnBytes() int {
	n := len(x.rows.chunks)*chunkLen*int(unsafe.Sizeof(rowRec{})) +
		len(x.ends.chunks)*chunkLen*4 +
		cap(x.evs.groups)*int(unsafe.Sizeof(group{})) +
		4*(cap(x.unmatched)+cap(x.unmatchedDT)+cap(x.exits)) +
		len(x.weights.chunks)*chunkLen*int(unsafe.Sizeof(weight{})) +
		len(x.evs.wide)*groupLen*8
	return n + len(x.big)*16
}

// The rows' latest ends are kept per group of rowGroupLen rows (in the
// order of their allocation), so that a window skips, unread, the groups
// of rows that were all over before it: most rows of a trace are
// short-lived, and a window otherwise reads every row made before its end.
const (
	rowGroupBits = 8
	rowGroupLen  = 1 << rowGroupBits
	rowGroupMask = rowGroupLen - 1
)

// summarizeRows fills x.rowEnds from the rows.
func (x *Index) summarizeRows() {
	n := x.rows.len()
	ends := make([]uint32, (n+rowGroupLen-1)>>rowGroupBits)
	for i := 0; i < n; i++ {
		r := x.rows.at(i)
		e := r.end
		if r.exited() {
			e = never // a leak: every window's question reads it
		}
		if e > ends[i>>rowGroupBits] {
			ends[i>>rowGroupBits] = e
		}
	}
	x.rowEnds = ends
}
