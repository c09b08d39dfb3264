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

// evRec is what the index keeps of an event besides its time: the heap
// after it. 16 bytes with the time's offset; the kinds are a column apart.
type evRec struct {
	dt     uint32 // time - the chunk's base time, unless the chunk is wide
	blocks uint32 // live blocks after the event
	live   uint64 // live bytes after it
}

// events are the event columns, by sequence number. A time is kept as an
// offset of 32 bits from the first time of its chunk of 64 Ki events (4.29
// s): 8 bytes an event less than a time of its own, over 20 M events. A
// chunk that spans more (a trace idle for seconds between two events) keeps
// its times whole.
type events struct {
	recs  chunked[evRec]
	kinds chunked[uint8]
	base  []int64   // by chunk: the time of its first event
	wide  [][]int64 // by chunk: its times, when they do not fit offsets; else nil
}

func (c *events) len() int { return c.recs.len() }

// add appends an event.
func (c *events) add(t int64, live uint64, blocks uint32, kind uint8) {
	i := c.recs.len()
	k := i >> chunkBits
	if i&chunkMask == 0 {
		c.base = append(c.base, t)
		c.wide = append(c.wide, nil)
	}
	r := c.recs.add()
	*c.kinds.add() = kind
	r.live, r.blocks = live, blocks
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
	r := c.recs.at(i)
	return r.live, r.blocks
}
