package tracefile

import (
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/internal/errs"
)

// MinMaxSize is the smallest MaxSize a Writer accepts.
const MinMaxSize = 64 << 10

// Limits of Options.ChunkSize.
const (
	DefaultChunkSize = 1 << 20
	minChunkSize     = 4 << 10
	maxChunkSize     = 16 << 20
)

// DefaultTimeResolution is the default Options.TimeResolution. Measured
// on a python3 run (see TestCompactVsHeaptrack), a trace takes about 0.06
// bytes per event at 10 µs, 0.11 at 1 µs and 1.2 with exact times; 10 µs is
// a thousand times finer than heaptrack's timeline.
const DefaultTimeResolution = 10 * time.Microsecond

// DefaultFlushInterval is how often a Writer flushes on its own unless told
// otherwise.
const DefaultFlushInterval = time.Second

// Options tune a Writer. The zero value is a good default.
type Options struct {
	// ChunkSize is the uncompressed size at which the writer finishes a
	// chunk, compresses it and writes it out: a larger chunk compresses
	// better, a smaller one loses less when the writer is killed and lets a
	// reader skip time more finely. 0 means DefaultChunkSize; at most 16 MiB.
	// It is lowered to fit MaxSize (an eighth of it in circular mode, a
	// quarter otherwise).
	ChunkSize int
	// TimeResolution is the precision kept of the times of events, exits
	// and snapshots: each is rounded towards zero to a multiple of it (the
	// order of records is always kept exactly). Times are what compresses
	// least: the gaps between allocation calls jitter by tens of ns, about
	// 7 bits of noise per event, more than everything else in an event
	// together. 0 means DefaultTimeResolution; 1 (ns) keeps times exactly.
	// At most 1 s.
	TimeResolution time.Duration
	// FlushInterval is how often the writer flushes (see Flush) on its own,
	// so that data reaches the disk at least that often even if nobody calls
	// Flush. 0 means DefaultFlushInterval; a negative value turns the timer
	// off.
	FlushInterval time.Duration
	// Replace lets Create replace a path that is a symbolic link (the link
	// itself is replaced, never followed) or a file of another user.
	// Without it Create refuses them with ErrUnsafePath. Something other
	// than a regular file is never replaced.
	Replace bool
	// Hold makes the first file under a temporary name in its folder, and
	// leaves the path untouched until Commit: a Writer closed before Commit
	// removes it, so a session that fails to start creates and removes
	// nothing.
	Hold bool
}

// A Writer writes a trace file (or, in NewFile mode, a series of them). It
// is an event.Sink; its methods are safe for concurrent use. A Writer that
// meets an I/O error returns it from that call and every later one.
//
// Records are gathered into a chunk until it reaches the chunk size or
// Flush is called; each chunk is compressed and written whole, so a file
// cut anywhere (the writer killed, the disk full) keeps every chunk before
// the cut.
type Writer struct {
	mu   sync.Mutex
	cond *sync.Cond // on mu: the compressor's job was taken or is done

	hdr       Header
	pattern   string // the path given to Create
	chunkSize int
	f         *os.File
	pending   *pendingFile // f, until Commit gives it its name
	replace   bool         // Options.Replace
	files     []string
	dataStart int64 // end of the current file's header
	pos       int64 // where the next chunk goes
	hwm       int64 // circular: the end of the furthest chunk written
	ringEnd   int64 // circular: chunks end at or before this
	written   int64 // bytes written, all files
	unsynced  bool  // bytes were written since the last sync
	seq       uint64
	chunks    []indexEntry // the current file's chunks (circular: the live ring, oldest first)
	reserve   int64        // sequential, newfile: room kept for a stats chunk

	// The chunk being filled.
	tl         *timelineEncoder
	defs       []byte   // definitions
	defCuts    []int    // where in defs a new zstd frame begins (see defFrameRaw)
	statsDirty bool     // a stats record is due
	exited     []uint32 // pids with an Exit in the timeline
	lastTime   int64

	// The compressor: it compresses the last chunk filled and writes it
	// while the next one fills.
	job      *job
	busy     bool // a job is given and not done
	quit     bool
	spare    job // the buffers of the last job done, for reuse
	bgDone   chan struct{}
	enc      *zstd.Encoder
	defEnc   *zstd.Encoder // for definitions and stats: frames with checksums
	fullCuts []int
	coder    *streamCoder // the timelines' streams, with enc
	tlComp   []byte
	defComp  []byte
	scratch  []byte
	full     []byte
	fullComp []byte
	buf      []byte

	// The definitions written so far, kept in circular and newfile modes to
	// write them again (in a chunk flagged full) where a reader of the rest
	// of the file would otherwise miss them.
	keep     bool
	log      []byte
	entries  []logEntry
	byPID    map[uint32][]int // live entries of each process
	cutEntry int              // entries before this one were made before the chunk being filled

	stats     event.Stats // the last the session passed
	lostLimit uint64
	lostOver  uint64
	given     uint64 // events passed to Events
	kept      uint64 // events in the chunks written whole
	stopped   bool

	err       error
	closed    bool
	stopFlush chan struct{}
	flushDone chan struct{}
}

