package tracefile

import (
	"encoding/binary"
	"fmt"
)

// A job is a filled chunk handed to the compressor.
type job struct {
	tl     *timelineEncoder
	defs   []byte // definitions, uncompressed
	cuts   []int  // where in defs a frame begins
	stats  bool   // a stats record is due
	flags  uint8
	exited []uint32 // pids that exited in the chunk
	// The definition log's entries made before the chunk (start) and by
	// its end (end).
	entryStart, entryEnd int
}

// chunk is a job compressed, ready to be placed.
type chunk struct {
	flags      uint8
	defs       []byte // the compressed pending definitions, or nil
	defsRaw    int
	stats      bool
	tl         []byte // the timeline section, or nil
	tlRaw      int
	minT, maxT int64
	events     uint64
	entryStart int
	entryEnd   int
}

// cut hands the chunk being filled to the compressor and starts the next.
// It waits while the compressor is still busy with the one before: one
// chunk is compressed while the next fills, and no more. mu is held.
func (w *Writer) cut(flags uint8) error {
	if w.tl.records == 0 && len(w.defs) == 0 && !w.statsDirty && flags == 0 {
		return w.err
	}
	for w.busy {
		w.cond.Wait()
	}
	if w.err != nil {
		return w.err
	}
	j := &job{
		tl: w.tl, defs: w.defs, cuts: w.defCuts, stats: w.statsDirty, flags: flags, exited: w.exited,
		entryStart: w.cutEntry, entryEnd: len(w.entries),
	}
	w.tl, w.defs, w.defCuts, w.exited = w.spare.tl, w.spare.defs[:0], w.spare.cuts[:0], w.spare.exited[:0]
	w.tl.reset()
	w.statsDirty = false
	w.cutEntry = len(w.entries)
	w.job, w.busy = j, true
	w.cond.Broadcast()
	return nil
}

// wait waits until the compressor has written every chunk cut. mu is held.
func (w *Writer) wait() error {
	for w.busy {
		w.cond.Wait()
	}
	return w.err
}

// compressor compresses and places the chunks cut, one at a time.
func (w *Writer) compressor() {
	defer close(w.bgDone)
	w.mu.Lock()
	defer w.mu.Unlock()
	for {
		for w.job == nil && !w.quit {
			w.cond.Wait()
		}
		if w.job == nil {
			return
		}
		j := w.job
		w.job = nil

		// Compress without the lock: the next chunk fills meanwhile.
		w.mu.Unlock()
		c := chunk{flags: j.flags, stats: j.stats, events: uint64(j.tl.events),
			entryStart: j.entryStart, entryEnd: j.entryEnd}
		if j.tl.records > 0 {
			c.tl, c.tlRaw = j.tl.finish(w.coder, w.tlComp[:0], &w.scratch)
			w.tlComp = c.tl
			c.minT, c.maxT = j.tl.minTime, j.tl.maxTime
		}
		if len(j.defs) > 0 {
			c.defs, c.defsRaw = encodeFrames(w.defEnc, j.defs, j.cuts, w.defComp[:0]), len(j.defs)
			w.defComp = c.defs
		}
		w.mu.Lock()

		if w.err == nil {
			switch w.hdr.Mode {
			case Sequential:
				w.err = w.placeSequential(&c)
			case Circular:
				w.err = w.placeCircular(&c)
			case NewFile:
				w.err = w.placeNewFile(&c)
			}
		}
		// The processes that exited in this chunk need no definitions in
		// a new file.
		for _, pid := range j.exited {
			for _, i := range w.byPID[pid] {
				w.entries[i].dead = true
			}
			delete(w.byPID, pid)
		}
		w.spare = *j
		w.busy = false
		w.cond.Broadcast()
	}
}

// build assembles a chunk in w.buf: the definitions (defs, compressed, or
// when full every definition a reader needs), the stats record if due,
// and the timeline.
func (w *Writer) build(c *chunk, flags uint8, full bool) (*chunkHeader, []byte) {
	h := &chunkHeader{flags: flags, seq: w.seq, minTime: c.minT, maxTime: c.maxT, events: uint32(c.events)}
	b := append(w.buf[:0], make([]byte, chunkHeaderSize)...)
	defs, raw := c.defs, c.defsRaw
	if full {
		defs, raw = nil, 0
		if d := w.fullDefs(c); len(d) > 0 {
			w.fullComp = encodeFrames(w.defEnc, d, w.fullCuts, w.fullComp[:0])
			defs, raw = w.fullComp, len(d)
		}
	}
	b = append(b, defs...)
	if c.stats {
		// A frame of its own, after the definitions' (a zstd stream may
		// be a series of frames): the counts are those of now, and the
		// bytes include this chunk's (all but this frame).
		rec := w.statsRecord(int64(len(b) + len(c.tl)))
		b = w.defEnc.EncodeAll(rec, b)
		raw += len(rec)
	}
	if n := len(b) - chunkHeaderSize; n > 0 {
		h.defsLen, h.defsRaw, h.defsCRC = uint32(n), uint32(raw), crc(b[chunkHeaderSize:])
	}
	if len(c.tl) > 0 {
		h.tlLen, h.tlRaw, h.tlCRC = uint32(len(c.tl)), uint32(c.tlRaw), crc(c.tl)
		b = append(b, c.tl...)
	}
	for len(b)%align != 0 {
		b = append(b, 0)
	}
	h.marshal(b)
	w.buf = b
	return h, b
}

