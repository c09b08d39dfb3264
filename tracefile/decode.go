package tracefile

import (
	"fmt"

	"github.com/klauspost/compress/zstd"

	"github.com/heapscope/heapscope/event"
)

// Window selects the records of a time range: From <= Time < To. A zero
// From or To leaves that end open; the zero Window is everything.
type Window struct {
	From, To int64
}

func (w Window) contains(t int64) bool {
	return (w.From == 0 || t >= w.From) && (w.To == 0 || t < w.To)
}

// overlaps reports whether [min, max] meets the window.
func (w Window) overlaps(min, max int64) bool {
	return (w.From == 0 || max >= w.From) && (w.To == 0 || min < w.To)
}

type thread struct{ pid, tid uint32 }

// batchLen is the most events handed to a sink at once.
const batchLen = 512

// Per-event flags, worked out from the op.
const (
	evNew   = 1 << iota // Addr is a new block
	evOld               // OldAddr and OldSize are stored
	evSized             // Size is stored
)

// opFlags holds the flags of the compact events of each kind.
var opFlags = [8]byte{
	event.KindAlloc:   evNew | evSized,
	event.KindRealloc: evNew | evOld | evSized,
	event.KindFree:    0,
	event.KindMmap:    evNew | evSized,
	event.KindMunmap:  evSized,
	6:                 evSized,
	7:                 evSized,
}

// timelineDecoder replays timeline sections. Its buffers are reused, so
// they grow to the largest chunk and no further.
type timelineDecoder struct {
	res     int64 // time resolution, ns
	raw     []byte
	hist    []uint64
	threads []thread
	batch   []event.Event
	snap    *snapshotBuilder
	notes   *noteBuilder
	exited  func(event.Exit) // told of every exit decoded, in the window or not
}

// decodeError says where in a section decoding failed.
type decodeError struct {
	where    string
	expected string
}

func (e *decodeError) Error() string { return e.where + ": expected " + e.expected }

func streamErr(s int, off int, what string) error {
	return &decodeError{fmt.Sprintf("%s stream byte %d", streamNames[s], off), what}
}

// decode replays the records of a timeline section that fall in w into
// sink. rawLen is the total raw length of its streams, from the chunk
// header.
func (d *timelineDecoder) decode(sec []byte, rawLen uint32, dec *zstd.Decoder, w Window, sink event.Sink) error {
	nrec, i := uvarint(sec, 0)
	base, i := varint(sec, i)
	var st [numStreams][]byte
	var raws, comps [numStreams]uint64
	var total uint64
	for k := range raws {
		raws[k], i = uvarint(sec, i)
		comps[k], i = uvarint(sec, i)
		total += min(raws[k], maxSectionRaw+1)
		if i >= 0 && (raws[k] == 0) != (comps[k] == 0) {
			return &decodeError{"timeline directory", fmt.Sprintf("the %s stream's lengths both zero or both not", streamNames[k])}
		}
	}
	if i < 0 {
		return &decodeError{"timeline directory", "record count, base time and stream lengths"}
	}
	if total != uint64(rawLen) {
		return &decodeError{"timeline directory", fmt.Sprintf("streams totalling the chunk header's %d bytes (they total %d)", rawLen, total)}
	}
	if uint64(cap(d.raw)) < total {
		d.raw = make([]byte, grow(total))
	}
	buf := d.raw[:total]
	off := uint64(0)
	for k := range st {
		if comps[k] > uint64(len(sec)-i) {
			return &decodeError{"timeline directory", fmt.Sprintf("the %s stream (%d bytes) within the section", streamNames[k], comps[k])}
		}
		if raws[k] == 0 {
			continue
		}
		frame := sec[i : i+int(comps[k])]
		i += int(comps[k])
		out, err := dec.DecodeAll(frame, buf[off:off:off+raws[k]])
		if err != nil || uint64(len(out)) != raws[k] {
			return &decodeError{streamNames[k] + " stream", fmt.Sprintf("a zstd frame of %d bytes (%v)", raws[k], err)}
		}
		st[k] = out
		off += raws[k]
	}
	if i != len(sec) {
		return &decodeError{"timeline section end", "no bytes after the streams"}
	}
	if nrec != uint64(len(st[sOps])) {
		return &decodeError{"timeline directory", "one op per record"}
	}
	return d.replay(&st, base, w, sink)
}