type indexEntry struct {
	off int64
	hdr chunkHeader
}

type logEntry struct {
	pid        uint32
	start, end int
	exit       bool // an exit record
	dead       bool // the process exited before the last chunk: no new file needs it
}

// Create creates the trace file path, mode 0600, and writes h to it. The
// file is new: an existing path is replaced, never written into (see
// Options.Replace and Options.Hold).
// In NewFile mode path must hold one %d, replaced by 1, 2, ... for the
// successive files. It returns an error wrapping errs.ErrInvalidFlags for
// RealTime mode (which writes no file), an unknown mode, a NewFile path
// without %d, a missing or too small MaxSize (see MinMaxSize) or bad
// Options.
func Create(path string, h Header, o Options) (*Writer, error) {
	if err := checkConfig(path, &h, &o); err != nil {
		return nil, err
	}
	// At coarse resolutions the streams that repeat (stacks, addresses,
	// times) are where the bytes go, and zstd's better level finds more of
	// their repeats: a python3 run's trace 6% smaller than at the fastest
	// level, for 5–7 ns more CPU per event (BenchmarkWrite; churn through
	// the preload collector) and no slower reading. Times to the
	// nanosecond repeat little; there the search cost ~25 ns per event
	// more for nothing, so they get the fastest level.
	level := zstd.SpeedBetterCompression
	if h.TimeResolution < time.Microsecond {
		level = zstd.SpeedFastest
	}
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(level), zstd.WithAllLitEntropyCompression(true),
		zstd.WithEncoderConcurrency(1), zstd.WithEncoderCRC(false))
	if err != nil {
		return nil, fmt.Errorf("tracefile: %w", err)
	}
	// A definitions frame carries zstd's content checksum: a reader of a
	// damaged section keeps the frames whose checksum holds (see
	// defFrameRaw).
	defEnc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(level), zstd.WithAllLitEntropyCompression(true),
		zstd.WithEncoderConcurrency(1), zstd.WithEncoderCRC(true))
	if err != nil {
		enc.Close()
		return nil, fmt.Errorf("tracefile: %w", err)
	}
	w := &Writer{
		defEnc:    defEnc,
		hdr:       h,
		pattern:   path,
		chunkSize: o.ChunkSize,
		tl:        newTimelineEncoder(int64(h.TimeResolution)),
		keep:      h.Mode == Circular || h.Mode == NewFile,
		byPID:     make(map[uint32][]int),
		enc:       enc,
		coder:     newStreamCoder(enc),
		bgDone:    make(chan struct{}),
		replace:   o.Replace,
	}
	w.cond = sync.NewCond(&w.mu)
	w.spare.tl = newTimelineEncoder(int64(h.TimeResolution))
	w.reserve = w.statsChunkBound()
	if err := w.openFile(); err != nil {
		enc.Close()
		defEnc.Close()
		return nil, err
	}
	if !o.Hold {
		if err := w.commitFile(); err != nil {
			w.f.Close()
			w.pending.discard()
			enc.Close()
			return nil, err
		}
	}
	go w.compressor()
	if o.FlushInterval > 0 {
		w.stopFlush, w.flushDone = make(chan struct{}), make(chan struct{})
		go w.flusher(o.FlushInterval)
	}
	return w, nil
}

