// Package query is an index of one trace, built in one pass, that answers the
// questions of an interactive view without reading the trace again: the heap
// over time at any resolution, what each call site cost in any time window
// (live at its end, at its peak, at an instant; net change; bytes and calls;
// temporaries), the four lifetime classes of a window (WPA's AIFI, AIFO,
// AOFI, AOFO), the size histogram and the lifetime distribution.
//
// The index is columnar, and holds nothing per event: every block (and
// every call that made no block: a failed allocation, a realloc that
// freed) is a row: the sequence numbers (the order in which the heap model
// applied the events) of its allocation and of its end (free, realloc,
// munmap, or "never"), their times, its size, its stack and thread, and
// flags. The rows are in the order of their allocation, and a second
// column lists the ended ones in the order of their ends. Every event made
// a row, ended one, or is an unmatched free (a list of its own), so an
// event's time and the heap after it can be rebuilt from those; the
// timeline and peaks read a summary of each group of 256 events instead
// (see group). Windows are cut by sequence number, not time, so that events
// sharing a timestamp (the trace's time resolution is 10µs by default) are
// ordered exactly as the model ordered them, and the peak found here is the
// model's.
//
// The whole trace also goes through analyze.Model, so that the summary of the
// full trace is the text report's own; the index's whole-trace answers equal
// it (the tests check that), and its windowed answers use the same counters
// (analyze.Stack), rendered by package report.
//
// # Windows
//
// A window [From, To) here knows every block allocated before From, as WPA
// does: a block is allocated inside (AI) or before (AO) the window, and freed
// inside it (FI) or still live at its end (FO). `heapscope report --from
// --to` instead reports what tracing only the window would have seen; the
// two agree on what the window allocated (calls, bytes, and AIFO, which is
// the windowed report's leaks) and differ on frees of older blocks, which
// the report calls unmatched.
package query

import (
	"errors"
	"math"
	"sort"
	"sync"

	"github.com/heapscope/heapscope/analyze"
	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/report"
	"github.com/heapscope/heapscope/suppress"
	"github.com/heapscope/heapscope/symbolize"
	"github.com/heapscope/heapscope/tracefile"
)

// never is the end of a block that was live when the trace ended.
const never = math.MaxUint32

// maxEvents bounds the events of a trace the index holds: sequence numbers
// are 32 bits, to keep a row small.
const maxEvents = math.MaxUint32 - 1

// ErrTooLarge is returned for a trace of more than 4 G heap events.
var ErrTooLarge = errors.New("query: the trace has more heap events than the index can number (2^32-1)")

// rowRec is a block, or a call that made none: 28 bytes.
type rowRec struct {
	alloc, end uint32 // sequence numbers: the event that made it, and the one that ended it (never: live at the end)
	size       uint32 // with fBig, in Index.big
	stack      int32  // index into Index.stacks
	// at and et are the times of alloc and end, less the base time of
	// their event's group (unused when the group's times are wide).
	at, et uint32
	thread uint16 // index into Index.threads; manyThreads: in Index.bigThread
	flags  uint8
	// life is the bucket of the block's lifetime, bits.Len64(end's time -
	// alloc's time) (at most 63), plus 1; 0 while it is live, and for a
	// block ended by its process's exit (see exited): it was never
	// freed. Kept (in what would be padding) so that a window's
	// lifetimes need not look up the groups' base times.
	life uint8
}

// exited reports whether row r is a block its process's exit ended: it
// left the heap there, but was never freed (a leak).
func (r *rowRec) exited() bool { return r.end != never && r.life == 0 && r.flags&fNoBlock == 0 }

// Row flags.
const (
	fRealloc = 1 << iota // made by a realloc call
	fFailed              // the call returned NULL: no block
	fNoBlock             // a call that made no block (failed, or a realloc that only freed)
	fTemp                // freed directly after it was made (see analyze)
	fFreed               // ended by a counted free (not by a lost free or a partial munmap)
	fCont                // the rest of a mapping after a partial munmap: not a call
	fMissed              // ended by a new block at its address: its free was lost
	fBig                 // the size does not fit rowRec.size: it is in Index.big
)

