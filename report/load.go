package report

import (
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/heapscope/heapscope/analyze"
	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/internal/load"
	"github.com/heapscope/heapscope/suppress"
	"github.com/heapscope/heapscope/symbolize"
)

// ErrNoProcess is wrapped by Load's error when LoadOptions.Processes
// selects no process of the trace. It is load.ErrNoProcess.
var ErrNoProcess = load.ErrNoProcess

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
	// Processes selects the processes reported (the zero value: all).
	// Load fails with ErrNoProcess when it selects none.
	Processes analyze.Processes
	// Suppressions are the rules whose leaks the report shows as
	// suppressed (see Report.Suppress), e.g. suppress.Defaults().
	Suppressions []*suppress.Rule

	// ReadProgress, when set, is called with the length of every read of
	// the file, from several goroutines: for a progress meter. The
	// definitions are read by every worker, so the sum may pass the
	// file's size.
	ReadProgress func(n int64)
}

// Load reads the trace file at path through the heap model (load.Trace),
// symbolizes its stacks and returns the report: what `heapscope report`
// prints.
//
// The symbolizer resolves the addresses of the stacks on a goroutine of its
// own while the events are decoded: those read before the first events,
// and then, at the end, those of the rest. The session's warnings (kept in
// the trace as notes), the reader's (a truncated file, a damaged chunk) and
// the symbolizer's are in the report's Trace.Warnings.
func Load(path string, o LoadOptions) (*Report, error) {
	if o.To != 0 && o.To <= o.From {
		return nil, fmt.Errorf("report: the window's end (%s) is not after its start (%s)", o.To, o.From)
	}
	sym := symbolize.New(o.Symbolize)
	defer sym.Close()
	w := newWarmer(sym)
	res, err := load.Trace(path, load.Options{From: o.From, To: o.To, Workers: o.Workers, TimelinePoints: o.TimelinePoints,
		Processes: o.Processes, Observer: w, ReadProgress: o.ReadProgress})
	w.finish()
	if err != nil {
		return nil, err
	}
	h := res.Header
	rep := newReport(res.Profile, Trace{
		File:      path,
		Session:   h.Session,
		Provider:  h.Provider,
		Start:     h.MonoStart,
		WallStart: h.WallStart,
	}, newSymTable(sym))
	// The symbolizer is closed when Load returns: what the report
	// resolves later (pprof, the index's windows) is what it resolved.
	rep.resolver = tableResolver{t: rep.syms, mods: newModuleResolver(res.Profile.Modules)}
	rep.syms.r = rep.resolver
	// the session's warnings (kept in the trace) first, then the reader's
	var warnings []string
	for _, w := range res.Profile.Warnings {
		text := w.Text
		if w.PID != 0 {
			text = fmt.Sprintf("pid %d: %s", w.PID, text)
		}
		if !slices.Contains(warnings, text) {
			warnings = append(warnings, text)
		}
	}
	warnings = append(warnings, res.Warnings...)
	for _, s := range sym.Warnings() {
		if !slices.Contains(warnings, s) {
			warnings = append(warnings, s)
		}
	}
	rep.Trace.Warnings = warnings
	rep.Describe(h)
	rep.Suppress(o.Suppressions, suppress.Options{Sysroot: o.Symbolize.Sysroot})
	return rep, nil
}

// warmer symbolizes stacks on a goroutine of its own while the trace is
// read. The symbolizer caches the answers; the report interns them later,
// in the profile's order, so that its output does not depend on this
// goroutine's timing. Its queue is unbounded so that the reader never
// waits for it.
type warmer struct {
	sym  *symbolize.Symbolizer
	mu   sync.Mutex
	q    []any // event.Module or event.Stack
	wake chan struct{}
	end  bool
	// started says that events are being read: the definitions that
	// precede them are queued.
	started bool
	done    chan struct{}
}

func newWarmer(sym *symbolize.Symbolizer) *warmer {
	w := &warmer{sym: sym, wake: make(chan struct{}, 1), done: make(chan struct{})}
	go w.run()
	return w
}

