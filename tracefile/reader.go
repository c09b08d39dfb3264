package tracefile

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"

	"github.com/klauspost/compress/zstd"

	"github.com/heapscope/heapscope/event"
)

// A Reader reads a trace file. Its memory does not grow with the trace's
// length: it holds one chunk at a time (and, for a circular file, the list
// of the ring's chunks).
//
// A Reader is not safe for concurrent use.
type Reader struct {
	f            io.ReaderAt
	closer       io.Closer // f, if Open opened it
	path         string
	size         int64
	hdr          Header
	dataStart    int64
	warnings     []string
	warned       map[string]bool
	moreWarnings int // warnings not kept

	// Where the chunks are: a valid index, a list (circular files), or
	// neither, in which case Replay walks the chunks from dataStart up to
	// scanEnd as Open did.
	indexOff int64
	indexN   int
	list     []indexEntry
	listed   bool
	scanEnd  int64

	dec       *zstd.Decoder
	timelines int // timeline sections decompressed, for tests
	comp      []byte
	raw       []byte
	block     []byte
	scan      []byte // resync's window
	tld       timelineDecoder
	snap      snapshotBuilder
	notes     noteBuilder
}

// Open opens a trace file and checks its header. A file that was cut short
// (its writer killed, the disk full) or damaged after its header opens
// without error: Replay delivers every intact chunk, and Warnings says what
// was lost. Errors wrap ErrCorrupt or ErrTruncated (as a *FormatError) or
// the error of opening the file.
func Open(path string) (*Reader, error) { return OpenCounting(path, nil) }

// OpenCounting is Open that also calls progress, unless it is nil, with
// the length of every read of the file, from the goroutine that reads: for
// a progress meter.
func OpenCounting(path string, progress func(n int64)) (*Reader, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("tracefile: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("tracefile: %w", err)
	}
	r, err := newReader(CountReads(f, progress), st.Size(), path)
	if err != nil {
		f.Close()
		return nil, err
	}
	r.closer = f
	return r, nil
}

// CountReads returns ra, calling progress with the length of every read
// through it (for a progress meter of a Reader made with NewReader); ra
// itself when progress is nil.
func CountReads(ra io.ReaderAt, progress func(n int64)) io.ReaderAt {
	if progress == nil {
		return ra
	}
	return countingReaderAt{ra, progress}
}

// countingReaderAt passes the length of each read to n.
type countingReaderAt struct {
	ra io.ReaderAt
	n  func(int64)
}

func (c countingReaderAt) ReadAt(b []byte, off int64) (int, error) {
	n, err := c.ra.ReadAt(b, off)
	c.n(int64(n))
	return n, err
}

// NewReader reads the trace of size bytes in ra: a trace in memory, say.
// See Open.
func NewReader(ra io.ReaderAt, size int64) (*Reader, error) {
	return newReader(ra, size, "trace")
}

func newReader(ra io.ReaderAt, size int64, name string) (*Reader, error) {
	r := &Reader{f: ra, path: name, size: size, warned: map[string]bool{}}
	if err := r.readHeader(); err != nil {
		return nil, err
	}
	var err error
	r.dec, err = zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true),
		zstd.WithDecoderMaxMemory(maxSectionRaw), zstd.WithDecoderMaxWindow(maxSectionRaw), zstd.WithDecodeAllCapLimit(true))
	if err != nil {
		return nil, fmt.Errorf("tracefile: %w", err)
	}
	r.tld.snap = &r.snap
	r.tld.notes = &r.notes
	r.tld.res = int64(r.hdr.TimeResolution)
	if err := r.locateChunks(); err != nil {
		r.dec.Close()
		return nil, err
	}
	return r, nil
}

func (r *Reader) formatErr(off int64, where, expected string, err error) error {
	return &FormatError{Path: r.path, Offset: off, Where: where, Expected: expected, Err: err}
}

