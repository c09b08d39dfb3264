package tracefile

import (
	"fmt"
	"unsafe"

	"github.com/heapscope/heapscope/event"
)

// The timeline section holds a chunk's timed records: events, exits and
// snapshot parts. It is stored column by column (one stream per field) so
// that the compressor sees each field's regularities on their own: the ops
// of a loop repeat exactly even when its timings do not.

// histBits sizes the encoder's table of recent addresses. A free usually
// names a block allocated shortly before, and glibc's tcache hands out the
// block freed last: both are found here and stored as a short distance
// back into the chunk's address history instead of an address.
const histBits = 10

type histEntry struct {
	addr uint64
	pos  uint32 // index in the chunk's address history
	gen  uint32 // chunk generation; a stale entry is a miss
}

// timelineEncoder builds one chunk's timeline section.
type timelineEncoder struct {
	s        [numStreams][]byte
	records  int
	events   int
	res      int64  // time resolution, ns: times are stored in these units
	base     int64  // time of the first record, in units
	prevTime int64  // in units
	run      uint64 // records since the last with a nonzero time delta
	minTime  int64  // ns
	maxTime  int64

	// Threads and heaps are stored as (value, k) pairs: the value for one
	// event and the k after it.
	lastKey  uint64 // pid<<32 | tid of the last event; valid when events > 0
	lastSlot uint32 // its slot
	prevKey  uint64 // the thread before it
	prevSlot uint32
	slotRun  uint64
	lastHeap event.Heap
	heapRun  uint64
	flags    []byte            // per event of a block: evNew, evOld, evSized
	keys     []uint64          // the chunk's threads, by slot
	slots    map[uint64]uint32 // the same, once there are many

	histN  uint32
	pred   addrPred
	gen    uint32
	table  *[1 << histBits]histEntry
	slotOf []byte // per event of a block: its thread slot, at most 255
	cur    byte   // the slot of the last event
	recent *[256]recentAddr
}

// recentAddr is the last address a thread slot stored, and its position in
// the history.
type recentAddr struct {
	addr uint64
	pos  uint32
}

func newTimelineEncoder(res int64) *timelineEncoder {
	return &timelineEncoder{res: res, slots: make(map[uint64]uint32), table: new([1 << histBits]histEntry), gen: 1,
		flags: make([]byte, 512), slotOf: make([]byte, 512), recent: new([256]recentAddr)}
}

// reset empties the encoder for the next chunk, keeping its buffers.
func (e *timelineEncoder) reset() {
	for i := range e.s {
		e.s[i] = e.s[i][:0]
	}
	e.records, e.events = 0, 0
	e.keys = e.keys[:0]
	clear(e.slots)
	e.histN, e.pred = 0, addrPred{}
	clear(e.recent[:])
	e.gen++
	if e.gen == 0 { // wrapped: stale entries could look current
		clear(e.table[:])
		e.gen = 1
	}
}

// rawSize is the size of the section if it were finished now, give or take
// a few bytes of framing.
func (e *timelineEncoder) rawSize() int {
	n := 32
	for i := range e.s {
		n += len(e.s[i]) + 4
	}
	return n
}

// time adds a record's time, rounded towards zero to the resolution.
func (e *timelineEncoder) time(t int64) {
	u := t
	if e.res > 1 {
		u = t / e.res
		t = u * e.res
	}
	if e.records == 0 {
		e.base, e.prevTime, e.minTime, e.maxTime = u, u, t, t
	}
	// Times are stored as (delta, k) pairs: a record with the delta, then k
	// records with none. At a coarse resolution most deltas are 0.
	switch d := u - e.prevTime; {
	case d == 0 && e.records > 0:
		e.run++
	default:
		if e.records > 0 {
			e.s[sTimeRuns] = appendUvarint(e.s[sTimeRuns], e.run)
		}
		e.s[sTimes] = appendVarint(e.s[sTimes], d)
		e.run = 0
	}
	e.prevTime = u
	if t < e.minTime {
		e.minTime = t
	}
	if t > e.maxTime {
		e.maxTime = t
	}
	e.records++
}

