//go:build linux && amd64

package preload

import (
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/heapscope/heapscope/event"
)

// A proc is one traced process image: a process from its first traced call
// to its exit or its next exec.
type proc struct {
	pid, ppid uint32
	start     int64
	exe       string
	argv      []string
	direct    bool // our child: wait for Exited to learn its status
	conns     int  // connections still open
	pidfd     int  // -1 when unavailable
	dead      bool // the image ended: exited, or exec'd into another
	deadAt    time.Time
	final     bool // dead, and every ring it made is known: drain it all
	replaced  bool // it exec'd: a newer image of the PID exists
	started   bool // its Process record was sent
	status    int32
	signal    int32
	known     bool // status and signal came from Exited
	rings     []*ring
	idBase    uint32 // added to the interposer's stack ids
	maxID     uint32 // the largest id it defined
	lastTime  int64
	older     *proc // an earlier image of the same PID, still draining
}

// flushReq is a Flush in progress: the heads it waits for.
type flushReq struct {
	done     chan error
	targets  map[*ring]uint64
	deadline time.Time
}

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
		pending := false
		before := c.consumed()
		for _, p := range c.procs {
			if c.runnable(p) && c.drain(p, false) {
				pending = true
			}
		}
		progress := c.consumed() != before
		c.finish(false)
		// Stats first: a Flush that returns has its events counted too.
		c.maybeStats(false)
		c.serviceFlushes()
		if closeReq != nil {
			c.shutdown()
			closeReq.done <- c.sinkErr
			return
		}
		c.idle(pending, progress)
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
			p.conns--
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
	}
}

// hello registers a new image, or a new connection of a known one.
func (c *Collector) hello(cn *conn, h *hello) {
	var prev *proc
	for i := len(c.procs) - 1; i >= 0; i-- {
		if c.procs[i].pid == h.pid {
			prev = c.procs[i]
			break
		}
	}
	if h.flags&helloContinue != 0 && prev != nil && !prev.final {
		prev.conns++
		c.byConn[cn] = prev
		return
	}
	p := &proc{
		pid: h.pid, ppid: h.ppid, start: h.mono, exe: h.exe, argv: h.argv,
		direct: h.ppid == c.self, conns: 1, pidfd: -1, lastTime: h.mono,
	}
	if fd, err := unix.PidfdOpen(int(h.pid), 0); err == nil {
		p.pidfd = fd
	} else if err == unix.ESRCH {
		p.markDead()
	}
	if prev != nil {
		// A PID runs one image at a time: the earlier one exec'd into
		// this one, so it will write nothing more.
		prev.replaced = true
		prev.markDead()
		p.older = prev
	}
	c.byConn[cn] = p
	c.procs = append(c.procs, p)
}

func (p *proc) markDead() {
	if !p.dead {
		p.dead, p.deadAt = true, time.Now()
	}
}

// checkExits notices images that ended, and makes final those whose every
// ring is known.
func (c *Collector) checkExits() {
	live := 0
	defer func() { c.live.Store(int64(live)) }()
	for _, p := range c.procs {
		if p.final {
			continue
		}
		// Every connection closed: the image exited, exec'd, or closed our
		// socket. Only its exit (or a new image) ends its stream.
		if !p.dead && p.conns == 0 {
			if p.pidfd < 0 {
				p.markDead()
			} else {
				fds := []unix.PollFd{{Fd: int32(p.pidfd), Events: unix.POLLIN}}
				if n, err := unix.Poll(fds, 0); err == nil && n > 0 {
					p.markDead()
				}
			}
		}
		if p.dead && (p.conns == 0 || time.Since(p.deadAt) > eofPatience) {
			p.final = true
		}
		if !p.dead {
			live++
		}
	}
}

// runnable reports whether p's records may go to the sink now: an image
// waits until the one it replaced is done.
func (c *Collector) runnable(p *proc) bool {
	if p.older != nil {
		return false
	}
	if !p.started {
		p.started = true
		p.idBase = c.nextID[p.pid]
		c.sinkCall(c.sink.Process(event.Process{PID: p.pid, PPID: p.ppid, Time: p.start, Exe: p.exe, Cmdline: p.argv}))
	}
	return true
}

func (c *Collector) sinkCall(err error) {
	if err != nil && c.sinkErr == nil {
		c.sinkErr = err
	}
}

