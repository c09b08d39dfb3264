package heapscope

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/heapscope/heapscope/census"
	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/internal/errs"
	"github.com/heapscope/heapscope/internal/proc"
	"github.com/heapscope/heapscope/internal/stopped"
	"github.com/heapscope/heapscope/scan"
	"github.com/heapscope/heapscope/scan/roots"
	"github.com/heapscope/heapscope/tracefile"
)

// The census at attach.
//
// Start (and Update, for a process it adds) takes a census of each
// process's heap (package census) once the process's probes are in, and
// writes it into the trace as the blocks live at that instant: a rundown,
// so that the frees of blocks allocated before the attach match, and the
// live heap, the timeline and the window classes start from what the
// process really holds.
//
// Why after the probes and not before: a block freed between a census and
// the probes going live would stay live in the trace for ever, a leak that
// is not one, while a block allocated or freed between the probes and the
// census is in the trace's events. So the census stops the process after
// its probes are in, drains the provider while it is stopped (every event
// before the stop reaches the sink: the stop is the census's instant), and
// from then until the census is finished and named holds the records bound
// for the trace file (heldWriter), to write the census's notes among them
// at the instant of its stop, wherever the process's next events already
// are. The model (package analyze) then keeps at the census what the trace
// had seen live (with its stack) and adds the rest as allocated before the
// trace; the frees between the attach and the census of blocks allocated
// before it are no longer unmatched. Once the census is written nothing of
// it remains: the events after it cost what they cost without.
//
// Not with sampling or aggregate mode (the provider drops the frees of
// blocks it did not sample or see allocated, so a rundown could never be
// freed), nor for a launched program (it starts with an empty heap), nor
// for the children a traced process forks (traced from their first
// instruction; the blocks they inherit are not counted).

// CensusResult is what the census of one process found at attach.
type CensusResult struct {
	PID int
	// Taken is false when no census was taken: Warning says why.
	Taken bool
	Time  int64 // its stop (CLOCK_MONOTONIC ns): the instant the blocks were live
	// Blocks and Bytes are the blocks live at the census and their usable
	// bytes (malloc_usable_size), the allocator's own included but for
	// the threads' tcaches (whose frees at a thread's exit no provider
	// sees).
	Blocks, Bytes uint64
	// Paused is how long the process was stopped for it (the stops taken
	// to find malloc idle: Stops), Took the whole census.
	Paused, Took time.Duration
	Stops, Stop  int  // the stops taken, and which one it was read at
	Problems     int  // what it found wrong in the heap (a corrupted header; malloc busy at every stop)
	Scanned      bool // a reachability scan ran in the same stop (Properties.CensusScan)
	// Busy says threads were in malloc's code at the stop: the census
	// leaves out the blocks they were freeing (their events came before
	// it), and the model gives the blocks they were making to their
	// events, which come after.
	Busy bool
	// Warning says, in one line, why no census was taken, or what went
	// wrong with the one taken.
	Warning string
}

// censusState is a session's censuses: one at a time.
type censusState struct {
	mu      sync.Mutex
	results []CensusResult
}

// Censuses returns what the censuses at attach found, in the order taken.
func (s *Session) Censuses() []CensusResult {
	s.cen.mu.Lock()
	defer s.cen.mu.Unlock()
	return append([]CensusResult(nil), s.cen.results...)
}

// censusAfterAttach takes the census of pid, just attached, when the
// session wants one, and writes it into the trace.
func (s *Session) censusAfterAttach(pid int) {
	p := s.props
	if p.NoCensus || p.Provider != ProviderEBPF || s.sink.w == nil {
		return
	}
	s.cen.mu.Lock()
	defer s.cen.mu.Unlock()
	var r CensusResult
	switch {
	case p.Sample > 0:
		r = CensusResult{PID: pid, Warning: "no census: a sampled session drops the frees of the blocks it did not sample, so blocks allocated before the attach could never be freed"}
	case p.Mode == Aggregate:
		r = CensusResult{PID: pid, Warning: "no census: in aggregate mode the frees of blocks allocated before the attach are not recorded"}
	default:
		r = s.census(pid)
	}
	s.cen.results = append(s.cen.results, r)
	if r.Warning != "" {
		s.sink.Note(event.Warning{PID: uint32(pid), Time: monotonicNow(), Code: "census", Text: r.Warning})
	}
}