// slot returns the thread slot of key (pid<<32 | tid), making one (and
// storing pid and tid in the thread table) if it is new in this chunk.
func (e *timelineEncoder) slot(key uint64) uint32 {
	// Few threads share a chunk: search them before using the map.
	if len(e.keys) <= 16 {
		for i, k := range e.keys {
			if k == key {
				return uint32(i)
			}
		}
	} else if s, ok := e.slots[key]; ok {
		return s
	}
	s := uint32(len(e.keys))
	e.keys = append(e.keys, key)
	if len(e.keys) > 16 {
		if len(e.keys) == 17 {
			for i, k := range e.keys {
				e.slots[k] = uint32(i)
			}
		}
		e.slots[key] = s
	}
	e.s[sThreadDefs] = appendUvarint(appendUvarint(e.s[sThreadDefs], key>>32), key&(1<<32-1))
	return s
}

// Addresses are stored as one varint c:
//
//	c = 0           a null address
//	c = 2d, d > 0   the address d places back in the chunk's address history
//	c = 2z+1        z = zigzag(address - prediction), z < maxZ
//	c = 2maxZ+1     followed by the address itself (a rare huge jump)
//
// The prediction for a new block (alloc, the block a realloc returns, mmap)
// is the end of the previous new block that was not found in the history,
// rounded as glibc's malloc carves blocks from the top of the heap:
// consecutive new blocks are adjacent. For a block being released it is the
// previous such address that was not found in the history (blocks are
// often released in the order they were made).
const maxZ = 1<<63 - 1

// chunkEnd is where glibc would place the block after one of size bytes at
// a: a header of 8 bytes, 16-byte alignment, 32 bytes at least.
func chunkEnd(a, size uint64) uint64 {
	c := (size + 8 + 15) &^ 15
	if c < 32 || size > 1<<62 {
		c = 32
	}
	return a + c
}

// addrPred holds the state of the address predictions.
type addrPred struct {
	newPred  uint64 // prediction for the next new block
	freePred uint64 // prediction for the next released block
}

// encodeAddr writes the code for a at p[n:] (see above), records a in the
// history and returns the index after the code.
func (e *timelineEncoder) encodeAddr(p unsafe.Pointer, n int, a uint64, isNew bool, size uint64, histN *uint32) int {
	if a == 0 {
		return put(p, n, 0)
	}
	h := &e.table[(a>>4)*0x9E3779B97F4A7C15>>(64-histBits)]
	if h.addr == a && h.gen == e.gen {
		n = putUv(p, n, uint64(*histN-h.pos)<<1)
	} else {
		pr := &e.pred.freePred
		if isNew {
			pr = &e.pred.newPred
		}
		if z := zigzag(int64(a - *pr)); z < maxZ {
			n = putUv(p, n, z<<1|1)
		} else {
			n = putUv(p, n, maxZ<<1|1)
			n = putUv(p, n, a)
		}
		if isNew {
			*pr = chunkEnd(a, size)
		} else {
			*pr = a
		}
	}
	h.addr, h.pos, h.gen = a, *histN, e.gen
	*histN++
	return n
}

// addEvents encodes evs one stream at a time: each pass keeps its stream
// and state in registers, where encoding every field of an event in turn
// would spill them all.
func (e *timelineEncoder) addEvents(evs []event.Event) {
	for len(evs) > 0 {
		n := min(len(evs), len(e.flags))
		e.addBlock(evs[:n])
		evs = evs[n:]
	}
}

// Room reserved per event in each stream before a block is encoded, so that
// the passes write without checking (see reserve): the most a field's
// varints can take.
const (
	maxVarint    = 10
	roomTimes    = maxVarint     // a delta
	roomRuns     = maxVarint     // a run
	roomThreads  = 2 * maxVarint // a run and a slot
	roomHeaps    = 2 * maxVarint
	roomStacks   = 5 // a uint32
	roomSizes    = maxVarint
	roomAddrs    = 2 * maxVarint // an escape and the address
	roomOldAddrs = 2 * roomAddrs // an old address and an address
	roomOldSizes = maxVarint
	roomOps      = 1
	roomExtended = 2
)