func checkConfig(path string, h *Header, o *Options) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("tracefile: "+format+": %w", append(args, errs.ErrInvalidFlags)...)
	}
	switch h.Mode {
	case Sequential, Circular, NewFile:
	case RealTime:
		return bad("real-time mode writes no file")
	default:
		return bad("unknown mode %d", h.Mode)
	}
	if h.MaxSize < 0 || (h.MaxSize > 0 && h.MaxSize < MinMaxSize) {
		return bad("maximum size %d: want 0 (unlimited) or at least %d", h.MaxSize, MinMaxSize)
	}
	if h.Mode != Sequential && h.MaxSize == 0 {
		return bad("%v mode needs a maximum size", h.Mode)
	}
	if h.Mode == NewFile && strings.Count(path, "%d") != 1 {
		return bad("newfile mode needs one %%d in the path %q", path)
	}
	if o.ChunkSize < 0 || o.ChunkSize > maxChunkSize {
		return bad("chunk size %d: want 0 (default) up to %d", o.ChunkSize, maxChunkSize)
	}
	if o.ChunkSize == 0 {
		o.ChunkSize = DefaultChunkSize
	}
	if h.MaxSize > 0 {
		limit := h.MaxSize / 4
		if h.Mode == Circular {
			limit = h.MaxSize / 8
		}
		o.ChunkSize = int(min(int64(o.ChunkSize), limit))
	}
	o.ChunkSize = max(o.ChunkSize, minChunkSize)
	if o.FlushInterval == 0 {
		o.FlushInterval = DefaultFlushInterval
	}
	if o.TimeResolution < 0 || int64(o.TimeResolution) > maxTimeResolution {
		return bad("time resolution %v: want 0 (the default) or 1ns up to 1s", o.TimeResolution)
	}
	if o.TimeResolution == 0 {
		o.TimeResolution = DefaultTimeResolution
	}
	h.Part, h.Version, h.TimeResolution = 0, version, o.TimeResolution
	return nil
}

// statsChunkBound is the most a chunk holding only a stats record can take.
func (w *Writer) statsChunkBound() int64 {
	s := event.Stats{Time: math.MinInt64, Delivered: math.MaxUint64, StacksLost: math.MaxUint64,
		StacksCut: math.MaxUint64, StacksCutDepth: math.MaxUint64, StacksCutNoTable: math.MaxUint64,
		Unmatched: math.MaxUint64, Bytes: math.MaxUint64}
	for i := range s.Lost {
		s.Lost[i] = math.MaxUint64
	}
	raw := appendStats(nil, &s)
	return chunkHeaderSize + alignUp(int64(len(w.defEnc.EncodeAll(raw, nil)))+16)
}

func (w *Writer) filePath(part int) string {
	if w.hdr.Mode != NewFile {
		return w.pattern
	}
	return strings.Replace(w.pattern, "%d", strconv.Itoa(part), 1)
}