// drain delivers p's records in timestamp order, up to the watermark: the
// time before which no thread of p can still publish a record. Returns
// whether records were held back by it. With force, or once p is final,
// everything published goes.
func (c *Collector) drain(p *proc, force bool) (pending bool) {
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
		if r.pos != r.limit {
			pending = true
		}
	}
	return pending
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
	if t := uint8(hdr); t >= 1 && t <= funcMax {
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

// events converts consecutive event records at r.pos with timestamps up to
// bound, straight into the batch. It stops at anything else, leaving it to
// peek and deliver (which also judge malformed records).
func (c *Collector) events(p *proc, r *ring, bound uint64) {
	if r.broken {
		return
	}
	base, mask, size := r.base, r.mask, r.size
	pos, limit := r.pos, r.limit
	pid, tid, idBase, last := p.pid, r.tid, p.idBase, p.lastTime
	tsc := c.clk.mode == clockTSC
	ta, na, k := c.clk.ta, c.clk.na, c.clk.nsPerTick
	batch := c.batch
	for limit-pos >= 24 {
		off := pos & mask
		hdr := *(*uint64)(unsafe.Add(base, off))
		typ := uint8(hdr)
		words := (hdr >> 8) & 0xffffff
		if typ == 0 || typ > funcMax || words != uint64(bodyWords[typ])+2 || words*8 > limit-pos || off+words*8 > size {
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
		ev.Heap = heapOf[typ]
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
	case typ >= 1 && typ <= funcMax:
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
		ev.Heap = heapOf[typ]
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

// finish ends the streams of final images whose rings are drained: their
// Exit, and their resources. A direct child that exited waits for Exited
// unless the session is closing; then whatever was just drained is all
// there is.
func (c *Collector) finish(closing bool) {
	kept := c.procs[:0]
	for _, p := range c.procs {
		if !p.final || !p.started || (!closing && !drained(p)) || (p.direct && !p.replaced && !p.known && !closing) {
			kept = append(kept, p)
			continue
		}
		e := event.Exit{PID: p.pid, Time: monoNow(), Status: -1}
		if e.Time < p.lastTime {
			e.Time = p.lastTime
		}
		if p.known && !p.replaced {
			e.Status, e.Signal = p.status, p.signal
		}
		c.sinkCall(c.sink.Exit(e))
		if next := p.maxID + 1 + p.idBase; next > c.nextID[p.pid] {
			c.nextID[p.pid] = next
		}
		for _, r := range p.rings {
			c.forgetFlushTarget(r)
			r.unmap()
		}
		p.rings = nil
		if p.pidfd >= 0 {
			unix.Close(p.pidfd)
			p.pidfd = -1
		}
		for _, q := range c.procs {
			if q.older == p {
				q.older = nil
			}
		}
		for cn, q := range c.byConn {
			if q == p {
				delete(c.byConn, cn)
			}
		}
	}
	for i := len(kept); i < len(c.procs); i++ {
		c.procs[i] = nil
	}
	c.procs = kept
}

func drained(p *proc) bool {
	for _, r := range p.rings {
		if !r.broken && r.pos != atomic.LoadUint64(r.head) {
			return false
		}
	}
	return true
}

func (c *Collector) forgetFlushTarget(r *ring) {
	for _, f := range c.flushes {
		delete(f.targets, r)
	}
}

// serviceFlushes completes the flushes whose rings are drained to the heads
// they saw; one still waiting after flushPatience forces its processes out.
func (c *Collector) serviceFlushes() {
	kept := c.flushes[:0]
	for _, f := range c.flushes {
		done := true
		for r, h := range f.targets {
			if !r.broken && r.pos < h {
				done = false
				break
			}
		}
		if !done && time.Now().After(f.deadline) {
			for _, p := range c.procs {
				if p.older == nil {
					c.drain(p, true)
				}
			}
			done = true
		}
		if done {
			f.done <- c.sinkErr
			continue
		}
		kept = append(kept, f)
	}
	c.flushes = kept
}

// maybeStats sends a Stats record once a second when anything changed, and
// keeps Stats() current.
func (c *Collector) maybeStats(final bool) {
	s := event.Stats{Delivered: c.delivered}
	s.Lost[event.LostBufferFull] = c.lost
	s.Lost[event.LostOther] = c.broken
	s.Time = monoNow()
	c.statsMu.Lock()
	c.stats = s
	c.statsMu.Unlock()
	changed := s.Delivered != c.lastStats.Delivered || s.Lost != c.lastStats.Lost
	if final || (changed && time.Since(c.statsAt) >= statsInterval) {
		c.statsAt = time.Now()
		c.lastStats = s
		c.sinkCall(c.sink.Stats(s))
	}
}

// idle sleeps until a producer or the API rings the doorbell, or for as long
// as the flush interval allows (less when records are waiting for the
// watermark or an exit is awaited). It does not sleep while a ring is over
// half full, unless the last pass made no progress: then records wait for a
// thread that is in the middle of writing one, likely preempted, and
// spinning would take the CPU it needs.
func (c *Collector) idle(pending, progress bool) {
	d := c.cfg.FlushInterval
	if d > time.Second {
		d = time.Second
	}
	for _, p := range c.procs {
		if (p.conns == 0 || p.dead) && !p.final {
			d = min(d, time.Millisecond)
		}
	}
	if len(c.flushes) > 0 {
		d = min(d, 200*time.Microsecond)
	}
	if pending {
		d = min(d, watermarkSlack*2)
	}
	atomic.StoreUint32(c.sleep, 1)
	bell := atomic.LoadUint32(c.bell)
	if !c.hasRequests() && !(progress && c.anyHalfFull()) {
		futexWait(c.bell, bell, d)
	}
	atomic.StoreUint32(c.sleep, 0)
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
	c.maybeStats(true)
}
