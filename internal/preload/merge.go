//go:build linux && amd64

// The merge of an image's rings in timestamp order, up to the watermark.

package preload

import (
	"sync/atomic"
	"unsafe"
)

// drain delivers p's records in timestamp order, up to the watermark: the
// time before which no thread of p can still publish a record. With force,
// or once p is final, everything published goes.
func (c *Collector) drain(p *proc, force bool) {
	w := ^uint64(0)
	if p.final || force {
		for _, r := range p.rings {
			r.loadHead()
		}
	} else {
		// Read our clock first, then each ring's seq, last timestamp and
		// head, in that order: the producer writes them in the reverse.
		now := c.clk.now()
		idle := uint64(0)
		if now > c.clk.slack {
			idle = now - c.clk.slack
		}
		for _, r := range p.rings {
			if r.broken {
				continue
			}
			seq := atomic.LoadUint64(r.seq)
			b := atomic.LoadUint64(r.lastTS)
			r.loadHead()
			// A thread not writing now stamps its next record after now
			// (less the slack for its store becoming visible); a thread
			// writing stamps it no earlier than its last one.
			if seq&1 == 0 && idle > b {
				b = idle
			}
			if b < w {
				w = b
			}
		}
	}

	// Merge the rings with records by their next timestamp. Up to
	// maxLinear of them, a loop that decodes events inline; more, a heap
	// whose first ring delivers a run while it stays first.
	h := c.heap[:0]
	for _, r := range p.rings {
		if _, ok := r.peek(); ok {
			h = append(h, r)
		}
	}
	if len(h) <= maxLinear {
		c.merge(p, h, w)
	} else {
		for i := len(h)/2 - 1; i >= 0; i-- {
			siftDown(h, i)
		}
		for len(h) > 0 && h[0].nextTS <= w {
			r := h[0]
			bound := w
			if len(h) > 1 {
				next := h[1].nextTS
				if len(h) > 2 && h[2].nextTS < next {
					next = h[2].nextTS
				}
				bound = min(bound, next)
			}
			if !c.run(p, r, bound) {
				h[0] = h[len(h)-1]
				h = h[:len(h)-1]
			}
			if len(h) > 0 {
				siftDown(h, 0)
			}
		}
	}
	c.heap = h[:0]
	c.flushBatch()

	for _, r := range p.rings {
		if r.broken {
			// abandoned: count it once, give the producer its room back
			if !r.counted {
				r.counted = true
				c.broken++
			}
			r.pos = atomic.LoadUint64(r.head)
			r.limit = r.pos
		}
		if r.pos != r.stored {
			r.stored = r.pos
			atomic.StoreUint64(r.tail, r.pos)
			if atomic.LoadUint32(r.waiting) != 0 {
				futexWake(r.tailWord, 1<<30)
			}
		}
		if l := atomic.LoadUint64(r.lost); l > r.lostSeen {
			c.lost += l - r.lostSeen
			r.lostSeen = l
		}
	}
}

func siftDown(h []*ring, i int) {
	for {
		l := 2*i + 1
		if l >= len(h) {
			return
		}
		m := l
		if r := l + 1; r < len(h) && h[r].nextTS < h[l].nextTS {
			m = r
		}
		if h[i].nextTS <= h[m].nextTS {
			return
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
}

const maxLinear = 8

// A cursor is a ring being merged: its next record's position and
// timestamp.
type cursor struct {
	r   *ring
	pos uint64
	ts  uint64 // the next record's timestamp
	hdr uint64 // its header if it is an event record, 0 if deliver must take it
}

// plainEvent reports whether hdr heads a well-formed event record that fits
// in the avail bytes before the ring's limit and does not wrap at off.
func plainEvent(hdr, off, avail, size uint64) bool {
	w := uint64(0)
	if t := uint8(hdr); t >= 1 && t <= maxFunc {
		w = uint64(bodyWords[t]) + 2
	}
	return w != 0 && (hdr>>8)&0xffffff == w && w*8 <= avail && off+w*8 <= size
}

// next reads the cursor's next record: inline when it is an event record,
// else through refill. False when there is none.
func (cu *cursor) next() bool {
	r := cu.r
	if avail := r.limit - cu.pos; avail >= 24 && !r.broken {
		off := cu.pos & r.mask
		h := *(*uint64)(unsafe.Add(r.base, off))
		if plainEvent(h, off, avail, r.size) {
			cu.hdr, cu.ts = h, *(*uint64)(unsafe.Add(r.base, off+8))
			return true
		}
	}
	return !r.broken && cu.refill()
}

// refill reads the cursor's next record through peek (which consumes PAD
// and THREAD records and judges malformed ones). False when there is none.
func (cu *cursor) refill() bool {
	r := cu.r
	r.pos = cu.pos
	ts, ok := r.peek()
	if !ok {
		return false
	}
	cu.pos, cu.ts, cu.hdr = r.pos, ts, 0
	if h := r.word(r.off); plainEvent(h, r.off, r.limit-r.pos, r.size) {
		cu.hdr = h
	}
	return true
}

// merge delivers the records of rings (each already peeked) in timestamp
// order while the smallest is at most w. The ring with the smallest
// timestamp delivers a run of event records, nearly all the traffic, up to
// the next smallest timestamp of the others (threads that take turns leave
// runs of many records); anything else goes through deliver.
func (c *Collector) merge(p *proc, rings []*ring, w uint64) {
	var cs [maxLinear]cursor
	n := 0
	for _, r := range rings {
		cu := &cs[n]
		*cu = cursor{r: r, pos: r.pos}
		if cu.refill() {
			n++
		}
	}
	for n > 1 {
		// the smallest timestamp, and the next smallest
		m, next := 0, ^uint64(0)
		for i := 1; i < n; i++ {
			if t := cs[i].ts; t < cs[m].ts {
				next, m = cs[m].ts, i
			} else if t < next {
				next = t
			}
		}
		cu := &cs[m]
		if cu.ts > w {
			break
		}
		r := cu.r
		r.pos = cu.pos
		if cu.hdr == 0 {
			// not an event: the general path
			c.deliver(p, r)
		} else {
			c.events(p, r, min(w, next))
		}
		cu.pos = r.pos
		if !cu.next() {
			n--
			cs[m] = cs[n]
		}
	}
	for i := 0; i < n; i++ {
		cs[i].r.pos = cs[i].pos
	}
	if n == 1 {
		// one ring left (or only one from the start): its own loop
		if r := cs[0].r; !r.broken {
			if _, ok := r.peek(); ok && r.nextTS <= w {
				c.run(p, r, w)
			}
		}
	}
}

// run delivers r's records, starting with the one peek found, while their
// timestamps are at most bound. It returns false when r has no record left
// below its limit. Runs of event records, nearly all the traffic, take a
// loop of their own.
func (c *Collector) run(p *proc, r *ring, bound uint64) bool {
	for {
		c.events(p, r, bound)
		if _, ok := r.peek(); !ok {
			return false
		}
		if r.nextTS > bound {
			return true
		}
		c.deliver(p, r)
		if _, ok := r.peek(); !ok {
			return false
		}
		if r.nextTS > bound {
			return true
		}
	}
}
