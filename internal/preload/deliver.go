//go:build linux && amd64

// Records to events: the batch handed to the sink.

package preload

import (
	"unsafe"

	"github.com/heapscope/heapscope/event"
)

// events converts consecutive event records at r.pos with timestamps up to
// bound, straight into the batch. It stops at anything else, leaving it to
// peek and deliver (which also judge malformed records).
func (c *Collector) events(p *proc, r *ring, bound uint64) {
	if r.broken {
		return
	}
	base, mask, size := r.base, r.mask, r.size
	pos, limit := r.pos, r.limit
	pid, tid, idBase, last, heaps := p.pid, r.tid, p.idBase, p.lastTime, &heapOf[p.heap]
	tsc := c.clk.mode == clockTSC
	ta, na, k := c.clk.ta, c.clk.na, c.clk.nsPerTick
	batch := c.batch
	for limit-pos >= 24 {
		off := pos & mask
		hdr := *(*uint64)(unsafe.Add(base, off))
		typ := uint8(hdr)
		words := (hdr >> 8) & 0xffffff
		if typ == 0 || typ > maxFunc || words != uint64(bodyWords[typ])+2 || words*8 > limit-pos || off+words*8 > size {
			break
		}
		ts := *(*uint64)(unsafe.Add(base, off+8))
		if ts > bound {
			break
		}
		t := int64(ts)
		if tsc {
			t = na + int64(float64(int64(ts-ta))*k)
		}
		if t < last {
			t = last
		}
		last = t
		n := len(batch)
		if n == cap(batch) {
			c.batch = batch
			c.flushBatch()
			batch = c.batch
			n = 0
		}
		batch = batch[:n+1]
		ev := &batch[n]
		sid := uint32(hdr >> 32)
		if sid != 0 {
			sid += idBase
		}
		ev.Time = t
		ev.PID = pid
		ev.TID = tid
		ev.Kind = kindOf[typ]
		ev.Func = event.Func(typ)
		ev.Heap = heaps[typ]
		ev.Stack = event.StackID(sid)
		ev.Addr = *(*uint64)(unsafe.Add(base, off+16))
		ev.Size, ev.OldAddr, ev.OldSize = 0, 0, 0
		switch words {
		case 4:
			ev.Size = *(*uint64)(unsafe.Add(base, off+24))
		case 5:
			ev.Size = *(*uint64)(unsafe.Add(base, off+24))
			ev.OldAddr = *(*uint64)(unsafe.Add(base, off+32))
		case 6:
			ev.Size = *(*uint64)(unsafe.Add(base, off+24))
			ev.OldAddr = *(*uint64)(unsafe.Add(base, off+32))
			ev.OldSize = *(*uint64)(unsafe.Add(base, off+40))
		}
		pos += words * 8
	}
	c.batch = batch
	r.pos = pos
	p.lastTime = last
}

// deliver hands the record at r.pos (checked by peek) to the sink.
func (c *Collector) deliver(p *proc, r *ring) {
	off, typ, words := r.off, r.typ, r.words
	t := c.clk.ns(r.nextTS)
	if t < p.lastTime {
		t = p.lastTime
	}
	p.lastTime = t
	switch {
	case typ >= 1 && typ <= maxFunc:
		if uint64(bodyWords[typ])+2 != words {
			r.broken = true
			return
		}
		n := len(c.batch)
		if n == cap(c.batch) {
			c.flushBatch()
			n = 0
		}
		c.batch = c.batch[:n+1]
		ev := &c.batch[n]
		sid := uint32(r.word(off) >> 32)
		if sid != 0 {
			sid += p.idBase
		}
		// field by field: a composite literal would be built and copied
		ev.Time = t
		ev.PID = p.pid
		ev.TID = r.tid
		ev.Kind = kindOf[typ]
		ev.Func = event.Func(typ)
		ev.Heap = heapOf[p.heap][typ]
		ev.Stack = event.StackID(sid)
		ev.Addr = r.word(off + 16)
		ev.Size, ev.OldAddr, ev.OldSize = 0, 0, 0
		switch words {
		case 6: // mremap
			ev.Size, ev.OldAddr, ev.OldSize = r.word(off+24), r.word(off+32), r.word(off+40)
		case 5:
			ev.Size, ev.OldAddr = r.word(off+24), r.word(off+32)
		case 4:
			ev.Size = r.word(off + 24)
		}
	case typ == recStack:
		id := uint32(r.word(off) >> 32)
		n := words - 2
		if id == 0 || n == 0 || n > maxFrames {
			r.broken = true
			return
		}
		frames := make([]uint64, n)
		for i := range frames {
			frames[i] = r.word(off + 16 + uint64(i)*8)
		}
		if id > p.maxID {
			p.maxID = id
		}
		c.flushBatch()
		c.sinkCall(c.sink.Stack(event.Stack{PID: p.pid, ID: event.StackID(p.idBase + id), Frames: frames}))
	case typ == recModule:
		m, ok := r.decodeModule(off, words)
		if !ok {
			r.broken = true
			return
		}
		m.PID, m.Time = p.pid, t
		c.flushBatch()
		c.sinkCall(c.sink.Module(m))
	default:
		r.broken = true
		return
	}
	r.pos += words * 8
}

func (c *Collector) flushBatch() {
	if len(c.batch) == 0 {
		return
	}
	c.delivered += uint64(len(c.batch))
	c.sinkCall(c.sink.Events(c.batch))
	c.batch = c.batch[:0]
}