// replay decodes the streams of a timeline section. The loop every event
// goes through is kept whole, with each stream's index in a local and the
// one- and two-byte varints decoded inline, so that they stay in
// registers; what is rare (an extended op's kind, a thread's first
// appearance, the final check) is in the functions after it. (Moving the
// exits and snapshots out too cost 2% more instructions per event, and a
// two-byte varint helper is too large to inline.)
func (d *timelineDecoder) replay(st *[numStreams][]byte, base int64, w Window, sink event.Sink) error {
	ops := st[sOps]
	if d.batch == nil {
		d.batch = make([]event.Event, batchLen)
	}
	batch, nb := d.batch, 0
	hist, threads := d.hist[:0], d.threads[:0]
	defer func() { d.hist, d.threads = hist[:0], threads[:0] }()

	times, runs, threadSt, tdefs := st[sTimes], st[sTimeRuns], st[sThreads], st[sThreadDefs]
	heaps, stacks, sizes := st[sHeaps], st[sStacks], st[sSizes]
	newAddrs, oldAddrs, oldSizes, misc := st[sNewAddrs], st[sOldAddrs], st[sOldSizes], st[sMisc]
	var (
		it, ir, ith, itd, ih, ist, isz, ian, iao, ios, im, iex int

		zeros              uint64 // records left in the current run of zero time deltas
		slotLeft, heapLeft uint64 // events left with the current thread, heap
		th                 thread // the current thread
		heap               uint64
		pred               addrPred
	)
	u, res := base, max(d.res, 1) // time in units of the resolution
	all := w == (Window{})
	for r := 0; r < len(ops); r++ {
		op := ops[r]
		if zeros > 0 {
			zeros--
		} else {
			var dt uint64
			if uint(it+1) < uint(len(times)) && times[it]&times[it+1] < 0x80 {
				b0 := uint64(times[it])
				more := b0 >> 7
				dt = b0&0x7f | uint64(times[it+1])<<7&-more
				it += 1 + int(more)
			} else {
				dt, it = uvarintSlow(times, it)
			}
			if uint(ir) < uint(len(runs)) && runs[ir] < 0x80 {
				zeros, ir = uint64(runs[ir]), ir+1
			} else if len(runs) > 0 { // no runs stream: no runs
				zeros, ir = uvarintSlow(runs, ir)
			}
			if it < 0 || ir < 0 {
				return streamErr(sTimes, r, "a time delta and run for the record")
			}
			u += unzigzag(dt)
		}
		t := u * res
		kind, fn := event.Kind(op>>5), event.Func(op&31)
		f := opFlags[kind&7]
		if kind == 0 {
			var err error
			switch op {
			case opEventExt:
				if kind, fn, f, iex, err = extendedOp(st[sExt], iex); err != nil {
					return err
				}
			case opExit, opSnapshot, opNote:
				// After the events before it.
				if nb > 0 {
					if err := sink.Events(batch[:nb]); err != nil {
						return err
					}
					nb = 0
				}
				if im, err = d.record(op, misc, im, t, w, sink); err != nil {
					return err
				}
				continue
			default:
				return streamErr(sOps, r, fmt.Sprintf("a known op (got %#x)", op))
			}
		}

		// An event, its fields stored as they are decoded (the slot is
		// taken again by the next event if this one is outside the
		// window).
		e := &batch[nb]
		e.Time, e.Kind, e.Func = t, kind, fn
		if slotLeft == 0 {
			var slot uint64
			slot, ith = uvarint(threadSt, ith)
			slotLeft, ith = uvarint(threadSt, ith)
			if ith < 0 || slotLeft == 1<<64-1 {
				return streamErr(sThreads, r, "a thread slot and run")
			}
			slotLeft++
			if slot >= uint64(len(threads)) {
				var err error
				if threads, itd, err = newThread(threads, slot, ith, tdefs, itd); err != nil {
					return err
				}
			}
			th = threads[slot]
		}
		slotLeft--
		e.PID, e.TID = th.pid, th.tid
		if heapLeft == 0 {
			heap, ih = uvarint(heaps, ih)
			heapLeft, ih = uvarint(heaps, ih)
			if ih < 0 || heap > 1<<16-1 || heapLeft == 1<<64-1 {
				return streamErr(sHeaps, r, "a heap and run")
			}
			heapLeft++
		}
		heapLeft--
		e.Heap = event.Heap(heap)
		var stack, size, oldAddr, oldSize uint64
		// Stack ids and sizes often take two bytes.
		if uint(ist+1) < uint(len(stacks)) && stacks[ist]&stacks[ist+1] < 0x80 {
			b0 := uint64(stacks[ist])
			more := b0 >> 7
			stack = b0&0x7f | uint64(stacks[ist+1])<<7&-more
			ist += 1 + int(more)
		} else {
			stack, ist = uvarintSlow(stacks, ist)
		}
		if f&evSized != 0 {
			if uint(isz+1) < uint(len(sizes)) && sizes[isz]&sizes[isz+1] < 0x80 {
				b0 := uint64(sizes[isz])
				more := b0 >> 7
				size = b0&0x7f | uint64(sizes[isz+1])<<7&-more
				isz += 1 + int(more)
			} else {
				size, isz = uvarintSlow(sizes, isz)
			}
		}
		if ist < 0 || isz < 0 || stack > 1<<32-1 {
			return badRecord(r, "a stack and size")
		}
		e.Stack, e.Size = event.StackID(stack), size
		if f&evOld != 0 {
			var c uint64
			c, iao = uvarint(oldAddrs, iao)
			oldSize, ios = uvarint(oldSizes, ios)
			if iao < 0 || ios < 0 {
				return badRecord(r, "an old address and size")
			}
			var ok bool
			if oldAddr, ok = decodeAddr(c, oldAddrs, &iao, hist, false, 0, &pred); !ok {
				return badRecord(r, "a valid old address")
			}
			if oldAddr != 0 {
				hist = append(hist, oldAddr)
			}
		}
		var c, a uint64
		isNew := f&evNew != 0
		if isNew {
			if uint(ian+1) < uint(len(newAddrs)) && newAddrs[ian]&newAddrs[ian+1] < 0x80 {
				b0 := uint64(newAddrs[ian])
				more := b0 >> 7
				c = b0&0x7f | uint64(newAddrs[ian+1])<<7&-more
				ian += 1 + int(more)
			} else {
				c, ian = uvarintSlow(newAddrs, ian)
			}
		} else {
			if uint(iao+1) < uint(len(oldAddrs)) && oldAddrs[iao]&oldAddrs[iao+1] < 0x80 {
				b0 := uint64(oldAddrs[iao])
				more := b0 >> 7
				c = b0&0x7f | uint64(oldAddrs[iao+1])<<7&-more
				iao += 1 + int(more)
			} else {
				c, iao = uvarintSlow(oldAddrs, iao)
			}
		}
		if ian < 0 || iao < 0 {
			return badRecord(r, "an address")
		}
		if c&1 == 0 && c != 0 && c>>1 <= uint64(len(hist)) {
			a = hist[uint64(len(hist))-c>>1]
		} else {
			addrs, ia := oldAddrs, &iao
			if isNew {
				addrs, ia = newAddrs, &ian
			}
			var ok bool
			if a, ok = decodeAddr(c, addrs, ia, hist, isNew, size, &pred); !ok {
				return badRecord(r, "a valid address")
			}
		}
		if a != 0 {
			hist = append(hist, a)
		}
		e.Addr, e.OldAddr, e.OldSize = a, oldAddr, oldSize
		if !all && !w.contains(t) {
			continue
		}
		nb++
		if nb == len(batch) {
			if err := sink.Events(batch); err != nil {
				return err
			}
			nb = 0
		}
	}
	if err := consumed(st, zeros|slotLeft|heapLeft, it, ir, ith, itd, ih, ist, isz, ian, iao, ios, iex, im); err != nil {
		return err
	}
	if nb > 0 {
		return sink.Events(batch[:nb])
	}
	return nil
}