// maxWarnings bounds the warnings kept: a file damaged throughout would
// otherwise make one per chunk.
const maxWarnings = 100

func (r *Reader) warn(format string, args ...any) {
	s := fmt.Sprintf(format, args...)
	switch {
	case r.warned[s]:
	case len(r.warnings) >= maxWarnings:
		r.moreWarnings++
	default:
		r.warned[s] = true
		r.warnings = append(r.warnings, s)
	}
}

// readAt reads len(b) bytes at off; a short read is io.ErrUnexpectedEOF.
func (r *Reader) readAt(b []byte, off int64) error {
	if len(b) == 0 {
		return nil // some ReaderAts say EOF at the end even for nothing
	}
	_, err := r.f.ReadAt(b, off)
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return err
}

// readErr describes a failed read: the file shorter than its size said is
// a truncated file, anything else an I/O error.
// defsRatio bounds how many times its size a file's definitions may
// decompress to, together: a trace's compress 2 to 10 times (zstd of
// delta-coded frames), and the heap model keeps what they hold; a file of
// a million identical stacks that compress to nothing (67 times here) is
// read, one whose definitions inflate beyond this is refused, whatever
// each section's bound (maxSectionRaw). Variables, for the tests.
var defsRatio, defsFloor int64 = 128, maxSectionRaw

// defsBudget is what the definitions of a file of size bytes may
// decompress to: defsRatio times its size, and at least defsFloor.
func defsBudget(size int64) int64 { return max(defsFloor, defsRatio*size) }

func (r *Reader) readErr(err error, off int64, where string) error {
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return r.formatErr(off, where, "more bytes (the file ended)", ErrTruncated)
	}
	return fmt.Errorf("tracefile: reading %s: %w", r.path, err)
}

// notTrace is what readHeader expected of a file without the magic, and
// what the file is when that is known (see foreign).
func (r *Reader) notTrace() string {
	// (A compressed block is up to 128 KiB: enough for the first.)
	first := make([]byte, min(r.size, 256<<10))
	if r.readAt(first, 0) == nil {
		if what := foreign(first); what != "" {
			return "the magic \"" + fileMagic + "\" (not a heapscope trace file: " + what + ")"
		}
	}
	return "the magic \"" + fileMagic + "\" (not a heapscope trace file)"
}

func (r *Reader) readHeader() error {
	var fixed [fileHeaderFixed]byte
	n := int(min(r.size, fileHeaderFixed))
	if err := r.readAt(fixed[:n], 0); err != nil {
		return r.readErr(err, 0, "file header")
	}
	if n < fileHeaderFixed {
		if bytes.HasPrefix([]byte(fileMagic), fixed[:min(n, len(fileMagic))]) {
			return r.formatErr(int64(n), "file header", fmt.Sprintf("%d bytes of header (the file has %d)", fileHeaderFixed, n), ErrTruncated)
		}
		return r.formatErr(0, "file header", r.notTrace(), ErrCorrupt)
	}
	body, bad := headerBodyLen(fixed[:])
	if bad != "" {
		if string(fixed[:len(fileMagic)]) != fileMagic {
			bad = r.notTrace()
		}
		return r.formatErr(0, "file header", bad, ErrCorrupt)
	}
	end := int64(fileHeaderFixed + body + 4)
	if end > r.size {
		return r.formatErr(r.size, "file header", fmt.Sprintf("%d bytes of header (the file has %d)", end, r.size), ErrTruncated)
	}
	b := make([]byte, end)
	if err := r.readAt(b, 0); err != nil {
		return r.readErr(err, 0, "file header")
	}
	if off, bad := unmarshalHeader(b, &r.hdr); bad != "" {
		return r.formatErr(int64(off), "file header", bad, ErrCorrupt)
	}
	r.dataStart = alignUp(end)
	return nil
}