// reserve makes room for n more bytes after the end of b. The passes of
// addBlock write into that room through a pointer, without bounds checks:
// each reserves, before a block, the most it can write for it.
func reserve(b []byte, n int) ([]byte, unsafe.Pointer) {
	if cap(b)-len(b) < n {
		nb := make([]byte, len(b), max(2*cap(b), len(b)+n, 4096))
		copy(nb, b)
		b = nb
	}
	return b, unsafe.Pointer(unsafe.SliceData(b))
}

// put writes c at p[n] and returns n+1.
func put(p unsafe.Pointer, n int, c byte) int {
	*(*byte)(unsafe.Add(p, n)) = c
	return n + 1
}

// putUv writes v as a uvarint at p[n:] and returns the index after it.
func putUv(p unsafe.Pointer, n int, v uint64) int {
	if v < 0x80 {
		*(*byte)(unsafe.Add(p, n)) = byte(v)
		return n + 1
	}
	return putUvMore(p, n, v)
}

func putUvMore(p unsafe.Pointer, n int, v uint64) int {
	for v >= 0x80 {
		*(*byte)(unsafe.Add(p, n)) = byte(v) | 0x80
		n++
		v >>= 7
	}
	*(*byte)(unsafe.Add(p, n)) = byte(v)
	return n + 1
}

// addBlock encodes evs (at most len(e.flags) of them), one stream (or two)
// at a time. Each pass is a function of its own, so that its loop has the
// registers to itself.
func (e *timelineEncoder) addBlock(evs []event.Event) {
	if e.res > 1 {
		e.addTimes(evs)
	} else {
		e.addExactTimes(evs)
	}
	e.addOps(evs)
	e.addThreads(evs)
	e.addAddrs(evs)
	e.events += len(evs)
}

// reserveTimes makes room for the times of n events in the times and time
// runs streams, and returns where to write and the lengths so far.
func (e *timelineEncoder) reserveTimes(n int) (tp, rp unsafe.Pointer, tn, rn int) {
	e.s[sTimes], tp = reserve(e.s[sTimes], n*roomTimes)
	e.s[sTimeRuns], rp = reserve(e.s[sTimeRuns], n*roomRuns)
	return tp, rp, len(e.s[sTimes]), len(e.s[sTimeRuns])
}

// doneTimes ends the streams at the lengths written, and keeps the state
// the next batch of nev events' times starts from.
func (e *timelineEncoder) doneTimes(tn, rn int, prev int64, run uint64, nev int, minT, maxT int64) {
	e.s[sTimes], e.s[sTimeRuns] = e.s[sTimes][:tn], e.s[sTimeRuns][:rn]
	e.prevTime, e.run, e.records = prev, run, e.records+nev
	e.minTime, e.maxTime = minT, maxT
}

// addTimes stores the times of evs, rounded to the resolution.
func (e *timelineEncoder) addTimes(evs []event.Event) {
	nev := len(evs)
	tp, rp, tn, rn := e.reserveTimes(nev)
	res, prev, run := e.res, e.prevTime, e.run
	minT, maxT := e.minTime, e.maxTime
	if e.records == 0 {
		u := evs[0].Time / res
		e.base, prev, minT, maxT = u, u, u*res, u*res
		// The first record's delta (0) starts the first pair.
		tn = put(tp, tn, 0)
		run = 0
		evs = evs[1:]
	}
	qU, qLo := int64(0), int64(-1) // the last quotient t/res, and qU*res
	for i := range evs {
		t := evs[i].Time
		// Most times fall in the same step as the one before: skip the
		// division (tens of cycles) for them.
		var u int64
		if t >= qLo && t < qLo+res && qLo >= 0 {
			u = qU
		} else {
			u = t / res
			qU, qLo = u, u*res
		}
		t = u * res
		if d := u - prev; d == 0 {
			run++
		} else {
			rn = putUv(rp, rn, run)
			tn = putUv(tp, tn, zigzag(d))
			run = 0
		}
		prev = u
		minT, maxT = min(minT, t), max(maxT, t)
	}
	e.doneTimes(tn, rn, prev, run, nev, minT, maxT)
}