// openFile starts the next file and writes its header.
func (w *Writer) openFile() error {
	if w.hdr.Mode == NewFile {
		w.hdr.Part++
	}
	path := w.filePath(w.hdr.Part)
	p, err := createPending(path, w.replace)
	if err != nil {
		return err
	}
	f := p.f
	hb := marshalHeader(&w.hdr)
	if _, err := f.WriteAt(hb, 0); err != nil {
		f.Close()
		p.discard()
		return fmt.Errorf("tracefile: writing header of %s: %w", path, err)
	}
	if w.hdr.Part > 1 {
		// The next file of a series: the session has started (a held
		// first file that filled up before Commit takes its name now).
		if err := w.commitFile(); err != nil {
			f.Close()
			p.discard()
			return err
		}
	}
	w.f, w.pending = f, p
	if w.hdr.Part > 1 {
		if err := w.commitFile(); err != nil {
			return err
		}
	}
	w.written += int64(len(hb))
	w.dataStart, w.pos, w.hwm = int64(len(hb)), int64(len(hb)), int64(len(hb))
	w.chunks = w.chunks[:0]
	if w.hdr.Mode == Circular {
		room := w.hdr.MaxSize - trailerSize - w.dataStart
		w.ringEnd = w.dataStart + (room-max(4096, room/32))&^(align-1)
	}
	return nil
}

func (w *Writer) flusher(every time.Duration) {
	defer close(w.flushDone)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-w.stopFlush:
			return
		case <-t.C:
			w.Flush() // an error sticks and is returned by the next call
		}
	}
}

func (w *Writer) lock() error {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return ErrClosed
	}
	if w.err != nil {
		w.mu.Unlock()
		return w.err
	}
	return nil
}

// Process implements event.Sink.
func (w *Writer) Process(p event.Process) error {
	if err := w.lock(); err != nil {
		return err
	}
	defer w.mu.Unlock()
	return w.def(p.PID, func(b []byte) []byte { return appendProcess(b, &p) })
}

// Module implements event.Sink.
func (w *Writer) Module(m event.Module) error {
	if err := w.lock(); err != nil {
		return err
	}
	defer w.mu.Unlock()
	return w.def(m.PID, func(b []byte) []byte { return appendModule(b, &m) })
}

// Stack implements event.Sink.
func (w *Writer) Stack(s event.Stack) error {
	if err := w.lock(); err != nil {
		return err
	}
	defer w.mu.Unlock()
	if len(s.Frames) > maxFrames {
		return fmt.Errorf("tracefile: a stack of %d frames exceeds the format's limit of %d", len(s.Frames), maxFrames)
	}
	return w.def(s.PID, func(b []byte) []byte { return appendStack(b, &s) })
}

// def adds a definition for pid.
func (w *Writer) def(pid uint32, encode func([]byte) []byte) error {
	if w.stopped {
		return nil
	}
	for _, p := range w.exited {
		// The pid was reused after an exit in this chunk. A reader replays a
		// chunk's definitions before its timeline, so the new process's
		// definitions must not share a chunk with the old one's events.
		if p == pid {
			if err := w.cut(0); err != nil {
				return err
			}
			break
		}
	}
	start := len(w.defs)
	if last := lastCut(w.defCuts); start-last >= defFrameRaw {
		w.defCuts = append(w.defCuts, start)
	}
	w.defs = encode(w.defs)
	if n := len(w.defs) - start; n > maxDefRecord {
		w.defs = w.defs[:start]
		return fmt.Errorf("tracefile: a definition of %d bytes exceeds the format's limit of %d", n, maxDefRecord)
	}
	if w.keep {
		if len(w.log) > maxSectionRaw-maxDefRecord {
			w.err = fmt.Errorf("tracefile: more than %d bytes of definitions: too many for %v mode", maxSectionRaw-maxDefRecord, w.hdr.Mode)
			return w.err
		}
		w.remember(pid, w.defs[start:], false)
	}
	return w.cutIfFull()
}