// Header returns the header of the file.
func (r *Reader) Header() Header {
	h := r.hdr
	h.Properties = append([]Property(nil), h.Properties...)
	return h
}

// Warnings returns what Open and Replay found wrong but read past: data
// lost to a cut or damaged file, chunks skipped, and so on.
func (r *Reader) Warnings() []string {
	w := append([]string(nil), r.warnings...)
	if r.moreWarnings > 0 {
		w = append(w, fmt.Sprintf("and %d more warnings", r.moreWarnings))
	}
	return w
}

// Close closes the file (not the io.ReaderAt given to NewReader).
func (r *Reader) Close() error {
	if r.f == nil {
		return ErrClosed
	}
	var err error
	if r.closer != nil {
		err = r.closer.Close()
	}
	r.f = nil
	r.dec.Close()
	return err
}

// locateChunks finds the chunks: from the index if the file was closed
// properly, else by scanning.
func (r *Reader) locateChunks() error {
	if r.size < r.dataStart {
		r.warn("file cut at byte %d, inside the header's padding: no chunks", r.size)
		return nil
	}
	if r.readIndex() {
		if r.hdr.Mode == Circular {
			return r.listFromIndex()
		}
		return nil
	}
	if r.hdr.Mode == Circular {
		return r.scanRing()
	}
	return r.scanLinear()
}

// readIndex checks the trailer and the index it points at.
func (r *Reader) readIndex() bool {
	if r.size < r.dataStart+indexFixed+trailerSize {
		return false
	}
	var t [trailerSize]byte
	if r.readAt(t[:], r.size-trailerSize) != nil {
		return false
	}
	le := binary.LittleEndian
	if string(t[:4]) != trailerMagic || le.Uint32(t[28:]) != crc(t[:28]) {
		return false
	}
	off, n := int64(le.Uint64(t[8:])), int64(le.Uint64(t[16:]))
	if off < r.dataStart || off%align != 0 || n < indexFixed || off > r.size-trailerSize-n || off+n != r.size-trailerSize ||
		(n-indexFixed)%indexEntrySize != 0 {
		r.warn("the trailer points at an index that is not there; scanning the chunks instead")
		return false
	}
	// Check the index's checksum, reading it a block at a time.
	count := (n - indexFixed) / indexEntrySize
	var head [8]byte
	if r.readAt(head[:], off) != nil || string(head[:4]) != indexMagic || int64(le.Uint32(head[4:])) != count {
		r.warn("the index at byte %d is damaged; scanning the chunks instead", off)
		return false
	}
	sum := crc32Update(0, head[:])
	buf := r.blockBuf()
	for p, end := off+8, off+n-4; p < end; {
		k := min(int64(len(buf)), end-p)
		if r.readAt(buf[:k], p) != nil {
			return false
		}
		sum = crc32Update(sum, buf[:k])
		p += k
	}
	var c [4]byte
	if r.readAt(c[:], off+n-4) != nil || le.Uint32(c[:]) != sum {
		r.warn("the index at byte %d is damaged; scanning the chunks instead", off)
		return false
	}
	r.indexOff, r.indexN = off, int(count)
	return true
}

func (r *Reader) blockBuf() []byte {
	if r.block == nil {
		r.block = make([]byte, 64*indexEntrySize)
	}
	return r.block
}

// forIndex calls fn for each chunk listed in the index, in order.
func (r *Reader) forIndex(fn func(indexEntry) error) error {
	buf := r.blockBuf()
	per := len(buf) / indexEntrySize
	for i := 0; i < r.indexN; i += per {
		k := min(per, r.indexN-i)
		at := r.indexOff + 8 + int64(i)*indexEntrySize
		if err := r.readAt(buf[:k*indexEntrySize], at); err != nil {
			return r.readErr(err, at, "index")
		}
		for j := 0; j < k; j++ {
			b := buf[j*indexEntrySize:]
			var e indexEntry
			e.off = int64(binary.LittleEndian.Uint64(b))
			where := fmt.Sprintf("index entry %d", i+j)
			if bad := e.hdr.unmarshal(b[8:indexEntrySize]); bad != "" {
				return r.formatErr(at+int64(j*indexEntrySize), where, bad, ErrCorrupt)
			}
			if e.off < r.dataStart || e.off%align != 0 || e.off > r.indexOff-e.hdr.size() {
				return r.formatErr(at+int64(j*indexEntrySize), where, "a chunk offset between the header and the index", ErrCorrupt)
			}
			if err := fn(e); err != nil {
				return err
			}
		}
	}
	return nil
}