// addExactTimes is addTimes at a resolution of 1 ns.
func (e *timelineEncoder) addExactTimes(evs []event.Event) {
	nev := len(evs)
	tp, rp, tn, rn := e.reserveTimes(nev)
	prev, run := e.prevTime, e.run
	minT, maxT := e.minTime, e.maxTime
	if e.records == 0 {
		u := evs[0].Time
		e.base, prev, minT, maxT = u, u, u, u
		tn = put(tp, tn, 0)
		run = 0
		evs = evs[1:]
	}
	for i := range evs {
		t := evs[i].Time
		if d := t - prev; d == 0 {
			run++
		} else {
			rn = putUv(rp, rn, run)
			tn = putUv(tp, tn, zigzag(d))
			run = 0
		}
		prev = t
		minT, maxT = min(minT, t), max(maxT, t)
	}
	e.doneTimes(tn, rn, prev, run, nev, minT, maxT)
}

// Per kind, the fields a compact event does not store: a field set
// there makes the event extended.
var (
	noOld  [8]uint64 // ^0 for kinds without old address and size
	noSize [8]uint64 // ^0 for kinds without a size
)

func init() {
	for k := range opFlags {
		if opFlags[k]&evOld == 0 {
			noOld[k] = ^uint64(0)
		}
		if opFlags[k]&evSized == 0 {
			noSize[k] = ^uint64(0)
		}
	}
}

// addOps stores the ops of evs (and the kind and func of extended
// events), their stacks and sizes, and sets the flags that say which
// fields each stores.
func (e *timelineEncoder) addOps(evs []event.Event) {
	nev := len(evs)
	flags := e.flags[:nev]
	var op, xp, sp, zp unsafe.Pointer
	e.s[sOps], op = reserve(e.s[sOps], nev*roomOps)
	e.s[sExt], xp = reserve(e.s[sExt], nev*roomExtended)
	e.s[sStacks], sp = reserve(e.s[sStacks], nev*roomStacks)
	e.s[sSizes], zp = reserve(e.s[sSizes], nev*roomSizes)
	on, xn, sn, zn := len(e.s[sOps]), len(e.s[sExt]), len(e.s[sStacks]), len(e.s[sSizes])
	for i := range evs {
		ev := &evs[i]
		k, f := ev.Kind, ev.Func
		fl := opFlags[k&7]
		if k-1 < 7 && f < 32 && (ev.OldAddr|ev.OldSize)&noOld[k&7]|ev.Size&noSize[k&7] == 0 {
			on = put(op, on, byte(k)<<5|byte(f))
		} else {
			on = put(op, on, opEventExt)
			xn = put(xp, xn, byte(k))
			xn = put(xp, xn, byte(f))
			fl = evOld | evSized
			if isNew(k) {
				fl |= evNew
			}
		}
		flags[i] = fl
		sn = putUv(sp, sn, uint64(ev.Stack))
		if fl&evSized != 0 {
			zn = putUv(zp, zn, ev.Size)
		}
	}
	e.s[sOps], e.s[sExt] = e.s[sOps][:on], e.s[sExt][:xn]
	e.s[sStacks], e.s[sSizes] = e.s[sStacks][:sn], e.s[sSizes][:zn]
}

