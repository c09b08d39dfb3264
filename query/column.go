package query

import "math"

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

// evRec is what the index keeps of an event besides its kind: its time and
// the heap after it, in 12 bytes, the time and the live bytes as offsets
// from their chunk's first. The kinds are a column apart.
type evRec struct {
	dt     uint32 // time - the chunk's base time, unless its times are whole
	blocks uint32 // live blocks after the event
	dlive  int32  // live bytes after it - the chunk's base, unless they are whole
}

// events are the event columns, by sequence number. A time is kept as an
// offset of 32 bits from the first time of its chunk of 64 Ki events (4.29
// s), and the live bytes as a signed offset of 32 bits from the chunk's
// first (2 GiB): 12 bytes an event less than both whole, over 20 M events.
// A chunk that spans more (a trace idle for seconds between two events, a
// heap that changes by gigabytes) keeps those values whole.
type events struct {
	recs     chunked[evRec]
	kinds    chunked[uint8]
	base     []int64    // by chunk: the time of its first event
	wide     [][]int64  // by chunk: its times, when they do not fit offsets; else nil
	baseLive []uint64   // by chunk: the live bytes after its first event
	wideLive [][]uint64 // by chunk: its live bytes, when they do not fit offsets; else nil
}

func (c *events) len() int { return c.recs.len() }

// add appends an event.
func (c *events) add(t int64, live uint64, blocks uint32, kind uint8) {
	i := c.recs.len()
	k := i >> chunkBits
	if i&chunkMask == 0 {
		c.base = append(c.base, t)
		c.wide = append(c.wide, nil)
		c.baseLive = append(c.baseLive, live)
		c.wideLive = append(c.wideLive, nil)
	}
	r := c.recs.add()
	*c.kinds.add() = kind
	c.setLive(r, i, k, live)
	r.blocks = blocks
	if w := c.wide[k]; w != nil {
		w[i&chunkMask] = t
		return
	}
	d := t - c.base[k]
	if d >= 0 && d <= math.MaxUint32 {
		r.dt = uint32(d)
		return
	}
	w := make([]int64, chunkLen)
	for j := k << chunkBits; j < i; j++ {
		w[j&chunkMask] = c.base[k] + int64(c.recs.at(j).dt)
	}
	w[i&chunkMask] = t
	c.wide[k] = w
}

// setLive stores live, the live bytes after event i of chunk k, in r or in
// the chunk's whole values.
func (c *events) setLive(r *evRec, i, k int, live uint64) {
	if w := c.wideLive[k]; w != nil {
		w[i&chunkMask] = live
		return
	}
	d := int64(live - c.baseLive[k])
	if d >= math.MinInt32 && d <= math.MaxInt32 {
		r.dlive = int32(d)
		return
	}
	w := make([]uint64, chunkLen)
	for j := k << chunkBits; j < i; j++ {
		w[j&chunkMask] = c.baseLive[k] + uint64(int64(c.recs.at(j).dlive))
	}
	w[i&chunkMask] = live
	c.wideLive[k] = w
}

// time returns the time of event i.
func (c *events) time(i int) int64 {
	k := i >> chunkBits
	if w := c.wide[k]; w != nil {
		return w[i&chunkMask]
	}
	return c.base[k] + int64(c.recs.chunks[k][i&chunkMask].dt)
}

func (c *events) kind(i int) uint8 { return *c.kinds.at(i) }

// state returns the live bytes and blocks after event i.
func (c *events) state(i int) (uint64, uint32) {
	k := i >> chunkBits
	r := &c.recs.chunks[k][i&chunkMask]
	if w := c.wideLive[k]; w != nil {
		return w[i&chunkMask], r.blocks
	}
	return c.baseLive[k] + uint64(int64(r.dlive)), r.blocks
}