func (r *Reader) listFromIndex() error {
	r.listed = true
	err := r.forIndex(func(e indexEntry) error {
		r.list = append(r.list, e)
		return nil
	})
	if err != nil {
		return err
	}
	r.checkRing()
	return nil
}

// chunkAt reads and checks the chunk header at off. It returns what is
// wrong ("" if nothing) and whether the chunk, header valid, runs past end.
func (r *Reader) chunkAt(off, end int64, h *chunkHeader) (bad string, cut bool) {
	var b [chunkHeaderSize]byte
	if off+chunkHeaderSize > end {
		return "a chunk header", true
	}
	if err := r.readAt(b[:], off); err != nil {
		return "a chunk header", true
	}
	if bad := h.unmarshal(b[:]); bad != "" {
		return bad, false
	}
	if off+h.size() > end {
		return "", true
	}
	return "", false
}

// payloadOK reads the chunk's sections and checks their checksums.
func (r *Reader) payloadOK(off int64, h *chunkHeader) bool {
	n := h.payloadLen()
	buf := r.compBuf(n)
	if r.readAt(buf, off+chunkHeaderSize) != nil {
		return false
	}
	return crc(buf[:h.defsLen]) == h.defsCRC && crc(buf[h.defsLen:]) == h.tlCRC
}

func (r *Reader) compBuf(n int64) []byte {
	if int64(cap(r.comp)) < n {
		r.comp = make([]byte, grow(uint64(n)))
	}
	return r.comp[:n]
}

// resync looks for the next valid chunk (header and payload) at or after
// from, before end. It returns its offset, or -1.
func (r *Reader) resync(from, end int64) int64 {
	if r.scan == nil {
		r.scan = make([]byte, min(1<<20, r.size))
	}
	buf := r.scan
	for p := from; p+chunkHeaderSize <= end; {
		n := min(int64(len(buf)), end-p)
		if r.readAt(buf[:n], p) != nil {
			return -1
		}
		for i := 0; i+len(chunkMagic) <= int(n); {
			j := bytes.Index(buf[i:n], []byte(chunkMagic))
			if j < 0 {
				break
			}
			at := p + int64(i+j)
			i += j + 1
			if at%align != 0 {
				continue
			}
			var h chunkHeader
			if bad, cut := r.chunkAt(at, end, &h); bad == "" && !cut && r.payloadOK(at, &h) {
				return at
			}
		}
		if n < int64(len(buf)) {
			break
		}
		p += n - int64(len(chunkMagic))
	}
	return -1
}