// addThreads stores the threads and heaps of evs, as (value, run) pairs.
func (e *timelineEncoder) addThreads(evs []event.Event) {
	nev := len(evs)
	var tp, hp unsafe.Pointer
	e.s[sThreads], tp = reserve(e.s[sThreads], nev*roomThreads)
	e.s[sHeaps], hp = reserve(e.s[sHeaps], nev*roomHeaps)
	tn, hn := len(e.s[sThreads]), len(e.s[sHeaps])
	lastKey, slotRun := e.lastKey, e.slotRun
	lastHeap, heapRun := e.lastHeap, e.heapRun
	slotOf, cur := e.slotOf[:nev], e.cur
	// The last thread's slot, and the thread before it with its slot: two
	// threads taking turns need no lookup.
	lastSlot, prevKey, prevSlot := e.lastSlot, e.prevKey, e.prevSlot
	if e.events == 0 {
		lastKey, slotRun = uint64(evs[0].PID)<<32|uint64(evs[0].TID), 0
		lastSlot = e.slot(lastKey)
		tn = putUv(tp, tn, uint64(lastSlot))
		cur, prevKey, prevSlot = byte(min(lastSlot, 255)), lastKey, lastSlot
		slotOf[0] = cur
		lastHeap, heapRun = evs[0].Heap, 0
		hn = putUv(hp, hn, uint64(lastHeap))
		evs, slotOf = evs[1:], slotOf[1:]
	}
	for i := range evs {
		if key := uint64(evs[i].PID)<<32 | uint64(evs[i].TID); key == lastKey {
			slotRun++
		} else {
			tn = putUv(tp, tn, slotRun)
			s := prevSlot
			if key != prevKey {
				s = e.slot(key)
			}
			prevKey, prevSlot = lastKey, lastSlot
			lastKey, lastSlot, slotRun = key, s, 0
			tn = putUv(tp, tn, uint64(s))
			cur = byte(min(s, 255))
		}
		slotOf[i] = cur
		if h := evs[i].Heap; h == lastHeap {
			heapRun++
		} else {
			hn = putUv(hp, hn, heapRun)
			lastHeap, heapRun = h, 0
			hn = putUv(hp, hn, uint64(h))
		}
	}
	e.s[sThreads], e.s[sHeaps] = e.s[sThreads][:tn], e.s[sHeaps][:hn]
	e.lastKey, e.slotRun, e.lastHeap, e.heapRun, e.cur = lastKey, slotRun, lastHeap, heapRun, cur
	e.lastSlot, e.prevKey, e.prevSlot = lastSlot, prevKey, prevSlot
}

// addAddrs stores the addresses, old addresses and old sizes of evs.
func (e *timelineEncoder) addAddrs(evs []event.Event) {
	nev := len(evs)
	flags := e.flags[:nev]
	var np, op, sp unsafe.Pointer
	e.s[sNewAddrs], np = reserve(e.s[sNewAddrs], nev*roomAddrs)
	e.s[sOldAddrs], op = reserve(e.s[sOldAddrs], nev*roomOldAddrs)
	e.s[sOldSizes], sp = reserve(e.s[sOldSizes], nev*roomOldSizes)
	nn, on, sn := len(e.s[sNewAddrs]), len(e.s[sOldAddrs]), len(e.s[sOldSizes])
	table, gen, histN := e.table, e.gen, e.histN
	slotOf, recent := e.slotOf[:nev], e.recent
	for i := range evs {
		ev := &evs[i]
		fl := flags[i]
		rc := &recent[slotOf[i]]
		if fl&evOld != 0 {
			on = e.encodeAddr(op, on, ev.OldAddr, false, 0, &histN)
			sn = putUv(sp, sn, ev.OldSize)
			if ev.OldAddr != 0 {
				rc.addr, rc.pos = ev.OldAddr, histN-1
			}
		}
		a := ev.Addr
		if a == rc.addr && a != 0 {
			// The address this thread stored last, again (a block freed
			// right after it was made, whatever other threads did in
			// between): its distance without a lookup. (The table keeps an
			// earlier position: any position holding the address makes a
			// valid code.)
			c := uint64(histN-rc.pos) << 1
			if fl&evNew != 0 {
				nn = putUv(np, nn, c)
			} else {
				on = putUv(op, on, c)
			}
			rc.pos = histN
			histN++
			continue
		}
		// encodeAddr, inlined for the common case.
		h := &table[(a>>4)*0x9E3779B97F4A7C15>>(64-histBits)]
		if a != 0 && h.addr == a && h.gen == gen {
			c := uint64(histN-h.pos) << 1
			if fl&evNew != 0 {
				nn = putUv(np, nn, c)
			} else {
				on = putUv(op, on, c)
			}
			h.pos = histN
			histN++
		} else if fl&evNew != 0 {
			nn = e.encodeAddr(np, nn, a, true, ev.Size, &histN)
		} else {
			on = e.encodeAddr(op, on, a, false, 0, &histN)
		}
		if a != 0 {
			rc.addr, rc.pos = a, histN-1
		}
	}
	e.s[sNewAddrs], e.s[sOldAddrs], e.s[sOldSizes] = e.s[sNewAddrs][:nn], e.s[sOldAddrs][:on], e.s[sOldSizes][:sn]
	e.histN = histN
}