// census takes the census of pid with its events held (see above).
func (s *Session) census(pid int) CensusResult {
	var h *heldWriter
	var marks []int
	hooks := censusHooks{
		// Held from just before the first stop: the events of the
		// threads in malloc or free at the stop are among them.
		beforeStops: func() { h = s.sink.hold() },
		atStop: func(int) {
			// The events before the stop reach the sink, to be held.
			s.b.flush()
			m := 0
			if h != nil {
				m = h.mark()
			}
			marks = append(marks, m)
		},
	}
	notes, r, busy, _ := takeCensus(pid, s.props.CensusScan, hooks)
	if h == nil {
		if r.Warning == "" {
			r.Taken, r.Warning = false, "no census: the session ended while it was taken"
		}
		return r
	}
	if !r.Taken {
		h.drop()
		return r
	}
	mark := marks[r.Stop-1]
	if len(busy) > 0 {
		// A thread in free at the stop had its event before it, and may
		// not have freed the block yet: the census may see it live.
		// (One in malloc has its event after the stop: a block the
		// census sees made gives way to it in the model.)
		dropBlocks(notes, &r, h.lastFrees(mark, uint32(pid), busy))
	}
	written, err := h.release(mark, notes)
	switch {
	case !written:
		r.Taken = false
		r.Warning = fmt.Sprintf("census given up: more than %d events came while it was taken, or the session ended", maxHeldEvents)
	case err != nil:
		r.Warning = fmt.Sprintf("census: writing it: %v", err)
	}
	return r
}

// censusHooks are called by takeCensus: beforeStops once, just before the
// first stop; atStop at each stop, the process stopped.
type censusHooks struct {
	beforeStops func()
	atStop      func(stop int)
}

// takeCensus takes the census of running process pid (with a scan of its
// heap in the same stop when scanToo), and returns its notes (the census,
// the resident memory explained, the scan's verdict), timed at its stop
// (r.Stop), and the threads that were in malloc's code then; or, when it
// could not be taken, why (r.Warning says it in one line).
func takeCensus(pid int, scanToo bool, hooks censusHooks) ([]event.Note, CensusResult, []int, error) {
	r := CensusResult{PID: pid}
	t0 := time.Now()
	maps, err := proc.ReadMaps(pid)
	if err != nil {
		r.Warning = censusWarning(pid, err)
		return nil, r, nil, err
	}
	// Open reads libc's debug information (its layout is kept for the
	// next census of this heapscope process): before anything is held,
	// and TakeProcess, which opens it again, finds it at once. It also
	// refuses, early, an allocator the census cannot read.
	if _, err := census.Open(pid, maps, census.Options{}); err != nil {
		r.Warning = censusWarning(pid, err)
		return nil, r, nil, err
	}
	// Named while the process runs: the symbols of its files do not change.
	var namer *census.Namer
	if mem, err := os.Open(filepath.Join(proc.Root, strconv.Itoa(pid), "mem")); err == nil {
		defer mem.Close()
		namer = census.NewNamer(pid, maps, mem)
	} else {
		namer = census.NewNamer(pid, maps, nil) // C++ classes by their vtables' symbols only
	}
	var times []int64
	o := census.ProcessOptions{TakeOptions: census.TakeOptions{RSS: true}}
	o.Stopped = func(stop int) {
		if hooks.atStop != nil {
			hooks.atStop(stop)
		}
		times = append(times, monotonicNow())
	}
	var res *scan.Result
	var rootNotes []string
	if scanToo {
		o.WhileStopped = func(c *census.Census, p *stopped.Process) {
			res, rootNotes = scanStopped(c, p)
		}
	}
	if hooks.beforeStops != nil {
		hooks.beforeStops()
	}
	c, err := census.TakeProcess(pid, o)
	if err != nil {
		r.Warning = censusWarning(pid, err)
		return nil, r, nil, err
	}
	at := times[c.Stop-1]
	notes, r := censusNotes(c, namer, res, at)
	r.Took = time.Since(t0)
	if res != nil && len(rootNotes) > 0 && r.Warning == "" {
		r.Warning = fmt.Sprintf("census scan: %d roots not read (%s)", len(rootNotes), rootNotes[0])
	}
	return notes, r, c.BusyThreads, nil
}