// statsRecord is the last stats the session passed, as fileStats counts
// them, with the bytes written (and pending more to come).
func (w *Writer) statsRecord(pending int64) []byte {
	s := w.fileStats(w.stats)
	s.Bytes = uint64(w.written + pending)
	if s.Time == 0 {
		s.Time = w.lastTime
	}
	return appendStats(nil, &s)
}

// fullDefs returns the definitions for a chunk flagged full: in circular
// mode every definition made by the chunk's end and the exits of processes
// that exited before it; in newfile mode those of the processes still
// running at its start. (Exits inside the chunk are in its timeline.)
func (w *Writer) fullDefs(c *chunk) []byte {
	all := w.hdr.Mode == Circular
	b := w.full[:0]
	w.fullCuts = w.fullCuts[:0]
	for i, e := range w.entries[:c.entryEnd] {
		if e.exit && (!all || i >= c.entryStart) || e.dead && !all {
			continue
		}
		if len(b)-lastCut(w.fullCuts) >= defFrameRaw {
			w.fullCuts = append(w.fullCuts, len(b))
		}
		b = append(b, w.log[e.start:e.end]...)
	}
	w.full = b
	return b
}

func (w *Writer) writeAt(b []byte, off int64) error {
	n, err := w.f.WriteAt(b, off)
	w.written += int64(n)
	w.unsynced = true
	if err != nil {
		err = fmt.Errorf("tracefile: writing %s at %d: %w", w.f.Name(), off, err)
		if w.err == nil {
			w.err = err
		}
	}
	return err
}

func (w *Writer) writeChunk(h *chunkHeader, b []byte) error {
	if err := w.writeAt(b, w.pos); err != nil {
		return err
	}
	w.chunks = append(w.chunks, indexEntry{w.pos, *h})
	w.pos += int64(len(b))
	w.seq++
	w.kept += uint64(h.events)
	return nil
}

// salvage ends a file whose writing failed (w.err is set): it tries to
// write the final stats, which count what was lost, and the index where the
// chunk that failed began, and cuts the file there, so a reader finds the
// counts and not a torn chunk. A write that failed on a full disk often
// left room for these over the torn chunk's bytes; if not, the file ends
// with the chunks written whole, which a reader recovers. mu is held.
func (w *Writer) salvage() {
	if w.f == nil {
		return
	}
	h, b := w.build(&chunk{stats: true}, flagFinal|flagError, false)
	if w.hdr.Mode != Circular || w.pos+int64(len(b)) <= w.ringEnd {
		if w.writeChunk(h, b) == nil {
			w.hwm = max(w.hwm, w.pos)
			if w.finishFile() == nil {
				return
			}
		}
	}
	if w.hdr.Mode != Circular {
		w.f.Truncate(w.pos) // the torn chunk's bytes, if the disk let it
	}
}

// indexBytes is the size of the index and trailer for n chunks.
func indexBytes(n int) int64 { return indexFixed + int64(n)*indexEntrySize + trailerSize }

func (w *Writer) placeSequential(c *chunk) error {
	if w.stopped {
		w.lostLimit += c.events
		if c.flags&flagFinal == 0 {
			return nil
		}
		// Close after a stop: only the final stats, in the room kept for
		// them.
		h, b := w.build(&chunk{stats: true}, c.flags, false)
		return w.writeChunk(h, b)
	}
	h, b := w.build(c, c.flags, false)
	// Keep room for a stop chunk, a final chunk and the index.
	if max := w.hdr.MaxSize; max > 0 && w.pos+int64(len(b))+2*w.reserve+indexBytes(len(w.chunks)+3) > max {
		w.lostLimit += c.events
		w.stopped = true
		h, b = w.build(&chunk{stats: true}, c.flags|flagStop, false)
		if err := w.writeChunk(h, b); err != nil {
			return err
		}
		if c.flags&flagFinal == 0 {
			return w.sync()
		}
		return nil
	}
	return w.writeChunk(h, b)
}

