// Package load runs a trace file through the heap model (package analyze),
// decoding it on several goroutines: what a report, the index of serve and
// the CLI's summaries start from.
//
// One reader decodes the definitions (processes, modules, stacks) and hands
// them over in order; with Options.Workers > 1 the events are then decoded in
// slices of time, each by a reader of its own, and fed to the model in order.
// An Observer sees the definitions as they are read, so that work on them
// (symbolization) runs while the events are decoded.
package load

import (
	"errors"
	"fmt"
	"math"
	pathpkg "path"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/heapscope/heapscope/analyze"
	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/tracefile"
)

// ErrNoProcess is wrapped by Trace's error when Options.Processes selects
// no process of the trace.
var ErrNoProcess = errors.New("no such process in the trace")

// Options tune Trace. The zero value reads the whole trace.
type Options struct {
	// From and To bound the window analysed, from the start of the trace
	// (the header's MonoStart); 0 leaves that side open. See package
	// analyze for what a window means.
	From, To time.Duration
	// Workers is how many goroutines decode the file (0: GOMAXPROCS-1,
	// at least 1: the model takes a core of its own).
	Workers int
	// TimelinePoints bounds the timeline (0: analyze's default).
	TimelinePoints int
	// Processes selects the processes analysed (the zero value: all).
	// Trace fails with ErrNoProcess when it selects none.
	Processes analyze.Processes
	// Observer, when set, sees the definitions as they are read.
	Observer Observer

	// ReadProgress, when set, is called with the length of every read of
	// the file, from several goroutines: for a progress meter. The
	// definitions are read by every worker, so the sum may pass the
	// file's size.
	ReadProgress func(n int64)
}

// Observer sees a trace's definitions as they are read, from the reading
// goroutines, each record once and in the file's order, before the model
// does: work on them can start while the events are decoded.
type Observer interface {
	Module(event.Module)
	Stack(event.Stack) // its Frames are the observer's to keep
	// EventsStarted says that the definitions before the first events
	// have been passed on.
	EventsStarted()
}

// Result is what Trace read.
type Result struct {
	Header  tracefile.Header
	Profile *analyze.Profile
	// Warnings are the readers' (a truncated file, a damaged chunk), each
	// once.
	Warnings []string
}