// dropBlocks takes the blocks at addrs out of the census among notes.
func dropBlocks(notes []event.Note, r *CensusResult, addrs map[uint64]bool) {
	if len(addrs) == 0 {
		return
	}
	for i, n := range notes {
		if v, ok := n.(event.Verdict); ok {
			bs := v.Blocks[:0]
			for _, b := range v.Blocks {
				if !addrs[b.Addr] {
					bs = append(bs, b)
				}
			}
			v.Blocks = bs
			notes[i] = v
			continue
		}
		c, ok := n.(event.Census)
		if !ok {
			continue
		}
		bs, gs := c.Blocks[:0], c.BlockGroups[:0]
		for k, b := range c.Blocks {
			if addrs[b.Addr] {
				r.Blocks--
				r.Bytes -= b.Size
				continue
			}
			bs = append(bs, b)
			if len(c.BlockGroups) > 0 {
				gs = append(gs, c.BlockGroups[k])
			}
		}
		c.Blocks, c.BlockGroups = bs, gs
		notes[i] = c
	}
}

// censusWarning says in one line why pid has no census.
func censusWarning(pid int, err error) string {
	why := strings.TrimPrefix(err.Error(), "census: ")
	if errors.Is(err, errs.ErrNoLayout) {
		why += " (Debian: apt-get install libc6-dbg)"
	}
	return fmt.Sprintf("no census: %s; the blocks live before the attach are unknown, their frees unmatched", why)
}

// scanStopped classifies the census's blocks by reachability while the
// process is stopped, letting it go once the memory is read, and finds
// who references each.
func scanStopped(c *census.Census, p *stopped.Process) (*scan.Result, []string) {
	live := c.Live()
	blocks := make([]scan.Block, len(live))
	for i, b := range live {
		blocks[i] = scan.Block{Addr: b.Addr, Size: b.Size, ID: uint64(i)}
	}
	rs, notes := roots.Gather(p, roots.Options{})
	res, err := scan.Scan(blocks, p, rs, scan.Options{Referrers: true, AfterRead: func() { p.Resume() }})
	if err != nil {
		return nil, append(notes, err.Error())
	}
	return res, notes
}