// Options tune Build.
type Options struct {
	// Symbolize configures the symbolizer.
	Symbolize symbolize.Options
	// Processes selects the processes indexed, as report's --pid and --exe
	// do (the zero value: all). Build fails with report.ErrNoProcess when
	// it selects none.
	Processes analyze.Processes
	// Suppressions are the rules whose leaks the reports (the whole
	// trace's and each window's) show as suppressed, as `heapscope report`
	// does.
	Suppressions []*suppress.Rule
	// IndexAfter, when not nil, holds Open's windowed index until it is
	// closed: a caller that wants the whole trace's answers first, or a
	// test that asks questions while the index is not there.
	IndexAfter <-chan struct{}
	// NoIndex opens the trace without its windowed index: only the
	// whole trace's answers of the report's pass (Quick) are given, and
	// Wait returns ErrNotIndexed. For a caller that needs no window, such
	// as a self-contained report: it reads the trace once, and holds no
	// row per block.
	NoIndex bool
	// CacheDir, when not "", is a folder for index files (see
	// DefaultCacheDir): Open reads the trace's index from there when it
	// was written before for the same file and processes, and else writes
	// it there once built.
	CacheDir string
	// IndexMap says whether an index file read from CacheDir is read
	// into memory or mapped (MapAuto: mapped when large against the
	// memory available).
	IndexMap IndexMap
	// ReadProgress and IndexProgress, when set, are called with the length
	// of every read of the trace file by Open's first pass (the report's)
	// and by the windowed index's build, from several goroutines: for
	// progress meters. The first pass's definitions are read by every
	// worker, so its sum may pass the file's size.
	ReadProgress, IndexProgress func(n int64)
}

// Index is one trace, indexed. It is immutable once built and safe for
// concurrent use.
type Index struct {
	// File is the trace's path.
	File string
	// Header is the trace's header.
	Header tracefile.Header
	// Report is the whole trace's report, as `heapscope report` makes it.
	Report *report.Report
	// Warnings are the reader's and the symbolizer's.
	Warnings []string

	evs  events          // by sequence number, rebuilt from the rows and the group summaries
	rows chunked[rowRec] // in the order of their allocation (alloc ascends)
	// weights are, in a sampled trace, each row's weight (see
	// builder.rate); empty in an exact one.
	weights chunked[weight]
	ends    chunked[uint32] // the rows that ended (blocks), in the order of their ends
	// rowEnds is the latest end of each group of rows (see rowGroupLen).
	rowEnds []uint32
	big     map[uint32]uint64 // row → size, for the rows of sizes of 4 GiB and more
	// threads are the thread IDs of the rows, by index; bigThread holds
	// the thread of a row past the first 65535 threads.
	threads   []uint32
	bigThread map[uint32]uint32

	stacks []stackRef      // by stack index
	sites  []*Site         // the symbolized, merged call sites
	res    report.Resolver // the report's: its stacks' frames
	// tries are the flame graphs' trees of the sites, top-down and
	// inverted, made on first use.
	trieOnce [2]sync.Once
	tries    [2]*trie
	masks    masks // the sites of the latest Filter.Match asked (see siteMask)
	rules    []*suppress.Rule
	// indexProgress is Options.IndexProgress.
	indexProgress func(n int64)
	// suppressed is, by site, the rule that matches its stack: its leaks
	// are suppressed (nil: no rules; a nil rule: none matched).
	suppressed []*suppress.Rule
	supOpt     suppress.Options
	// unmatched holds the sequence numbers of unmatched frees, and
	// unmatchedDT their times less their group's base time.
	unmatched   []uint32
	unmatchedDT []uint32
	// exits are the sequence numbers of the processes' exits that ended
	// blocks (see builder.Exit): events of the index, not heap events.
	exits []uint32

	// quick is the whole trace's answer from the report's pass, for the
	// questions asked before the windowed index is built (see Open).
	quick *Result
	// ready is closed when the windowed index (evs, rows, ends, big, unmatched)
	// is built, or failed with err; those fields are not read before.
	ready chan struct{}
	err   error
	after <-chan struct{} // Options.IndexAfter
	// noIndex is Options.NoIndex: ready is never closed.
	noIndex bool

	cacheDir  string // Options.CacheDir
	cacheFile string // the index file; "" without a cache
	fromCache bool   // the columns are the index file's
	mapped    bool   // and its rows and ends are the file mapped
	indexMap  IndexMap
	saved     chan struct{} // closed when the index file is written, or was not
	saveErr   error
	// arenaOwner is the builder's Index, whose arena holds the columns:
	// kept reachable so that the arena is not released under them.
	arenaOwner *Index
}