// isNew reports whether an event of kind k makes the block at its Addr.
func isNew(k event.Kind) bool {
	return k == event.KindAlloc || k == event.KindRealloc || k == event.KindMmap
}

func (e *timelineEncoder) exit(x *event.Exit) {
	e.time(x.Time)
	e.s[sOps] = append(e.s[sOps], opExit)
	m := appendUvarint(e.s[sMisc], uint64(x.PID))
	m = appendVarint(m, int64(x.Status))
	e.s[sMisc] = appendVarint(m, int64(x.Signal))
}

// Snapshot part flags.
const (
	snapFinal = 1 << 0 // event.Snapshot.Final
	snapFirst = 1 << 1 // the first part of a snapshot
	snapLast  = 1 << 2 // the last part
)

// snapshotPart stores live[...] and totals[...] as one part of snapshot s.
func (e *timelineEncoder) snapshotPart(s *event.Snapshot, flags byte, live []event.LiveBlock, totals []event.StackTotal) {
	e.time(s.Time)
	e.s[sOps] = append(e.s[sOps], opSnapshot)
	if s.Final {
		flags |= snapFinal
	}
	// The blocks' times are kept exactly, relative to the snapshot's time
	// as the reader will see it: rounded to the resolution.
	st := s.Time
	if e.res > 1 {
		st = st / e.res * e.res
	}
	m := append(appendUvarint(e.s[sMisc], uint64(s.PID)), flags)
	m = appendUvarint(m, uint64(len(live)))
	var prev uint64
	for i := range live {
		l := &live[i]
		m = appendVarint(m, int64(l.Addr-prev))
		prev = l.Addr
		m = appendUvarint(m, l.Size)
		m = appendUvarint(m, uint64(l.Stack))
		m = appendVarint(m, st-l.Time)
	}
	m = appendUvarint(m, uint64(len(totals)))
	for i := range totals {
		t := &totals[i]
		m = appendUvarint(m, uint64(t.Stack))
		m = appendUvarint(m, t.Allocs)
		m = appendUvarint(m, t.AllocBytes)
		m = appendUvarint(m, t.Frees)
		m = appendUvarint(m, t.FreeBytes)
	}
	e.s[sMisc] = m
}

// finish appends the section to dst: the record count, the base time, the
// raw and compressed length of each stream, then the streams, each a zstd
// frame of its own (so that each gets its own entropy tables). It returns
// the section and the total raw length of the streams.
func (e *timelineEncoder) finish(c *streamCoder, dst []byte, scratch *[]byte) ([]byte, int) {
	if e.records > 0 {
		e.s[sTimeRuns] = appendUvarint(e.s[sTimeRuns], e.run)
		// With no two records at the same time (exact times, usually) the
		// runs are all 0: leave them out and save the reader a byte a
		// record.
		if allZero(e.s[sTimeRuns]) {
			e.s[sTimeRuns] = e.s[sTimeRuns][:0]
		}
	}
	if e.events > 0 {
		e.s[sThreads] = appendUvarint(e.s[sThreads], e.slotRun)
		e.s[sHeaps] = appendUvarint(e.s[sHeaps], e.heapRun)
	}
	comp := (*scratch)[:0]
	var lens [numStreams]int
	raw := 0
	for i := range e.s {
		n := len(comp)
		if len(e.s[i]) > 0 {
			comp = c.appendStream(comp, i, e.s[i])
		}
		lens[i] = len(comp) - n
		raw += len(e.s[i])
	}
	*scratch = comp
	dst = appendUvarint(dst, uint64(e.records))
	dst = appendVarint(dst, e.base)
	for i := range e.s {
		dst = appendUvarint(appendUvarint(dst, uint64(len(e.s[i]))), uint64(lens[i]))
	}
	return append(dst, comp...), raw
}