// censusNotes turns a census (and the scan of its blocks, when res is set)
// into the trace's notes, all at time at.
func censusNotes(c *census.Census, namer *census.Namer, res *scan.Result, at int64) ([]event.Note, CensusResult) {
	r := CensusResult{PID: c.PID, Taken: true, Time: at, Paused: c.Paused, Stops: c.Stops, Stop: c.Stop,
		Problems: len(c.Problems) + c.Omitted, Scanned: res != nil}
	live := c.Live()
	note := event.Census{PID: uint32(c.PID), Time: at, Heap: event.HeapLibc, Pause: int64(c.Paused)}

	var held census.Holders
	if res != nil && len(res.Referrers) == len(live) {
		held = func(i int) (int, string) { return res.Referrers[i].Block, res.Referrers[i].Root }
	}
	groups := c.Describe(namer, held)
	type key struct {
		class census.SizeClass
		name  string
	}
	index := make(map[key]uint32, len(groups))
	for i, g := range groups {
		index[key{g.Class, g.Name}] = uint32(i)
		note.Groups = append(note.Groups, event.CensusGroup{Lo: g.Class.Lo, Hi: g.Class.Hi, Name: g.Name,
			Example: g.Example, Text: g.Text, HeldBy: g.HeldBy, Held: g.Held})
	}
	note.Blocks = make([]event.LiveBlock, 0, len(live))
	note.BlockGroups = make([]uint32, 0, len(live))
	for i, ch := range c.Chunks {
		if !ch.State.Allocated() {
			continue
		}
		if what := c.Internal[ch.Addr]; strings.HasPrefix(what, "glibc: tcache") {
			// glibc frees a thread's tcache when the thread exits,
			// from inside itself: a free the eBPF provider drops (its
			// allocation, by _int_malloc, no provider sees). In the
			// rundown it would stay live for ever.
			continue
		}
		name, _ := c.Name(namer, i)
		note.Blocks = append(note.Blocks, event.LiveBlock{Addr: ch.User(), Size: ch.Usable()})
		note.BlockGroups = append(note.BlockGroups, index[key{census.ClassOf(ch.Size), name}])
		r.Bytes += ch.Usable()
	}
	r.Blocks = uint64(len(note.Blocks))

	t := c.Totals()
	allocated := t.Bytes[census.InUse] + t.Bytes[census.Mmapped]
	note.Space = event.HeapSpace{
		Arenas:        uint64(len(c.Arenas)),
		InUse:         t.Usable,
		InUseBlocks:   t.Chunks[census.InUse] + t.Chunks[census.Mmapped],
		Overhead:      allocated - min(t.Usable, allocated) + t.Overhead + t.Bytes[census.Fencepost],
		FreeBins:      t.Bytes[census.Free],
		FreeFastbins:  t.Bytes[census.Fastbin],
		FreeTcache:    t.Bytes[census.Tcache],
		Top:           t.Bytes[census.Top],
		Mmapped:       t.Bytes[census.Mmapped] - min(t.Bytes[census.Mmapped], 16*t.Chunks[census.Mmapped]),
		MmappedBlocks: t.Chunks[census.Mmapped],
		Corrupt:       t.Chunks[census.Unknown],
	}
	notes := []event.Note{}
	if rss, err := c.RSS(); err == nil {
		note.Space.Trimmable = rss.Trimmable
		notes = append(notes, residentNote(c.PID, at, rss))
	} else {
		r.Warning = fmt.Sprintf("census: RSS not explained: %v", err)
	}
	notes = append([]event.Note{note}, notes...)
	if res != nil {
		// The classes of the blocks the census note has (the tcaches
		// left out): the blocks live at its time.
		v := event.Verdict{PID: uint32(c.PID), Time: at, Rules: event.RulesMemcheck, Pause: int64(res.ReadTime),
			Elapsed: int64(res.ReadTime + res.ClassifyTime), Complete: len(res.Unread) == 0,
			Blocks: make([]event.BlockClass, 0, len(note.Blocks))}
		k := 0
		for i, b := range live {
			if k < len(note.Blocks) && note.Blocks[k].Addr == b.Addr {
				v.Blocks = append(v.Blocks, event.BlockClass{Addr: b.Addr, Class: verdictClass(res.Verdicts[i].Class)})
				k++
			}
		}
		notes = append(notes, v)
	}
	r.Busy = len(c.Busy) > 0
	if len(c.Problems) > 0 && r.Warning == "" {
		r.Warning = fmt.Sprintf("census: %d problems in the heap, the first: %v", r.Problems, c.Problems[0])
	}
	return notes, r
}

// residentNote is a census's RSS explained, as a note.
func residentNote(pid int, at int64, rss census.RSS) event.Resident {
	n := event.Resident{PID: uint32(pid), Time: at, RSS: rss.Rss, PSS: rss.Pss, Swap: rss.Swap, Rollup: rss.Rollup,
		Trimmable: rss.Trimmable, Disagreement: rss.Disagreement, ZeroPagesKnown: rss.ZeroPagesKnown}
	for _, l := range rss.Lines {
		n.Parts = append(n.Parts, event.ResidentPart{Name: l.Part.String(), RSS: l.Rss, PSS: l.Pss, Bytes: l.Bytes,
			Measured: l.Measured, How: l.How})
	}
	return n
}

// verdictClass is a scan's class as the trace keeps it.
func verdictClass(c scan.Class) event.Class {
	switch c {
	case scan.DefinitelyLost:
		return event.ClassDefinite
	case scan.IndirectlyLost:
		return event.ClassIndirect
	case scan.PossiblyLost:
		return event.ClassPossible
	case scan.StillReachable:
		return event.ClassReachable
	}
	return event.ClassUnknown
}