// extendedOp decodes the kind and func of an extended event at ext[i:]
// and returns them with the event's flags and the index after them.
func extendedOp(ext []byte, i int) (event.Kind, event.Func, byte, int, error) {
	if i+2 > len(ext) {
		return 0, 0, 0, i, streamErr(sExt, i, "the kind and func of an extended event")
	}
	kind, fn := event.Kind(ext[i]), event.Func(ext[i+1])
	f := byte(evOld | evSized)
	if kind < 8 {
		f |= opFlags[kind] & evNew
	}
	return kind, fn, f, i + 2, nil
}

// newThread reads the definition of thread slot, which must be the next
// new one (the threads stream is at ith), at tdefs[itd:], and returns the
// threads with it and the index after it.
func newThread(threads []thread, slot uint64, ith int, tdefs []byte, itd int) ([]thread, int, error) {
	if slot != uint64(len(threads)) {
		return threads, itd, streamErr(sThreads, ith, "a known thread slot or the next new one")
	}
	var pid, tid uint64
	pid, itd = uvarint(tdefs, itd)
	tid, itd = uvarint(tdefs, itd)
	if itd < 0 || pid > 1<<32-1 || tid > 1<<32-1 {
		return threads, itd, streamErr(sThreadDefs, itd, "a pid and tid for each new thread")
	}
	return append(threads, thread{uint32(pid), uint32(tid)}), itd, nil
}