// snapshotBuilder joins the parts of a snapshot, which may span chunks.
type snapshotBuilder struct {
	cur    event.Snapshot
	active bool // parts are being collected
	keep   bool // the snapshot is in the window
	ready  bool
	// dropped counts parts that arrived without their first part (the
	// chunk holding it was lost or overwritten).
	dropped int
}

func (b *snapshotBuilder) reset() {
	b.active, b.ready = false, false
	b.cur = event.Snapshot{}
}

// part decodes the part at misc[i:] and returns the index after it.
func (b *snapshotBuilder) part(misc []byte, i int, t int64, keep bool) (int, error) {
	pid, i := uvarint(misc, i)
	if i < 0 || i >= len(misc) || pid > 1<<32-1 {
		return -1, fmt.Errorf("a snapshot's pid and flags")
	}
	flags := misc[i]
	i++
	first := flags&snapFirst != 0
	switch {
	case first:
		b.cur = event.Snapshot{PID: uint32(pid), Time: t, Final: flags&snapFinal != 0}
		b.active, b.keep = true, keep
	case !b.active || b.cur.PID != uint32(pid) || b.cur.Time != t:
		// A continuation whose start is gone: decode it and drop it.
		b.active = false
		b.dropped++
	}
	n, i := uvarint(misc, i)
	// Every live block takes at least 4 bytes.
	if i < 0 || n > uint64(len(misc)-i)/4 || uint64(len(b.cur.Live))+n > maxSnapshotEntries {
		return -1, fmt.Errorf("a count of live blocks the stream can hold")
	}
	collect := b.active && b.keep
	var prev uint64
	for ; n > 0; n-- {
		var d, tdelta int64
		var size, stack uint64
		d, i = varint(misc, i)
		size, i = uvarint(misc, i)
		stack, i = uvarint(misc, i)
		tdelta, i = varint(misc, i)
		if i < 0 || stack > 1<<32-1 {
			return -1, fmt.Errorf("a live block (address, size, stack, time)")
		}
		a := prev + uint64(d)
		prev = a
		if collect {
			b.cur.Live = append(b.cur.Live, event.LiveBlock{Addr: a, Size: size, Stack: event.StackID(stack), Time: t - tdelta})
		}
	}
	n, i = uvarint(misc, i)
	if i < 0 || n > uint64(len(misc)-i)/5 || uint64(len(b.cur.Totals))+n > maxSnapshotEntries {
		return -1, fmt.Errorf("a count of stack totals the stream can hold")
	}
	for ; n > 0; n-- {
		var v [5]uint64
		for k := range v {
			v[k], i = uvarint(misc, i)
		}
		if i < 0 || v[0] > 1<<32-1 {
			return -1, fmt.Errorf("a stack total (stack, allocs, bytes, frees, bytes)")
		}
		if collect {
			b.cur.Totals = append(b.cur.Totals, event.StackTotal{Stack: event.StackID(v[0]), Allocs: v[1], AllocBytes: v[2], Frees: v[3], FreeBytes: v[4]})
		}
	}
	if flags&snapLast != 0 && b.active {
		b.active = false
		b.ready = b.keep
	}
	return i, nil
}

// done returns the completed snapshot, once.
func (b *snapshotBuilder) done() *event.Snapshot {
	if !b.ready {
		return nil
	}
	b.ready = false
	return &b.cur
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}