// Event kinds in evKind.
const (
	evMade  = 1 << iota // a block was made
	evEnded             // a block ended
)

// stackRef is a (process, stack) of the trace, and its call site.
type stackRef struct {
	pid    uint32
	id     event.StackID
	frames []uint64
	site   int32
}

// Site is a call site: the stacks of one or more processes that are the
// same once symbolized and stripped of the allocator's frames (as in package
// report).
type Site struct {
	ID     int               // index in Index.Sites
	Frames []symbolize.Frame // innermost first
	PIDs   []uint32
}

// Suppressed reports whether the leaks of site id are suppressed by a rule
// of Options.Suppressions, as the report suppresses them.
func (x *Index) Suppressed(id int) bool { return x.SuppressedBy(id) != nil }

// SuppressedBy returns the rule that suppresses the leaks of site id, or
// nil.
func (x *Index) SuppressedBy(id int) *suppress.Rule {
	if id < len(x.suppressed) {
		return x.suppressed[id]
	}
	return nil
}

// Sites returns the call sites.
func (x *Index) Sites() []*Site { return x.sites }

// Events returns the number of events indexed, the heap events and the
// exits that ended blocks (sequence numbers run from 0 to it): 0 until the
// windowed index is ready.
func (x *Index) Events() int {
	if !x.Ready() {
		return 0
	}
	return x.evs.len()
}

// exitsIn returns how many of the events [lo, hi) are exits.
func (x *Index) exitsIn(lo, hi int64) int {
	i := sort.Search(len(x.exits), func(k int) bool { return int64(x.exits[k]) >= lo })
	j := sort.Search(len(x.exits), func(k int) bool { return int64(x.exits[k]) >= hi })
	return j - i
}

// Blocks returns the number of rows (blocks and calls that made none): 0
// until the windowed index is ready.
func (x *Index) Blocks() int {
	if !x.Ready() {
		return 0
	}
	return x.rows.len()
}

// Start and End are the times (trace clock) of the first and last indexed
// event; both are the header's start when there were none. Until the
// windowed index is ready they are the heap model's first and last heap
// events.
func (x *Index) Start() int64 {
	if !x.Ready() {
		if t := x.Report.Profile.FirstEvent; t != 0 {
			return t
		}
		return x.Header.MonoStart
	}
	if x.evs.len() == 0 {
		return x.Header.MonoStart
	}
	return x.evs.groups[0].base
}

// End is the time of the last indexed event.
func (x *Index) End() int64 {
	if !x.Ready() {
		if t := x.Report.Profile.LastEvent; t != 0 {
			return t
		}
		return x.Header.MonoStart
	}
	if x.evs.len() == 0 {
		return x.Header.MonoStart
	}
	return x.evs.time(x.evs.len() - 1)
}

// weight is what a row of a sampled trace counts beyond its bytes: its
// objects, and the size bucket of the allocation recorded (its size is the
// bytes it stands for).
type weight struct {
	n      uint32
	bucket uint8
}