// SnapshotOptions configure Snapshot.
type SnapshotOptions struct {
	// File is the trace file written: made new, mode 0600, as a session's
	// (see Properties.File), named only once it is whole.
	File string
	// Overwrite replaces a File that is a symbolic link or another user's
	// file, as Properties.Overwrite does.
	Overwrite bool
	// Scan also scans the heap for reachability and who holds each kind
	// of block, in the same stop (see Properties.CensusScan).
	Scan bool
	// Session names the snapshot in the file's header; "" is
	// "snapshot-PID".
	Session string
}

// Snapshot takes a census of the heap of the running process pid and
// writes it as a trace file of no events: the process, its modules, and at
// one instant the census (every block live, what the blocks are), the
// process's resident memory explained, and with Scan the reachability of
// each block. report, serve and info read it as any trace; every block in
// it was allocated before the trace. The error wraps ErrNotSupported (an
// allocator the census does not read), ErrNoLayout (a glibc it cannot
// confirm the layout of), ErrNoSuchProcess, ErrAccessDenied or
// ErrCannotStop.
func Snapshot(pid int, o SnapshotOptions) (CensusResult, error) {
	if o.File == "" {
		return CensusResult{}, fmt.Errorf("snapshot: no file: %w", errs.ErrInvalidFlags)
	}
	if !proc.Alive(pid) {
		return CensusResult{}, fmt.Errorf("snapshot: pid %d: %w", pid, errs.ErrNoSuchProcess)
	}
	name := o.Session
	if name == "" {
		name = fmt.Sprintf("snapshot-%d", pid)
	}
	h := tracefile.Header{Session: name, Provider: "census", Clock: "CLOCK_MONOTONIC",
		Properties: []tracefile.Property{{Key: "census_scan", Value: strconv.FormatBool(o.Scan)}}}
	h.Hostname, _ = os.Hostname()
	h.WallStart, h.MonoStart = clockPair()
	w, err := tracefile.Create(o.File, h, tracefile.Options{Hold: true, Replace: o.Overwrite, FlushInterval: -1})
	if err != nil {
		return CensusResult{}, err
	}
	defer w.Close() // removes the file unless committed
	st, err := proc.ReadStat(pid)
	if err != nil {
		return CensusResult{}, fmt.Errorf("snapshot: %w", err)
	}
	exe, _ := proc.Exe(pid)
	cmdline, _ := proc.Cmdline(pid)
	now := monotonicNow()
	mods, _ := proc.Modules(pid, now)
	var errList []error
	errList = append(errList, w.Process(event.Process{PID: uint32(pid), PPID: uint32(st.PPID), Time: now, Exe: exe, Cmdline: cmdline}))
	for _, m := range mods {
		errList = append(errList, w.Module(m))
	}
	notes, r, _, err := takeCensus(pid, o.Scan, censusHooks{})
	if err != nil {
		return r, err // "census: pid N ...": one line, wrapping the sentinels
	}
	if r.Warning != "" {
		errList = append(errList, w.Note(event.Warning{PID: uint32(pid), Time: r.Time, Code: "census", Text: r.Warning}))
	}
	errList = append(errList, writeNotes(w, notes))
	errList = append(errList, w.Stats(event.Stats{Time: monotonicNow()}))
	if err := errors.Join(errList...); err != nil {
		return r, fmt.Errorf("snapshot: writing %s: %w", o.File, err)
	}
	if err := w.Commit(); err != nil {
		return r, err
	}
	return r, w.Close()
}

// TakeCensus takes a census of the heap of running process pid, as
// Snapshot does, without writing a file: its notes (the event.Census, the
// event.Resident and, with scan, the event.Verdict), timed in
// CLOCK_MONOTONIC. What `heapscope info PID` prints. The errors are
// Snapshot's.
func TakeCensus(pid int, scan bool) (CensusResult, []event.Note, error) {
	if !proc.Alive(pid) {
		return CensusResult{PID: pid}, nil, fmt.Errorf("census: pid %d: %w", pid, errs.ErrNoSuchProcess)
	}
	notes, r, _, err := takeCensus(pid, scan, censusHooks{})
	return r, notes, err
}