// Trace reads the trace file at path through the heap model and returns its
// profile. Errors wrap the reader's (os.ErrNotExist for a missing file) and
// ErrNoProcess.
func Trace(path string, o Options) (*Result, error) {
	if o.To != 0 && o.To <= o.From {
		return nil, fmt.Errorf("load: the window's end (%s) is not after its start (%s)", o.To, o.From)
	}
	open := func(path string) (*tracefile.Reader, error) { return tracefile.OpenCounting(path, o.ReadProgress) }
	r, err := open(path)
	if err != nil {
		return nil, err
	}
	h := r.Header()
	var win tracefile.Window
	if o.From > 0 {
		win.From = h.MonoStart + int64(o.From)
	}
	if o.To > 0 {
		win.To = h.MonoStart + int64(o.To)
	}
	workers := o.Workers
	if workers <= 0 {
		// The model takes a core of its own.
		workers = max(1, runtime.GOMAXPROCS(0)-1)
	}
	m := analyze.New(analyze.Options{From: win.From, To: win.To, TimelinePoints: o.TimelinePoints, SampleRate: h.SampleRate})
	var sink event.Sink = m
	var filter *analyze.Filter
	if !o.Processes.All() {
		filter = analyze.NewFilter(m, o.Processes)
		sink = filter
	}

	pieces := []tracefile.Window{win}
	if workers > 1 {
		// The definitions first (a window after every chunk), for the
		// model, the observer, and the end of the trace to cut at.
		defs := &defsPass{Sink: sink, obs: o.Observer, frames: &interner{}}
		err = r.Replay(defs, tracefile.Window{From: math.MaxInt64})
		if o.Observer != nil {
			o.Observer.EventsStarted() // every stack is passed on
		}
		end := int64(0)
		if defs.hasStats && defs.stats.Time > h.MonoStart {
			end = defs.stats.Time
		}
		pieces = slices(win, h.MonoStart, end, workers)
	}
	warnings := r.Warnings()
	r.Close() // its buffers are not needed while the pieces are read
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	ws, sawSnapshots, err := replayPieces(path, open, pieces, sink, workers, o.Observer, &interner{})
	warnings = append(warnings, ws...)
	if err == nil && sawSnapshots && win.From != 0 {
		// An aggregate trace's totals in a window are differences from
		// the last snapshot before it, which the windowed pass skipped.
		err = replaySnapshots(open, path, win.From, sink)
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	prof := m.Profile()
	if filter != nil && len(prof.Processes) == 0 {
		var have []string
		for _, p := range filter.Seen() {
			have = append(have, fmt.Sprintf("%d (%s)", p.PID, pathpkg.Base(p.Exe)))
		}
		return nil, fmt.Errorf("%s has no process of %s; its processes: %s: %w", path, o.Processes, strings.Join(dedup(have), ", "), ErrNoProcess)
	}
	return &Result{Header: h, Profile: prof, Warnings: dedup(warnings)}, nil
}

// defsPass passes the definitions to the model and the observer.
type defsPass struct {
	event.Sink
	obs      Observer
	frames   *interner
	stats    event.Stats
	hasStats bool
}

// interner keeps one copy of each distinct list of frames: the reader
// reuses a Stack's frames once it returns (event.Sink), so what is handed
// on (to the observer, through a piece's queue) is a copy, and stacks of
// the same frames, which a trace can hold by the million in a few bytes,
// share it. Used by one goroutine at a time: the one that carries the
// definitions.
type interner struct {
	seen map[uint64][]uint64 // by analyze.FrameHash: the first list with it
}

func same(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// keep returns a copy of f that is never written: f's own, when one was
// kept before.
func (n *interner) keep(f []uint64) []uint64 {
	if len(f) == 0 {
		return nil
	}
	h := analyze.FrameHash(f)
	if s, ok := n.seen[h]; ok && same(s, f) {
		return s
	}
	s := append([]uint64(nil), f...)
	if n.seen == nil {
		n.seen = map[uint64][]uint64{}
	}
	if _, ok := n.seen[h]; !ok {
		n.seen[h] = s
	}
	return s
}

func (d *defsPass) Module(mod event.Module) error {
	if d.obs != nil {
		d.obs.Module(mod)
	}
	return d.Sink.Module(mod)
}

func (d *defsPass) Stack(st event.Stack) error {
	if d.obs != nil {
		st.Frames = d.frames.keep(st.Frames)
		d.obs.Stack(st)
	}
	return d.Sink.Stack(st)
}

func (d *defsPass) Stats(s event.Stats) error {
	d.stats, d.hasStats = s, true
	return d.Sink.Stats(s)
}

// slices cuts the window into pieces of equal time between the trace's
// start and end, one per worker: each piece's replay decodes the
// definitions of the whole file again, so more pieces would cost more than
// the balance they buy. The first piece starts where the window does
// (open: 0) and the last ends where it does, so every record is in exactly
// one piece whatever the estimate of the end. Without an end, the window
// is one piece.
func slices(win tracefile.Window, start, end int64, workers int) []tracefile.Window {
	lo, hi := max(win.From, start), end
	if win.To != 0 && (hi == 0 || win.To < hi) {
		hi = win.To
	}
	n := workers
	if workers < 2 || end == 0 || hi-lo < int64(n)*int64(time.Millisecond) {
		return []tracefile.Window{win}
	}
	out := make([]tracefile.Window, n)
	step := (hi - lo) / int64(n)
	for i := range out {
		out[i] = tracefile.Window{From: lo + int64(i)*step, To: lo + int64(i+1)*step}
	}
	out[0].From = win.From
	out[n-1].To = win.To
	return out
}

// piece is one slice's records, decoded by a worker, consumed in order.
type piece struct {
	w   tracefile.Window
	ch  chan pieceRec
	err error // set before ch is closed
}

type pieceRec struct {
	evs  []event.Event
	exit *event.Exit
	snap *event.Snapshot
	def  any // a definition or stats record, when the piece carries them
}

// pieceDepth is how many batches a piece may hold while the model works on
// earlier ones.
const pieceDepth = 4

// batchEvents is how many events a batch holds: the decoder's batches are
// gathered into larger ones, since each batch handed over costs the model's
// goroutine a wake-up, and a wake-up costs as much as a few hundred events.
const batchEvents = 4096

// replayPieces decodes the pieces with workers readers of the file, each
// taking the next piece in order, and feeds their events, exits and
// snapshots to m in order. A single piece carries the definitions and stats
// too (to m, and the definitions to w); several do not: a first pass gave
// them. It returns the readers' warnings and whether there were snapshots.
func replayPieces(path string, open func(string) (*tracefile.Reader, error), pieces []tracefile.Window, m event.Sink, workers int, obs Observer, frames *interner) ([]string, bool, error) {
	workers = max(1, min(workers, len(pieces)))
	defs := len(pieces) == 1
	ps := make([]*piece, len(pieces))
	for i, w := range pieces {
		ps[i] = &piece{w: w, ch: make(chan pieceRec, pieceDepth)}
	}
	// Room for every buffer in flight (queued, being filled, being
	// consumed), so that none is dropped and made again.
	pool := make(chan []event.Event, workers*(pieceDepth+2))
	stop := make(chan struct{})
	var next atomic.Int64
	var wg sync.WaitGroup
	var mu sync.Mutex
	var warnings []string
	var openErr error
	for i := 0; i < workers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := open(path)
			if err != nil {
				mu.Lock()
				openErr = err
				mu.Unlock()
			}
			for {
				k := int(next.Add(1) - 1)
				if k >= len(ps) {
					break
				}
				p := ps[k]
				if r == nil {
					p.err = err
				} else {
					ps := &pieceSink{p: p, pool: pool, stop: stop, defs: defs, obs: obs, frames: frames}
					if p.err = r.Replay(ps, p.w); p.err == nil {
						p.err = ps.flush()
					}
				}
				close(p.ch)
			}
			if r != nil {
				mu.Lock()
				warnings = append(warnings, r.Warnings()...)
				mu.Unlock()
				r.Close()
			}
		}()
	}
	sawSnapshots := false
	var err error
	for _, p := range ps {
		for rec := range p.ch {
			switch {
			case rec.evs != nil:
				m.Events(rec.evs)
				select {
				case pool <- rec.evs[:0]:
				default:
				}
			case rec.exit != nil:
				m.Exit(*rec.exit)
			case rec.snap != nil:
				sawSnapshots = true
				m.Snapshot(*rec.snap)
			default:
				switch x := rec.def.(type) {
				case event.Process:
					m.Process(x)
				case event.Module:
					m.Module(x)
				case event.Stack:
					m.Stack(x)
				case event.Stats:
					m.Stats(x)
				case event.Note:
					m.Note(x)
				}
			}
		}
		if p.err != nil {
			err = p.err
			break
		}
	}
	close(stop)
	wg.Wait()
	if err == nil {
		err = openErr
	}
	return warnings, sawSnapshots, err
}