// defFrameRaw is about the most bytes of definitions in one zstd frame. A
// section's frames each start at a record and carry a checksum of their
// own, so that a reader of a damaged section loses only the records of the
// frames that are damaged, not the section's every process, module and
// stack. Smaller frames lose less and compress worse: on the python3 run
// of TestCompactVsHeaptrack, frames of 64 KiB made the trace 1% larger
// than one frame per section, of 16 KiB 6%, of 4 KiB 13%.
const defFrameRaw = 64 << 10

func lastCut(cuts []int) int {
	if len(cuts) == 0 {
		return 0
	}
	return cuts[len(cuts)-1]
}

// encodeFrames compresses raw with enc into dst, one frame from each cut
// (an offset in raw where a record begins) to the next.
func encodeFrames(enc *zstd.Encoder, raw []byte, cuts []int, dst []byte) []byte {
	from := 0
	for _, c := range append(cuts, len(raw)) {
		if c > from {
			dst = enc.EncodeAll(raw[from:c], dst)
			from = c
		}
	}
	return dst
}

func (w *Writer) remember(pid uint32, rec []byte, exit bool) {
	w.entries = append(w.entries, logEntry{pid: pid, start: len(w.log), end: len(w.log) + len(rec), exit: exit})
	w.log = append(w.log, rec...)
	w.byPID[pid] = append(w.byPID[pid], len(w.entries)-1)
}

// Exit implements event.Sink.
func (w *Writer) Exit(x event.Exit) error {
	if err := w.lock(); err != nil {
		return err
	}
	defer w.mu.Unlock()
	if w.stopped {
		return nil
	}
	w.tl.exit(&x)
	w.exited = append(w.exited, x.PID)
	w.lastTime = max(w.lastTime, x.Time)
	if w.keep {
		w.remember(x.PID, appendExitDef(nil, &x), true)
	}
	return w.cutIfFull()
}

// Events implements event.Sink. It does not keep evs. After an error the
// events are counted (as lost, see FileStats) and the error returned.
func (w *Writer) Events(evs []event.Event) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return ErrClosed
	}
	w.given += uint64(len(evs))
	if w.err != nil {
		return w.err
	}
	if w.stopped {
		w.lostLimit += uint64(len(evs))
		return nil
	}
	for len(evs) > 0 {
		n := min(len(evs), 512)
		w.tl.addEvents(evs[:n])
		evs = evs[n:]
		w.lastTime = max(w.lastTime, w.tl.maxTime)
		if err := w.cutIfFull(); err != nil {
			return err
		}
	}
	return nil
}

// snapshotPartLen is the most live blocks (or stack totals) in one part of
// a snapshot: a part takes at most a few hundred KiB.
const snapshotPartLen = 8192

// Snapshot implements event.Sink. A snapshot larger than a chunk is stored
// in parts, which the reader joins again.
func (w *Writer) Snapshot(s event.Snapshot) error {
	if err := w.lock(); err != nil {
		return err
	}
	defer w.mu.Unlock()
	if len(s.Live) > maxSnapshotEntries || len(s.Totals) > maxSnapshotEntries {
		return fmt.Errorf("tracefile: snapshot of %d live blocks and %d stack totals: the format holds at most %d of each",
			len(s.Live), len(s.Totals), maxSnapshotEntries)
	}
	if w.stopped {
		return nil
	}
	live, totals := s.Live, s.Totals
	flags := byte(snapFirst)
	for {
		nl, nt := min(len(live), snapshotPartLen), min(len(totals), snapshotPartLen)
		last := nl == len(live) && nt == len(totals)
		if last {
			flags |= snapLast
		}
		w.tl.snapshotPart(&s, flags, live[:nl], totals[:nt])
		live, totals = live[nl:], totals[nt:]
		flags = 0
		if err := w.cutIfFull(); err != nil {
			return err
		}
		if last || w.stopped {
			break
		}
	}
	w.lastTime = max(w.lastTime, s.Time)
	return nil
}

