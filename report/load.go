package report

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/heapscope/heapscope/analyze"
	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/symbolize"
	"github.com/heapscope/heapscope/tracefile"
)

// LoadOptions tune Load. The zero value reads the whole trace and
// symbolizes it on this machine.
type LoadOptions struct {
	// From and To bound the window analysed, from the start of the trace
	// (the header's MonoStart); 0 leaves that side open. See package
	// analyze for what a window means.
	From, To time.Duration
	// Symbolize configures the symbolizer.
	Symbolize symbolize.Options
	// Workers is how many goroutines decode the file (0: GOMAXPROCS).
	Workers int
	// TimelinePoints bounds the timeline (0: analyze's default).
	TimelinePoints int
}

// Load reads the trace file at path through the heap model, symbolizes its
// stacks and returns the report: what `heapscope report` prints.
//
// It reads the file in parallel: a first pass reads only the definitions
// (processes, modules, stacks: small), which lets symbolization start at
// once on another goroutine; then the events are decoded in slices of time,
// each by a reader of its own, and handed to the model in order. The
// reader's warnings (a truncated file, a damaged chunk) are in the report's
// Trace.Warnings, with the symbolizer's.
func Load(path string, o LoadOptions) (*Report, error) {
	if o.To != 0 && o.To <= o.From {
		return nil, fmt.Errorf("report: the window's end (%s) is not after its start (%s)", o.To, o.From)
	}
	r, err := tracefile.Open(path)
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
	m := analyze.New(analyze.Options{From: win.From, To: win.To, TimelinePoints: o.TimelinePoints})

	// Pass 1: the definitions only (a window after every chunk).
	defs := &defsPass{Sink: m, addrs: map[uint32]map[uint64]bool{}}
	err = r.Replay(defs, tracefile.Window{From: math.MaxInt64})
	warnings := r.Warnings()
	r.Close() // its buffers are not needed while the pieces are read
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	sym := symbolize.New(o.Symbolize)
	defer sym.Close()
	warm := make(chan struct{})
	go func() {
		// Symbolize every address while the events are decoded. The
		// symbolizer caches the answers; the report interns them later,
		// in the profile's order, so that its output does not depend on
		// this goroutine's.
		defer close(warm)
		for _, mod := range defs.modules {
			sym.AddModule(mod)
		}
		for pid, addrs := range defs.addrs {
			for a := range addrs {
				sym.Frames(pid, a)
			}
		}
	}()

	// Pass 2: the events, in slices of time decoded in parallel.
	end := int64(0)
	if defs.hasStats && defs.stats.Time > h.MonoStart {
		end = defs.stats.Time
	}
	pieces := slices(win, h.MonoStart, end, o.Workers)
	ws, sawSnapshots, err := replayPieces(path, pieces, m, o.Workers)
	warnings = append(warnings, ws...)
	if err != nil {
		<-warm
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	if sawSnapshots && win.From != 0 {
		// An aggregate trace's totals in a window are differences from
		// the last snapshot before it, which the windowed pass skipped.
		if err := replaySnapshots(path, win.From, m); err != nil {
			<-warm
			return nil, fmt.Errorf("reading %s: %w", path, err)
		}
	}
	<-warm
	rep := newReport(m.Profile(), Trace{
		File:      path,
		Session:   h.Session,
		Provider:  h.Provider,
		Start:     h.MonoStart,
		WallStart: h.WallStart,
	}, newSymTable(sym))
	rep.Trace.Warnings = dedupStrings(append(warnings, sym.Warnings()...))
	return rep, nil
}

// defsPass passes the definitions to the model and keeps what symbolizing
// needs: the modules, and each process's distinct return addresses.
type defsPass struct {
	event.Sink
	modules  []event.Module
	addrs    map[uint32]map[uint64]bool
	stats    event.Stats
	hasStats bool
}

func (d *defsPass) Module(mod event.Module) error {
	d.modules = append(d.modules, mod)
	return d.Sink.Module(mod)
}

func (d *defsPass) Stack(st event.Stack) error {
	a := d.addrs[st.PID]
	if a == nil {
		a = map[uint64]bool{}
		d.addrs[st.PID] = a
	}
	for _, f := range st.Frames {
		a[f] = true
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
// the balance they buy. The first
// piece starts where the window does (open: 0) and the last ends where it
// does, so every record is in exactly one piece whatever the estimate of
// the end. Without an end, the window is one piece.
func slices(win tracefile.Window, start, end int64, workers int) []tracefile.Window {
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
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
}

// pieceDepth is how many batches a piece may hold while the model works on
// earlier ones.
const pieceDepth = 8

// replayPieces decodes the pieces with workers readers of the file, each
// taking the next piece in order, and feeds their events, exits and
// snapshots to m in order. It returns the readers' warnings and whether
// there were snapshots.
func replayPieces(path string, pieces []tracefile.Window, m *analyze.Model, workers int) ([]string, bool, error) {
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	workers = min(workers, len(pieces))
	ps := make([]*piece, len(pieces))
	for i, w := range pieces {
		ps[i] = &piece{w: w, ch: make(chan pieceRec, pieceDepth)}
	}
	pool := make(chan []event.Event, workers*pieceDepth+workers)
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
			r, err := tracefile.Open(path)
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
					p.err = r.Replay(&pieceSink{p: p, pool: pool, stop: stop}, p.w)
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
var errStopped = errors.New("report: stopped")

// pieceSink queues a piece's events, exits and snapshots; definitions and
// stats came in the first pass.
type pieceSink struct {
	p    *piece
	pool chan []event.Event
	stop chan struct{}
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
	var buf []event.Event
	select {
	case buf = <-s.pool:
	default:
	}
	return s.send(pieceRec{evs: append(buf, evs...)})
}

func (s *pieceSink) Exit(e event.Exit) error { return s.send(pieceRec{exit: &e}) }

func (s *pieceSink) Snapshot(sn event.Snapshot) error {
	sn.Live = append([]event.LiveBlock(nil), sn.Live...)
	sn.Totals = append([]event.StackTotal(nil), sn.Totals...)
	return s.send(pieceRec{snap: &sn})
}

func (s *pieceSink) Process(event.Process) error { return nil }
func (s *pieceSink) Module(event.Module) error   { return nil }
func (s *pieceSink) Stack(event.Stack) error     { return nil }
func (s *pieceSink) Stats(event.Stats) error     { return nil }

// replaySnapshots passes the snapshots taken before from to m.
func replaySnapshots(path string, from int64, m *analyze.Model) error {
	r, err := tracefile.Open(path)
	if err != nil {
		return err
	}
	defer r.Close()
	return r.Replay(snapshotsOnly{m}, tracefile.Window{To: from})
}

// snapshotsOnly passes on snapshots and drops the rest.
type snapshotsOnly struct{ m *analyze.Model }

func (snapshotsOnly) Process(event.Process) error        { return nil }
func (snapshotsOnly) Exit(event.Exit) error              { return nil }
func (snapshotsOnly) Module(event.Module) error          { return nil }
func (snapshotsOnly) Stack(event.Stack) error            { return nil }
func (snapshotsOnly) Events([]event.Event) error         { return nil }
func (snapshotsOnly) Stats(event.Stats) error            { return nil }
func (s snapshotsOnly) Snapshot(sn event.Snapshot) error { return s.m.Snapshot(sn) }

func dedupStrings(ss []string) []string {
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