func (w *Writer) placeNewFile(c *chunk) error {
	h, b := w.build(c, c.flags, false)
	if len(w.chunks) == 0 || w.pos+int64(len(b))+w.reserve+indexBytes(len(w.chunks)+2) <= w.hdr.MaxSize {
		return w.writeChunk(h, b)
	}
	// Close this file with the stats so far, and start the next with every
	// definition a reader of it alone needs.
	rh, rb := w.build(&chunk{stats: true}, flagRoll, false)
	if err := w.writeChunk(rh, rb); err != nil {
		return err
	}
	if err := w.finishFile(); err != nil {
		return err
	}
	if err := w.f.Close(); err != nil {
		return fmt.Errorf("tracefile: %w", err)
	}
	if err := w.openFile(); err != nil {
		return err
	}
	c.stats = true
	h, b = w.build(c, c.flags|flagFull, true)
	return w.writeChunk(h, b)
}

func (w *Writer) placeCircular(c *chunk) error {
	h, b := w.build(c, c.flags, false)
	// Rebuilt with new counts, the stats record may take a few bytes more.
	const slack = 64
	full := false
	if w.pos+int64(len(b))+slack > w.ringEnd {
		// Wrap. The chunks about to be overwritten may hold definitions
		// that the chunks after them need: write them all again.
		w.pos, full = w.dataStart, true
		h, b = w.build(c, c.flags|flagFull, true)
		if w.pos+int64(len(b))+slack > w.ringEnd {
			return fmt.Errorf("tracefile: a circular file of %d bytes cannot hold the %d bytes of definitions; raise the maximum size",
				w.hdr.MaxSize, len(w.full))
		}
	}
	if w.dropOverlapped(w.pos+int64(len(b))) > 0 && c.stats {
		// The stats record was built before this loss was known. Rebuilt,
		// the chunk may overlap one more chunk, which the next stats
		// record counts.
		h, b = w.build(c, h.flags, full)
		w.dropOverlapped(w.pos + int64(len(b)))
	}
	if err := w.writeChunk(h, b); err != nil {
		return err
	}
	w.hwm = max(w.hwm, w.pos)
	return nil
}

// dropOverlapped forgets the chunks that a chunk written from w.pos to end
// overwrites, and every older one: a reader keeps only the unbroken run of
// chunks that ends with the newest. It returns how many it dropped.
func (w *Writer) dropOverlapped(end int64) int {
	drop := -1
	for i := range w.chunks {
		c := &w.chunks[i]
		if c.off < end && c.off+c.hdr.size() > w.pos {
			drop = i
		}
	}
	for _, c := range w.chunks[:drop+1] {
		w.lostOver += uint64(c.hdr.events)
	}
	w.chunks = append(w.chunks[:0], w.chunks[drop+1:]...)
	return drop + 1
}

// finishFile writes the index and trailer after the chunks and syncs.
func (w *Writer) finishFile() error {
	at := w.pos
	if w.hdr.Mode == Circular {
		at = w.hwm
	}
	if w.hdr.Mode != Circular || at+indexBytes(len(w.chunks)) <= w.hdr.MaxSize {
		le := binary.LittleEndian
		b := append(w.buf[:0], indexMagic...)
		b = le.AppendUint32(b, uint32(len(w.chunks)))
		for i := range w.chunks {
			c := &w.chunks[i]
			b = le.AppendUint64(b, uint64(c.off))
			var hb [chunkHeaderSize]byte
			c.hdr.marshal(hb[:])
			b = append(b, hb[:]...)
		}
		b = le.AppendUint32(b, crc(b))
		ilen := int64(len(b))
		b = append(b, trailerMagic...)
		b = le.AppendUint32(b, 0)
		b = le.AppendUint64(b, uint64(at))
		b = le.AppendUint64(b, uint64(ilen))
		b = le.AppendUint32(b, 0)
		b = le.AppendUint32(b, crc(b[ilen:]))
		w.buf = b
		if err := w.writeAt(b, at); err != nil {
			return err
		}
		at += int64(len(b))
	}
	// Circular: the ring's older bytes past the index; after a failed
	// write (salvage): a torn chunk's.
	if err := w.f.Truncate(at); err != nil {
		return fmt.Errorf("tracefile: %w", err)
	}
	return w.sync()
}

func (w *Writer) sync() error {
	if !w.unsynced {
		return nil
	}
	w.unsynced = false
	if err := w.f.Sync(); err != nil {
		return fmt.Errorf("tracefile: syncing %s: %w", w.f.Name(), err)
	}
	return nil
}