// FileStats returns s, a session's counts, as they stand for the file:
// the events the writer kept in no file (after a sequential file reached
// its maximum size, overwritten in a circular one, or not written because
// writing failed, e.g. a full disk) moved from delivered to lost, so that
// delivered is what reached the file and delivered + lost stays the calls
// made. The trace's stats records hold the same.
func (w *Writer) FileStats(s event.Stats) event.Stats {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.fileStats(s)
}

// fileStats is FileStats with mu held.
func (w *Writer) fileStats(s event.Stats) event.Stats {
	// A provider's count lags (it comes every flush interval): the
	// events the writer was given are delivered at least.
	s.Delivered = max(s.Delivered, w.given)
	if w.err != nil {
		// The file stopped at an error: what it holds is the chunks
		// written whole, and everything else given or delivered after is
		// lost (counted as the file's limit: the file took no more).
		s.Lost[event.LostFileLimit] += s.Delivered - min(s.Delivered, w.kept)
		s.Lost[event.LostOverwritten] += w.lostOver
		s.Delivered = min(s.Delivered, w.kept) - min(w.kept, w.lostOver)
		return s
	}
	s.Lost[event.LostFileLimit] += w.lostLimit
	s.Lost[event.LostOverwritten] += w.lostOver
	s.Delivered -= min(s.Delivered, w.lostLimit+w.lostOver)
	return s
}

// Stats implements event.Sink. s is the provider's cumulative count; the
// writer adds what it lost itself (event.LostFileLimit,
// event.LostOverwritten), taking those from s.Delivered, and the bytes
// written before storing it.
func (w *Writer) Stats(s event.Stats) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return ErrClosed
	}
	w.stats = s // also after an error: Close may still write them
	if w.err != nil {
		return w.err
	}
	if w.stopped {
		return nil
	}
	w.statsDirty = true
	return w.cutIfFull()
}

func (w *Writer) cutIfFull() error {
	if w.tl.rawSize()+len(w.defs) >= w.chunkSize {
		return w.cut(0)
	}
	return nil
}

// Flush finishes the current chunk, writes it and syncs the file, so that
// everything passed to the Writer so far survives the writer's death.
func (w *Writer) Flush() error {
	if err := w.lock(); err != nil {
		return err
	}
	defer w.mu.Unlock()
	if err := w.cut(0); err != nil {
		return err
	}
	if err := w.wait(); err != nil {
		return err
	}
	return w.sync()
}

// Close writes the last chunk, with the final stats, then the index, and
// closes the file. Stats passed before Close are in the file even when a
// sequential file is full: room for them is kept.
func (w *Writer) Close() error {
	if w.stopFlush != nil {
		close(w.stopFlush)
		<-w.flushDone
		w.stopFlush = nil
	}
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return ErrClosed
	}
	w.closed = true
	err := w.err
	if err == nil {
		w.statsDirty = true
		err = w.cut(flagFinal)
	}
	if err == nil {
		err = w.wait()
	}
	if err == nil {
		err = w.finishFile()
	} else {
		w.salvage()
	}
	w.quit = true
	w.cond.Broadcast()
	w.mu.Unlock()
	<-w.bgDone
	w.enc.Close()
	w.defEnc.Close()
	if cerr := w.f.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("tracefile: %w", cerr)
	}
	w.pending.discard() // never committed: nothing was named
	return err
}

// Commit gives a file created with Options.Hold its name, replacing what the
// path held. It does nothing for a Writer whose file already has it.
func (w *Writer) Commit() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return ErrClosed
	}
	return w.commitFile()
}

func (w *Writer) commitFile() error {
	if w.pending == nil || w.pending.named() {
		return nil
	}
	if err := w.pending.commit(); err != nil {
		return err
	}
	w.files = append(w.files, w.pending.path)
	return nil
}

// Written returns the number of bytes written so far, in all files,
// including bytes later overwritten in circular mode.
func (w *Writer) Written() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.written
}

// Files returns the paths of the files written so far.
func (w *Writer) Files() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.files...)
}