// walk calls fn for each chunk of a sequential or newfile trace in file
// order, from dataStart to end, skipping damage. warn is told of what is
// lost; it may be nil.
func (r *Reader) walk(end int64, fn func(indexEntry) error, warn func(string, ...any)) error {
	if warn == nil {
		warn = func(string, ...any) {}
	}
	final := false // the last chunk was the last written: the index follows
	for off := r.dataStart; off < end; {
		var h chunkHeader
		bad, cut := r.chunkAt(off, end, &h)
		switch {
		case bad == "" && !cut:
			if err := fn(indexEntry{off, h}); err != nil {
				return err
			}
			off += h.size()
			final = h.flags&flagFinal != 0
			continue
		}
		var m [len(indexMagic)]byte
		if final || end-off >= int64(len(m)) && r.readAt(m[:], off) == nil && string(m[:]) == indexMagic {
			warn("file cut in its index at byte %d: no chunk lost", end)
			return nil
		}
		if cut && (bad == "" || end-off < chunkHeaderSize) {
			warn("file cut at byte %d: last %d bytes (one partial chunk) lost", end, end-off)
			return nil
		}
		next := r.resync(off+align, end)
		if next < 0 {
			warn("bytes %d to %d (%d bytes) hold no valid chunk (expected %s at byte %d): lost", off, end, end-off, bad, off)
			return nil
		}
		warn("bytes %d to %d (%d bytes) are damaged (expected %s at byte %d): skipped", off, next, next-off, bad, off)
		off = next
	}
	return nil
}

func (r *Reader) scanLinear() error {
	r.scanEnd = r.size
	n, final := 0, false
	r.walk(r.size, func(e indexEntry) error {
		n++
		final = e.hdr.flags&flagFinal != 0
		return nil
	}, r.warn)
	if !final {
		r.warn("the file has no index (its writer has not closed it: still tracing, killed, or out of disk space); recovered %s by scanning", chunks(n))
	}
	return nil
}

// scanRing finds the chunks of a circular file that has no index: every
// valid chunk in the file, of which it keeps the unbroken run of sequence
// numbers that ends with the newest.
func (r *Reader) scanRing() error {
	r.listed = true
	var found []indexEntry
	for off := r.dataStart; off+chunkHeaderSize <= r.size; {
		var h chunkHeader
		if bad, cut := r.chunkAt(off, r.size, &h); bad == "" && !cut && r.payloadOK(off, &h) {
			found = append(found, indexEntry{off, h})
			off += h.size()
			continue
		}
		next := r.resync(off+align, r.size)
		if next < 0 {
			break
		}
		off = next
	}
	sort.Slice(found, func(i, j int) bool { return found[i].hdr.seq < found[j].hdr.seq })
	start := len(found) - 1
	for start > 0 && found[start-1].hdr.seq+1 == found[start].hdr.seq {
		start--
	}
	if start >= 0 {
		r.list = found[start:]
	}
	// A ring closed properly may have had no room for its index.
	if n := len(r.list); n == 0 || r.list[n-1].hdr.flags&flagFinal == 0 {
		r.warn("the file has no index (its writer has not closed it: still tracing, killed, or out of disk space); recovered %s by scanning", chunks(n))
	}
	r.checkRing()
	return nil
}

// checkRing warns when a circular file's oldest chunks depend on
// definitions that no chunk holds.
func (r *Reader) checkRing() {
	if len(r.list) == 0 || r.list[0].hdr.seq == 0 || r.list[0].hdr.flags&flagFull != 0 {
		return
	}
	for _, e := range r.list {
		if e.hdr.flags&flagFull != 0 {
			return
		}
	}
	r.warn("the oldest chunks were overwritten and no chunk restates their definitions: some processes, modules and stacks may be missing")
}

// replayState forwards the definitions to the sink, keeping the stats for
// the end and, for a circular file's full chunk, holding its exits.
type replayState struct {
	event.Sink
	w         Window
	stats     event.Stats
	haveStats bool
	hold      bool
	held      []event.Exit

	// defsRaw sums the definitions decompressed (see defsBudget).
	defsRaw int64

	// After damage to definitions (see damage.go).
	pids      map[uint32]bool
	stackKeys []uint64            // stacks seen, until damage
	stacks    map[uint64]struct{} // stacks seen, after damage
	damaged   bool
	kept      []event.Event
	dropped   int // events
	unnamed   int // processes made up
}

func (s *replayState) Stats(x event.Stats) error {
	s.stats, s.haveStats = x, true
	return nil
}