// errStopped ends a worker's replay when the consumer has given up.
var errStopped = errors.New("load: stopped")

// pieceSink queues a piece's events, exits and snapshots, and its
// definitions and stats when defs is set (else a first pass gave them),
// passing the definitions to obs too when it is set.
type pieceSink struct {
	p       *piece
	pool    chan []event.Event
	stop    chan struct{}
	defs    bool
	obs     Observer
	frames  *interner // with defs: the only piece, so used by one goroutine
	started bool
	buf     []event.Event // events gathered, not sent yet
}

func (s *pieceSink) send(r pieceRec) error {
	select {
	case s.p.ch <- r:
		return nil
	case <-s.stop:
		return errStopped
	}
}

func (s *pieceSink) Events(evs []event.Event) error {
	if len(evs) == 0 {
		return nil
	}
	if s.defs && !s.started {
		s.started = true
		if s.obs != nil {
			s.obs.EventsStarted()
		}
	}
	for len(evs) > 0 {
		if s.buf == nil {
			select {
			case s.buf = <-s.pool:
			default:
				s.buf = make([]event.Event, 0, batchEvents)
			}
		}
		// Fill the buffer, never beyond its capacity: buffers are
		// recycled, not grown.
		n := min(len(evs), cap(s.buf)-len(s.buf))
		s.buf = append(s.buf, evs[:n]...)
		evs = evs[n:]
		if len(s.buf) == cap(s.buf) {
			if err := s.flush(); err != nil {
				return err
			}
		}
	}
	return nil
}

