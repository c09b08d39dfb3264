//go:build linux && amd64

// The collector's pump: one goroutine that takes requests, drains rings
// and sleeps on the doorbell.

package preload

import (
	"sync/atomic"
	"time"
)

const (
	batchSize     = 1024 // events per Sink.Events call: 56 KiB, stays in L2
	statsInterval = time.Second
	flushPatience = time.Second
	closeWait     = time.Second
	// An image's connection ends after every message it sent, so a dead
	// image is final at its EOF; a descriptor leaked into a process that
	// lives on (a child made without fork's handlers) could hold it open.
	eofPatience = 100 * time.Millisecond
)

// pump is the one goroutine that reads rings and calls the sink.
func (c *Collector) pump() {
	defer close(c.done)
	var reqs []request
	for {
		reqs = c.takeRequests(reqs)
		var closeReq *request
		for i := range reqs {
			if reqs[i].kind == reqClose {
				closeReq = &reqs[i]
				continue
			}
			c.handle(&reqs[i])
		}
		atomic.AddUint64(c.beat, 1)
		c.clk.refine()
		c.checkExits()
		before := c.consumed()
		for _, p := range c.procs {
			if c.runnable(p) {
				c.drain(p, false)
			}
		}
		progress := c.consumed() != before
		c.finish(false)
		// stats first: a Flush that returns sees Stats() count what it
		// delivered
		c.maybeStats(false)
		c.serviceFlushes()
		if closeReq != nil {
			c.shutdown()
			closeReq.done <- c.sinkErr
			return
		}
		c.idle(progress)
	}
}

// consumed sums the read positions of every ring: it moves when a pass
// delivered anything.
func (c *Collector) consumed() uint64 {
	var n uint64
	for _, p := range c.procs {
		for _, r := range p.rings {
			n += r.pos
		}
	}
	return n
}

func (c *Collector) handle(r *request) {
	switch r.kind {
	case reqHello:
		c.hello(r.conn, r.hello)
	case reqRing:
		// The producer writes nothing into its new ring before the answer:
		// every later pass waits for the ring's records.
		if p := c.byConn[r.conn]; p != nil && !p.final {
			c.ringsMapped++
			p.rings = append(p.rings, r.ring)
			r.ring.answer(true)
		} else {
			r.ring.answer(false)
			r.ring.unmap()
		}
	case reqEOF:
		if p := c.byConn[r.conn]; p != nil {
			delete(c.byConn, r.conn)
			if p.conns--; p.conns == 0 && p.execNote != "" {
				// its last connection closed: the exec it announced happened
				c.warn(p, WarnSetID, p.execNote)
				p.execNote = ""
			}
		}
	case reqDetached:
		for i := len(c.procs) - 1; i >= 0; i-- {
			if p := c.procs[i]; p.pid == r.pid {
				p.markDead()
				break
			}
		}
	case reqExited:
		// the latest image of the PID is the one that exited
		for i := len(c.procs) - 1; i >= 0; i-- {
			if p := c.procs[i]; p.pid == r.pid {
				p.known = true
				p.markDead()
				p.status, p.signal = int32(r.status), int32(r.signal)
				if r.signal != 0 {
					p.status = 128 + int32(r.signal)
				}
				break
			}
		}
	case reqChildren:
		if c.byConn[r.conn] != nil {
			c.adopt(r.pids)
		}
	case reqNote:
		if p := c.byConn[r.conn]; p != nil {
			c.note(p, r.code, r.pid, r.text)
		}
	case reqFlush:
		f := &flushReq{done: r.done, targets: map[*ring]uint64{}, deadline: time.Now().Add(flushPatience)}
		for _, p := range c.procs {
			for _, rg := range p.rings {
				if !rg.broken {
					f.targets[rg] = atomic.LoadUint64(rg.head)
				}
			}
		}
		c.flushes = append(c.flushes, f)
	case reqFlushProcess:
		c.flushProcess(r)
	}
}

func (c *Collector) sinkCall(err error) {
	if err != nil && c.sinkErr == nil {
		c.sinkErr = err
	}
}

// idle sleeps until a producer or the API rings the doorbell, or for nap.
// It does not sleep while a ring is over half full, unless the last pass
// made no progress: then records wait for a thread that is in the middle of
// writing one, likely preempted, and spinning would take the CPU it needs.
func (c *Collector) idle(progress bool) {
	d := c.nap()
	atomic.StoreUint32(c.sleep, 1)
	bell := atomic.LoadUint32(c.bell)
	if !c.hasRequests() && !(progress && c.anyHalfFull()) {
		futexWait(c.bell, bell, d)
	}
	atomic.StoreUint32(c.sleep, 0)
}

// nap is how long the pump may sleep: the flush interval (at most a
// second), less while a Flush or an exit is awaited. Records the watermark
// held back wait for the next pass like those published while it sleeps:
// waking early for them would wake it every watermark interval whenever
// records trickle in (sampling mode, an idle thread beside a busy one), for
// records that no one waits for sooner.
func (c *Collector) nap() time.Duration {
	d := min(c.cfg.FlushInterval, time.Second)
	for _, p := range c.procs {
		if (p.conns == 0 || p.dead) && !p.final {
			d = min(d, time.Millisecond)
		}
	}
	if len(c.flushes) > 0 {
		d = min(d, 200*time.Microsecond)
	}
	return d
}

func (c *Collector) anyHalfFull() bool {
	for _, p := range c.procs {
		for _, r := range p.rings {
			if !r.broken && atomic.LoadUint64(r.head)-r.pos > r.size/2 {
				return true
			}
		}
	}
	return false
}

// shutdown runs in the pump when Close is called: the closed bit is set, so
// producers stop at their next call. It waits, a bounded time, for records
// being written and for the rings and ends of connections of images that
// ended, then drains everything and ends every stream.
func (c *Collector) shutdown() {
	deadline := time.Now().Add(closeWait)
	var reqs []request
	for {
		reqs = c.takeRequests(reqs)
		for i := range reqs {
			if reqs[i].kind != reqClose {
				c.handle(&reqs[i])
			}
		}
		c.checkExits()
		busy := false
		for _, p := range c.procs {
			if p.dead && !p.final {
				busy = true
			}
			for _, r := range p.rings {
				futexWake(r.tailWord, 1<<30)
				if !r.broken && !p.dead && atomic.LoadUint64(r.seq)&1 != 0 {
					busy = true
				}
			}
		}
		for _, p := range c.procs {
			if c.runnable(p) {
				c.drain(p, false)
			}
		}
		c.finish(false)
		if !busy || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	c.mu.Lock()
	c.stopped = true
	c.mu.Unlock()
	reqs = c.takeRequests(reqs)
	for i := range reqs {
		if reqs[i].kind != reqClose {
			c.handle(&reqs[i])
		}
	}
	for len(c.procs) > 0 {
		for _, p := range c.procs {
			p.final = true
			if c.runnable(p) {
				c.drain(p, true)
			}
		}
		c.finish(true)
	}
	for _, f := range c.flushes {
		f.done <- c.sinkErr
	}
	c.flushes = nil
	for pid := range c.children {
		c.dropChild(pid)
	}
	c.maybeStats(true)
}