func (s *replayState) exitDef(x event.Exit) error {
	if err := s.ensure(x.PID, x.Time); err != nil {
		return err
	}
	if s.hold {
		s.held = append(s.held, x)
		return nil
	}
	if !s.w.contains(x.Time) {
		return nil
	}
	return s.Sink.Exit(x)
}

// Replay sends the records of the trace to s, in order: the definitions of
// every chunk (processes, modules, stacks) and the events, exits and
// snapshots whose time is in w. Chunks whose time range misses w are not
// decompressed (only their definitions are). It ends with the last stats
// record. A damaged chunk is skipped with a warning; a chunk whose
// checksums hold but whose contents contradict the format is an error
// wrapping ErrCorrupt. An error from s stops the replay and is returned.
func (r *Reader) Replay(s event.Sink, w Window) error {
	if r.f == nil {
		return ErrClosed
	}
	st := &replayState{Sink: s, w: w}
	r.snap.reset()
	r.snap.dropped = 0
	r.notes = noteBuilder{}
	var err error
	switch {
	case r.listed:
		err = r.replayRing(st, w)
	case r.indexN > 0:
		err = r.forIndex(func(e indexEntry) error { return r.replayChunk(e, st, w, true, true) })
	default:
		err = r.walk(r.scanEnd, func(e indexEntry) error { return r.replayChunk(e, st, w, true, true) }, nil)
	}
	if err != nil {
		return err
	}
	r.warnDropped(st)
	if r.snap.dropped > 0 {
		r.warn("%d snapshot parts had lost their first part and were dropped", r.snap.dropped)
	}
	if r.snap.active {
		r.warn("the last snapshot (pid %d) was cut short and dropped", r.snap.cur.PID)
	}
	if r.notes.dropped > 0 {
		r.warn("%d parts of verdicts or censuses had lost their first part and were dropped", r.notes.dropped)
	}
	if r.notes.kind != 0 {
		r.warn("the last verdict or census (pid %d) was cut short and dropped", r.notes.pid)
	}
	if st.haveStats {
		return s.Stats(st.stats)
	}
	return nil
}

// replayRing replays a circular file's run of chunks. When the run starts
// with chunks older than its last full chunk, their definitions were
// overwritten: the full chunk restates them, so its definitions go first.
func (r *Reader) replayRing(st *replayState, w Window) error {
	full := -1
	for i, e := range r.list {
		if e.hdr.flags&flagFull != 0 {
			full = i
		}
	}
	if full <= 0 {
		for _, e := range r.list {
			if err := r.replayChunk(e, st, w, true, true); err != nil {
				return err
			}
		}
		return nil
	}
	st.hold = true
	if err := r.replayChunk(r.list[full], st, w, true, false); err != nil {
		return err
	}
	st.hold = false
	type exitKey struct {
		pid  uint32
		time int64
	}
	seen := map[exitKey]bool{}
	r.tld.exited = func(x event.Exit) { seen[exitKey{x.PID, x.Time}] = true }
	defer func() { r.tld.exited = nil }()
	for _, e := range r.list[:full] {
		if err := r.replayChunk(e, st, w, false, true); err != nil {
			return err
		}
	}
	r.tld.exited = nil
	for _, x := range st.held {
		if !seen[exitKey{x.PID, x.Time}] && w.contains(x.Time) {
			if err := st.Sink.Exit(x); err != nil {
				return err
			}
		}
	}
	st.held = nil
	if err := r.replayChunk(r.list[full], st, w, false, true); err != nil {
		return err
	}
	for _, e := range r.list[full+1:] {
		if err := r.replayChunk(e, st, w, true, true); err != nil {
			return err
		}
	}
	return nil
}