var errNotConsumed error = &decodeError{"timeline section end", "every stream consumed exactly"}

// consumed checks that the replay stopped at the end of every stream but
// the ops, ends[k] being where it stopped in stream k+1, and with no runs
// left over (left, the runs or'ed).
func consumed(st *[numStreams][]byte, left uint64, ends ...int) error {
	for k, e := range ends {
		if e != len(st[k+1]) {
			return errNotConsumed
		}
	}
	if left != 0 {
		return errNotConsumed
	}
	return nil
}

// badRecord says what record r of a timeline lacks. (A closure over r
// would keep r out of a register in the replay loop.)
func badRecord(r int, what string) error {
	return &decodeError{fmt.Sprintf("timeline record %d", r), what}
}

// decodeAddr decodes address code c (see timelineEncoder), reading an
// escaped address from addrs at *i if need be. It does not add the address
// to the history.
func decodeAddr(c uint64, addrs []byte, i *int, hist []uint64, isNew bool, size uint64, pred *addrPred) (uint64, bool) {
	switch {
	case c == 0:
		return 0, true
	case c&1 == 0:
		if c>>1 > uint64(len(hist)) {
			return 0, false
		}
		return hist[uint64(len(hist))-c>>1], true
	}
	p := &pred.freePred
	if isNew {
		p = &pred.newPred
	}
	var a uint64
	if c>>1 == maxZ {
		a, *i = uvarint(addrs, *i)
		if *i < 0 {
			return 0, false
		}
	} else {
		a = *p + uint64(unzigzag(c>>1))
	}
	if isNew {
		*p = chunkEnd(a, size)
	} else {
		*p = a
	}
	return a, true
}

// record decodes an exit or a snapshot part at misc[i:] and passes it on
// if its time t is in w. It returns the index after it.
func (d *timelineDecoder) record(op byte, misc []byte, i int, t int64, w Window, sink event.Sink) (int, error) {
	if op == opNote {
		start := i
		n, i, err := d.notes.note(misc, i, t, w.contains(t))
		if err != nil {
			return i, streamErr(sMisc, start, err.Error())
		}
		if n != nil {
			return i, sink.Note(n)
		}
		return i, nil
	}
	if op == opSnapshot {
		start := i
		i, err := d.snap.part(misc, i, t, w.contains(t))
		if err != nil {
			return i, streamErr(sMisc, start, err.Error())
		}
		if s := d.snap.done(); s != nil {
			return i, sink.Snapshot(*s)
		}
		return i, nil
	}
	start := i
	var pid uint64
	var status, sig int64
	pid, i = uvarint(misc, i)
	status, i = varint(misc, i)
	sig, i = varint(misc, i)
	if i < 0 || pid > 1<<32-1 || status != int64(int32(status)) || sig != int64(int32(sig)) {
		return i, streamErr(sMisc, start, "an exit record (pid, status, signal)")
	}
	x := event.Exit{PID: uint32(pid), Time: t, Status: int32(status), Signal: int32(sig)}
	if d.exited != nil {
		d.exited(x)
	}
	if !w.contains(t) {
		return i, nil
	}
	return i, sink.Exit(x)
}