// Module and Stack queue a definition; with EventsStarted, w is a
// load.Observer.
func (w *warmer) Module(m event.Module) { w.add(m) }
func (w *warmer) Stack(st event.Stack)  { w.add(st) }

func (w *warmer) add(rec any) {
	w.mu.Lock()
	w.q = append(w.q, rec)
	w.mu.Unlock()
	w.signal()
}

// run symbolizes the stacks queued in two batches: those queued by the time
// the first events are read (in most traces, most of the distinct
// addresses), while the rest of the file is read; and the rest at the end.
// Each batch reads each file once; resolving stacks as they come, in many
// small batches, would decompress a large library's DWARF again for each
// batch that needs another of its units. Module records are passed on as
// they come: only the final set of modules matters, since the report
// resolves every address again, from the caches, against it.
func (w *warmer) run() {
	defer close(w.done)
	// One map of every (process, address) queued, by a hash of both (a
	// trace of a million processes costs no map each; two that collide
	// only leave an address to be resolved later, on its own), and the
	// lists of frames already queued (stacks of the same frames share
	// them: a trace may hold a million).
	seen := map[uint64]struct{}{}
	type framesKey struct {
		first *uint64
		n     int
		pid   uint32
	}
	done := map[framesKey]struct{}{}
	// The processes with modules: the symbolizer has nothing to resolve
	// in another's frames (modules come before the stacks that point into
	// them), so they are not queued.
	mapped := map[uint32]bool{}
	var batch []any
	var queued []pidAddr
	first := true
	for {
		w.mu.Lock()
		batch, w.q = w.q, batch[:0]
		end, started := w.end, w.started
		w.mu.Unlock()
		for i, rec := range batch {
			switch x := rec.(type) {
			case event.Module:
				w.sym.AddModule(x)
				mapped[x.PID] = true
			case event.Stack:
				if len(x.Frames) == 0 || !mapped[x.PID] {
					break
				}
				fk := framesKey{&x.Frames[0], len(x.Frames), x.PID}
				if _, ok := done[fk]; ok {
					break
				}
				done[fk] = struct{}{}
				for _, a := range x.Frames {
					k := (a ^ uint64(x.PID)<<40 ^ uint64(x.PID)>>24) * 0x9e3779b97f4a7c15
					if _, ok := seen[k]; !ok {
						seen[k] = struct{}{}
						queued = append(queued, pidAddr{x.PID, a})
					}
				}
			}
			batch[i] = nil // the stack's frames are no longer needed
		}
		if len(batch) > 0 {
			continue // until the queue is empty
		}
		if first && (started || end) || end {
			first = false
			w.prefetch(queued)
			queued = queued[:0]
		}
		if end {
			return
		}
		<-w.wake
	}
}

// pidAddr is an address of a process.
type pidAddr struct {
	pid  uint32
	addr uint64
}

// prefetch resolves the addresses queued, in a batch per process: the
// symbolizer reads each file's DWARF once for a batch.
func (w *warmer) prefetch(queued []pidAddr) {
	sort.SliceStable(queued, func(i, j int) bool { return queued[i].pid < queued[j].pid })
	var addrs []uint64
	for i := 0; i < len(queued); {
		j := i
		addrs = addrs[:0]
		for ; j < len(queued) && queued[j].pid == queued[i].pid; j++ {
			addrs = append(addrs, queued[j].addr)
		}
		w.sym.Prefetch(queued[i].pid, addrs)
		i = j
	}
}

// EventsStarted tells w that events are being read.
func (w *warmer) EventsStarted() {
	w.mu.Lock()
	was := w.started
	w.started = true
	w.mu.Unlock()
	if !was {
		w.signal()
	}
}

func (w *warmer) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// finish waits until every queued stack is symbolized.
func (w *warmer) finish() {
	w.mu.Lock()
	w.end = true
	w.mu.Unlock()
	w.signal()
	<-w.done
}