// replayChunk replays one chunk's definitions (if defs) and the part of
// its timeline in w (if tl).
func (r *Reader) replayChunk(e indexEntry, st *replayState, w Window, defs, tl bool) error {
	h := &e.hdr
	if h.flags&flagStop != 0 {
		r.warn("the trace reached its maximum size (%d bytes): the events after this were not written (counted as lost, %v)",
			r.hdr.MaxSize, event.LostFileLimit)
	}
	if h.flags&flagError != 0 {
		r.warn("writing the trace failed (a full disk?): the events after this were not written (counted as lost, %v)",
			event.LostFileLimit)
	}
	defs = defs && h.defsLen > 0
	tl = tl && h.hasTimeline() && w.overlaps(h.minTime, h.maxTime)
	if !defs && !tl {
		return nil
	}
	// Read what is needed in one go: the definitions come first.
	from, to := int64(h.defsLen), int64(h.defsLen)
	if defs {
		from = 0
	}
	if tl {
		to += int64(h.tlLen)
	}
	buf := r.compBuf(to - from)
	if err := r.readAt(buf, e.off+chunkHeaderSize+from); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			r.warn("chunk at byte %d runs past the end of the file: skipped", e.off)
			return nil
		}
		return fmt.Errorf("tracefile: %w", err)
	}
	if defs {
		// What the definitions decompress to is what their reader keeps
		// (stacks, modules, processes): bounded by the file's size.
		st.defsRaw += int64(h.defsRaw)
		if limit := defsBudget(r.size); st.defsRaw > limit {
			return r.formatErr(e.off, "definitions", fmt.Sprintf("definitions that decompress to at most %d bytes, %d times the file's size (they decompress to more: a decompression bomb?)",
				limit, defsRatio), ErrCorrupt)
		}
		var raw []byte
		var err error
		if comp := buf[:h.defsLen]; crc(comp) != h.defsCRC {
			// Keep the intact frames, and the timeline.
			raw = r.recoverDefs(e, comp, h.defsRaw)
			st.damage()
		} else if raw, err = r.section(e, comp, h.defsCRC, h.defsRaw, "definitions"); err != nil {
			return err
		}
		if err := decodeDefs(raw, st); err != nil {
			return r.sectionErr(e, "definitions", err)
		}
	}
	if tl {
		sec := buf[to-from-int64(h.tlLen):]
		if crc(sec) != h.tlCRC {
			r.warn("chunk at byte %d: the timeline section's checksum does not match: skipped", e.off)
			return nil
		}
		r.timelines++
		if err := r.tld.decode(sec, h.tlRaw, r.dec, w, st.timelineSink()); err != nil {
			return r.sectionErr(e, "timeline", err)
		}
	}
	return nil
}

// section checks and decompresses one section. A checksum mismatch is a
// warning (nil, nil): the chunk is skipped.
func (r *Reader) section(e indexEntry, comp []byte, sum, rawLen uint32, name string) ([]byte, error) {
	if crc(comp) != sum {
		r.warn("chunk at byte %d: the %s section's checksum does not match: skipped", e.off, name)
		return nil, nil
	}
	if uint32(cap(r.raw)) < rawLen {
		r.raw = make([]byte, 0, grow(uint64(rawLen)))
	}
	raw, err := r.dec.DecodeAll(comp, r.raw[:0])
	if err != nil || uint32(len(raw)) != rawLen {
		return nil, r.formatErr(e.off, fmt.Sprintf("chunk %d %s", e.hdr.seq, name),
			fmt.Sprintf("a zstd frame of %d bytes (%v)", rawLen, err), ErrCorrupt)
	}
	return raw, nil
}

func (r *Reader) sectionErr(e indexEntry, name string, err error) error {
	var de *decodeError
	if errors.As(err, &de) {
		return r.formatErr(e.off, fmt.Sprintf("chunk %d %s, %s", e.hdr.seq, name, de.where), de.expected, ErrCorrupt)
	}
	return err // from the sink
}

// chunks says "1 chunk" or "n chunks".
func chunks(n int) string {
	if n == 1 {
		return "1 chunk"
	}
	return fmt.Sprintf("%d chunks", n)
}