// flush sends the events gathered: before any other record, and at the
// end.
func (s *pieceSink) flush() error {
	if len(s.buf) == 0 {
		return nil
	}
	evs := s.buf
	s.buf = nil
	return s.send(pieceRec{evs: evs})
}

// sendRec sends a record other than events, after the events before it.
func (s *pieceSink) sendRec(r pieceRec) error {
	if err := s.flush(); err != nil {
		return err
	}
	return s.send(r)
}

func (s *pieceSink) Exit(e event.Exit) error { return s.sendRec(pieceRec{exit: &e}) }

func (s *pieceSink) Snapshot(sn event.Snapshot) error {
	sn.Live = append([]event.LiveBlock(nil), sn.Live...)
	sn.Totals = append([]event.StackTotal(nil), sn.Totals...)
	return s.sendRec(pieceRec{snap: &sn})
}

// sendDef sends a definition or stats record when s carries them.
func (s *pieceSink) sendDef(def any) error {
	if !s.defs {
		return nil
	}
	return s.sendRec(pieceRec{def: def})
}

func (s *pieceSink) Process(p event.Process) error {
	// (The reader does not reuse a Process's command line: no copy.)
	return s.sendDef(p)
}

func (s *pieceSink) Module(m event.Module) error {
	if s.defs && s.obs != nil {
		s.obs.Module(m)
	}
	return s.sendDef(m)
}

func (s *pieceSink) Stack(st event.Stack) error {
	if s.defs {
		st.Frames = s.frames.keep(st.Frames)
		if s.obs != nil {
			s.obs.Stack(st)
		}
	}
	return s.sendDef(st)
}

func (s *pieceSink) Stats(st event.Stats) error { return s.sendDef(st) }

// Note sends a warning as a definition (the definitions section holds
// them) and the other notes, which are timed, in their place.
func (s *pieceSink) Note(n event.Note) error {
	if w, ok := n.(event.Warning); ok {
		return s.sendDef(w)
	}
	return s.sendRec(pieceRec{def: n})
}

// replaySnapshots passes the snapshots taken before from to m.
func replaySnapshots(open func(string) (*tracefile.Reader, error), path string, from int64, m event.Sink) error {
	r, err := open(path)
	if err != nil {
		return err
	}
	defer r.Close()
	return r.Replay(snapshotsOnly{m}, tracefile.Window{To: from})
}

// snapshotsOnly passes on snapshots and drops the rest.
type snapshotsOnly struct{ m event.Sink }

func (snapshotsOnly) Process(event.Process) error        { return nil }
func (snapshotsOnly) Exit(event.Exit) error              { return nil }
func (snapshotsOnly) Module(event.Module) error          { return nil }
func (snapshotsOnly) Stack(event.Stack) error            { return nil }
func (snapshotsOnly) Events([]event.Event) error         { return nil }
func (snapshotsOnly) Stats(event.Stats) error            { return nil }
func (snapshotsOnly) Note(event.Note) error              { return nil }
func (s snapshotsOnly) Snapshot(sn event.Snapshot) error { return s.m.Snapshot(sn) }

// dedup returns ss without repeats, in the order first seen; never nil.
func dedup(ss []string) []string {
	seen := map[string]bool{}
	out := []string{}
	for _, s := range ss {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}