// objects returns the blocks row i counts: 1, or its objects in a sampled
// trace.
func (x *Index) objects(i int) uint32 {
	if x.weights.n == 0 {
		return 1
	}
	return x.weights.at(i).n
}

// size returns the size of row r, i.
func (x *Index) size(r *rowRec, i int) uint64 {
	if r.flags&fBig != 0 {
		return x.big[uint32(i)]
	}
	return uint64(r.size)
}

// manyThreads is rowRec.thread for a thread kept in Index.bigThread.
const manyThreads = math.MaxUint16

// tid returns the thread of row r, i.
func (x *Index) tid(r *rowRec, i int) uint32 {
	if r.thread == manyThreads {
		return x.bigThread[uint32(i)]
	}
	if int(r.thread) < len(x.threads) {
		return x.threads[r.thread]
	}
	return 0
}

// ErrAggregate is returned for questions an aggregate trace (snapshots, not
// every event) cannot answer.
var ErrAggregate = errors.New("query: an aggregate trace has no per-event history")

// trace describes the trace for package report.
func (x *Index) trace() report.Trace {
	return report.Trace{
		File:      x.File,
		Session:   x.Header.Session,
		Provider:  x.Header.Provider,
		Start:     x.Header.MonoStart,
		WallStart: x.Header.WallStart,
		Warnings:  x.Warnings,
	}
}

// Aggregate reports whether the trace holds snapshots rather than every
// event, so that windows cannot be answered.
func (x *Index) Aggregate() bool { return x.Report.Profile.Aggregate }

// mergeSites symbolizes each stack, trims the allocator's frames and merges
// the stacks that become the same.
func (x *Index) mergeSites() {
	frameIDs := map[symbolize.FrameKey]uint32{}
	bySite := map[string]int32{}
	// Stacks of one process with the same frames (the model stores them
	// once) are one site, found without symbolizing them again.
	type framesKey struct {
		pid   uint32
		first *uint64
		n     int
	}
	byFrames := map[framesKey]int32{}
	var buf []symbolize.Frame
	var kb []byte
	for i := range x.stacks {
		st := &x.stacks[i]
		var fk framesKey
		if len(st.frames) > 0 {
			fk = framesKey{st.pid, &st.frames[0], len(st.frames)}
			if si, ok := byFrames[fk]; ok {
				st.site = si
				continue
			}
		}
		buf = buf[:0]
		for _, a := range st.frames {
			buf = append(buf, x.res.Frames(st.pid, a)...)
		}
		if st.id == analyze.PreTrace && len(st.frames) == 0 {
			buf = append(buf, symbolize.Frame{Function: report.BeforeTraceFunction}) // as the report's site (census.go)
		}
		fs := symbolize.TrimAllocator(buf)
		kb = kb[:0]
		for i := range fs {
			k := fs[i].Key()
			id, ok := frameIDs[k]
			if !ok {
				id = uint32(len(frameIDs))
				frameIDs[k] = id
			}
			kb = append(kb, byte(id), byte(id>>8), byte(id>>16), byte(id>>24))
		}
		si, ok := bySite[string(kb)]
		if !ok {
			si = int32(len(x.sites))
			bySite[string(kb)] = si
			x.sites = append(x.sites, &Site{ID: int(si), Frames: append([]symbolize.Frame(nil), fs...)})
		}
		s := x.sites[si]
		if n := len(s.PIDs); n == 0 || s.PIDs[n-1] != st.pid {
			s.PIDs = append(s.PIDs, st.pid)
		}
		st.site = si
		if fk.first != nil {
			byFrames[fk] = si
		}
	}
	for _, s := range x.sites {
		sort.Slice(s.PIDs, func(i, j int) bool { return s.PIDs[i] < s.PIDs[j] })
		out := s.PIDs[:0]
		for i, p := range s.PIDs {
			if i == 0 || p != s.PIDs[i-1] {
				out = append(out, p)
			}
		}
		s.PIDs = out
	}
}
