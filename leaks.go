package heapscope

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/internal/errs"
	"github.com/heapscope/heapscope/internal/proc"
	"github.com/heapscope/heapscope/internal/stopped"
	"github.com/heapscope/heapscope/internal/totals"
	"github.com/heapscope/heapscope/scan"
	"github.com/heapscope/heapscope/scan/roots"
)

// LeakCheck says when a session checks its processes for leaks: scans
// their memory for the blocks no pointer reaches (see Session.Leaks).
type LeakCheck string

// The leak checks.
const (
	// LeakCheckDefault is LeakCheckExit for a program Launch starts,
	// unless the session samples (a scan needs every block), and
	// LeakCheckOff for Start.
	LeakCheckDefault LeakCheck = ""
	// LeakCheckExit scans the program Launch started as it exits: after
	// its last instruction (exit handlers and destructors run, or _exit,
	// or a fatal signal), before its memory is released, every thread
	// held. The program is traced (ptrace) from its start for that, which
	// costs it a round trip to heapscope per signal, thread and exec, and
	// keeps another debugger off it.
	LeakCheckExit LeakCheck = "exit"
	// LeakCheckOff scans only when asked (Leaks).
	LeakCheckOff LeakCheck = "off"
)

// LeakRules are whose rules a leak check classifies by: event.RulesMemcheck
// (the zero value) or event.RulesLSan.
type LeakRules = event.Rules

// validateLeakCheck checks p's leak check settings (Validate).
func (p Properties) validateLeakCheck() error {
	switch p.LeakCheck {
	case LeakCheckDefault, LeakCheckOff:
	case LeakCheckExit:
		if p.Sample > 0 {
			return &PropertyError{Field: "LeakCheck", Value: p.LeakCheck, With: "Sample", WithValue: p.Sample,
				Reason: "a leak check needs every block, and a sampled session records some", Err: errs.ErrInvalidFlags}
		}
	default:
		return &PropertyError{Field: "LeakCheck", Value: p.LeakCheck, Want: "exit or off", Err: errs.ErrInvalidFlags}
	}
	if p.LeakRules > event.RulesLSan {
		return &PropertyError{Field: "LeakRules", Value: p.LeakRules, Want: "memcheck or lsan", Err: errs.ErrInvalidFlags}
	}
	return nil
}

// checksAtExit reports whether a session launching a program with p scans
// it at its exit.
func (p Properties) checksAtExit() bool {
	return p.LeakCheck == LeakCheckExit || p.LeakCheck == LeakCheckDefault && p.Sample == 0
}

// LeaksQuery asks a session for a leak check (Session.Leaks, or the control
// operation "leaks" through Leaks).
type LeaksQuery struct {
	// PID is the process to check; 0: every process the session traces.
	PID int `json:"pid,omitempty"`
	// Rules are whose classification to follow; the zero value is the
	// session's (Properties.LeakRules). Set it with Rules and RulesSet.
	Rules    event.Rules `json:"rules"`
	RulesSet bool        `json:"rules_set,omitempty"`
	// Sites is how many sites of each class the answer lists (default
	// 10, at most MaxTopSites).
	Sites int `json:"sites,omitempty"`
}

// LeaksResult is a leak check of a session's processes.
type LeaksResult struct {
	Processes []LeakCheckResult `json:"processes"`
	// Modules are the session's module records of the processes checked,
	// to symbolize the sites' frames with.
	Modules []event.Module `json:"modules,omitempty"`
}

// LeakCheckResult is the leak check of one process.
type LeakCheckResult struct {
	PID int `json:"pid"`
	// Time is when the process was stopped (CLOCK_MONOTONIC ns).
	Time   int64       `json:"time"`
	AtExit bool        `json:"at_exit,omitempty"`
	Rules  event.Rules `json:"rules"`
	// Paused is how long the process was stopped (ns): from its first
	// thread's stop until its memory was read; Elapsed, the whole check
	// (ns), the classification after the process went on included.
	Paused  int64 `json:"paused_ns"`
	Elapsed int64 `json:"elapsed_ns"`
	// Blocks is the live blocks the session knew of the process.
	Blocks  uint64      `json:"blocks"`
	Classes LeakClasses `json:"classes"`
	// Complete: every root and block the scan needed was read, and no
	// event was lost; when not, the blocks whose class could change are
	// Unclassified, and Notes say why.
	Complete bool `json:"complete"`
	// Partial: the session did not know every live block (those
	// allocated before tracing began, or inherited across a fork): the
	// heap's other memory was scanned as roots, so a block called lost is
	// lost, and one still reachable may be held only by memory already
	// freed.
	Partial bool `json:"partial,omitempty"`
	// Sites are the sites with the most bytes in each class, largest
	// first, at most LeaksQuery.Sites of each.
	Sites []LeakSite `json:"sites"`
	// Notes say what the check could not do, one sentence each.
	Notes []string `json:"notes,omitempty"`
	// Error is why the check failed (the process exited or could not be
	// stopped): then there are no classes.
	Error string `json:"error,omitempty"`
}

// LeakClasses counts a leak check's blocks by class.
type LeakClasses struct {
	DefinitelyLost LeakAmount `json:"definitely_lost"`
	IndirectlyLost LeakAmount `json:"indirectly_lost"`
	PossiblyLost   LeakAmount `json:"possibly_lost"`
	StillReachable LeakAmount `json:"still_reachable"`
	Unclassified   LeakAmount `json:"unclassified"`
}

// Lost is definitely plus indirectly lost: the leaks.
func (c LeakClasses) Lost() LeakAmount {
	return LeakAmount{c.DefinitelyLost.Bytes + c.IndirectlyLost.Bytes, c.DefinitelyLost.Blocks + c.IndirectlyLost.Blocks}
}

func (c *LeakClasses) of(k event.Class) *LeakAmount {
	switch k {
	case event.ClassDefinite:
		return &c.DefinitelyLost
	case event.ClassIndirect:
		return &c.IndirectlyLost
	case event.ClassPossible:
		return &c.PossiblyLost
	case event.ClassReachable:
		return &c.StillReachable
	}
	return &c.Unclassified
}

// LeakAmount is a number of blocks and their bytes.
type LeakAmount struct {
	Bytes  uint64 `json:"bytes"`
	Blocks uint64 `json:"blocks"`
}

// LeakSite is one stack's blocks of one class.
type LeakSite struct {
	Class  event.Class `json:"class"`
	Frames []uint64    `json:"frames"` // return addresses, innermost first
	Bytes  uint64      `json:"bytes"`
	Blocks uint64      `json:"blocks"`
}

// Leaks runs a leak check of the live session named name, which may run in
// any process (the control operation "leaks"; see Session.Leaks).
func Leaks(name string, q LeaksQuery) (LeaksResult, error) {
	var r LeaksResult
	err := call(name, "leaks", q, &r)
	return r, err
}

// leakState is the session's side of its leak checks.
type leakState struct {
	mu    sync.Mutex // one check at a time
	watch *stopped.Watch
}

// Leaks checks the session's processes for leaks, now: each is stopped (all
// its threads), its memory read from its roots (the writable segments of
// its modules, each thread's stack, registers and thread-local storage, the
// loader's blocks), the blocks the session knows classified by what points
// to them (package scan), and let go on; the verdict goes into the trace,
// so that every report shows it, and into top's totals. Blocks allocated
// before the session traced the process (before an attach) are not known:
// the check of such a process is Partial.
//
// A process that cannot be checked (it exited or executed a new program
// meanwhile, a thread does not stop) has an Error in its result; the
// others are checked all the same.
func (s *Session) Leaks(q LeaksQuery) (LeaksResult, error) {
	if q.Sites == 0 {
		q.Sites = 10
	}
	if q.Sites < 0 || q.Sites > MaxTopSites {
		return LeaksResult{}, fmt.Errorf("leaks: %d sites asked, 1 to %d: %w", q.Sites, MaxTopSites, errs.ErrInvalidFlags)
	}
	if !q.RulesSet {
		q.Rules = s.props.LeakRules
	}
	if q.Rules > event.RulesLSan {
		return LeaksResult{}, fmt.Errorf("leaks: unknown rules %d: %w", q.Rules, errs.ErrInvalidFlags)
	}
	if err := s.canCheck(); err != nil {
		return LeaksResult{}, err
	}
	pids := s.livePIDs()
	if q.PID != 0 {
		if !containsPID(pids, q.PID) {
			return LeaksResult{}, fmt.Errorf("leaks: pid %d is not traced by session %q: %w", q.PID, s.name, errs.ErrNoSuchProcess)
		}
		pids = []int{q.PID}
	}
	if len(pids) == 0 {
		return LeaksResult{}, fmt.Errorf("leaks: session %q traces no process now: %w", s.name, errs.ErrNoSuchProcess)
	}
	var res LeaksResult
	for _, pid := range pids {
		res.Processes = append(res.Processes, s.check(pid, nil, q))
	}
	agg, _, err := s.liveTotals()
	if err == nil {
		s.sink.mu.Lock()
		for _, pid := range pids {
			res.Modules = append(res.Modules, agg.Modules(uint32(pid))...)
		}
		s.sink.mu.Unlock()
	}
	return res, nil
}

func containsPID(pids []int, pid int) bool {
	for _, p := range pids {
		if p == pid {
			return true
		}
	}
	return false
}

// canCheck says why the session cannot check leaks at all: a sampled
// session knows only some blocks, and a scan that does not know the others
// would call lost what they hold.
func (s *Session) canCheck() error {
	if s.props.Sample > 0 {
		return fmt.Errorf("leaks: session %q samples its allocations: a leak check needs every block: %w", s.name, errs.ErrInvalidFlags)
	}
	if s.props.Mode == Aggregate {
		return fmt.Errorf("leaks: session %q keeps aggregates (--mode aggregate), not the blocks' addresses: %w", s.name, errs.ErrInvalidFlags)
	}
	return nil
}

// liveTotals turns the session's per-stack totals on, as a top client does
// (reading back its trace file so far, and waiting for that), and returns
// them, and whether they hold every event since the session began (seeded
// from a sequential trace file, or on since then).
func (s *Session) liveTotals() (*totals.Totals, bool, error) {
	ts := &s.top
	ts.mu.Lock()
	if !ts.on {
		if err := s.subscribe(); err != nil {
			ts.mu.Unlock()
			return nil, false, err
		}
	}
	ts.last = time.Now()
	for ts.reading {
		done := ts.readDone
		ts.mu.Unlock()
		<-done
		ts.mu.Lock()
	}
	complete := ts.seeded || ts.fromStart
	ts.mu.Unlock()
	s.sink.mu.Lock()
	agg := s.sink.agg
	s.sink.mu.Unlock()
	if agg == nil {
		return nil, false, fmt.Errorf("leaks: the session's totals are off: %w", errs.ErrNotRunning)
	}
	return agg, complete, nil
}

// processFlusher is a backend that can deliver one stopped process's
// events without waiting for a record a stopped thread is writing.
type processFlusher interface {
	flushProcess(pid int) error
}

func (s *Session) flushProcess(pid int) error {
	if f, ok := s.b.(processFlusher); ok {
		return f.flushProcess(pid)
	}
	return s.b.flush()
}

// testHookResumed, if set by a test, runs once a check has let its process
// go, before it classifies: a slow classification.
var testHookResumed func(pid int)

// check runs one process's leak check: held, when it is already stopped
// (at its exit), or stopped here.
func (s *Session) check(pid int, held *stopped.Process, q LeaksQuery) (r LeakCheckResult) {
	ls := &s.leaks
	ls.mu.Lock()
	defer ls.mu.Unlock()
	// Not while a census at an attach stops the process (one tracer at a
	// time): after it, the check knows the blocks it found.
	s.cen.mu.Lock()
	defer s.cen.mu.Unlock()
	r = LeakCheckResult{PID: pid, Rules: q.Rules, AtExit: held != nil, Sites: []LeakSite{}}
	start := time.Now()
	// The scan lets the process go once it has read its memory: if it
	// ends then, its Exit comes after the verdict all the same.
	s.sink.holdExits(uint32(pid))
	defer s.sink.releaseExits(uint32(pid))
	fail := func(err error) LeakCheckResult {
		r.Error = err.Error()
		s.sink.Note(event.Warning{PID: uint32(pid), Time: monoNow(), Code: "leak-check-failed", Text: "leak check of pid " + fmt.Sprint(pid) + ": " + err.Error()})
		return r
	}
	// The totals first: their read-back may take a while, and a running
	// process should not wait for it.
	agg, complete, err := s.liveTotals()
	if err != nil {
		return fail(err)
	}
	p := held
	if p == nil {
		w := ls.watch
		if w != nil && w.PID() == pid {
			p, err = w.Stop(stopped.Options{})
		} else {
			p, err = stopped.Stop(pid, stopped.Options{})
		}
		if err != nil {
			return fail(err)
		}
	}
	defer p.Resume()
	r.Time = monoNow()
	if err := s.flushProcess(pid); err != nil {
		return fail(fmt.Errorf("delivering its events: %w", err))
	}
	stats := s.Stats()
	lost := stats.TotalLost() > 0
	s.sink.mu.Lock()
	live := agg.LiveBlocks(uint32(pid))
	censused := agg.Censused(uint32(pid))
	images := s.sink.images[uint32(pid)]
	r.Time = max(r.Time, agg.Time()) // after every event the check saw, in the trace's order
	s.sink.mu.Unlock()

	// What the session cannot know: the blocks of a process it did not
	// trace from its start (unless a census of its heap at the attach
	// brought them: see census.go), or of a former program of the PID.
	known := complete && images <= 1 && (pid == s.launchedPID() || censused)
	var notes []string
	if !known {
		r.Partial = true
		switch {
		case pid != s.launchedPID() && !censused:
			notes = append(notes, "blocks allocated before the session traced this process (before the attach with no census, or inherited across a fork) are not known: the heap's other memory was scanned as roots")
		case images > 1:
			notes = append(notes, "the process executed a new program: the blocks of the former one are not told apart, and the heap's other memory was scanned as roots")
		default:
			notes = append(notes, "the session's trace could not be read back whole (not a sequential file): the heap's other memory was scanned as roots")
		}
	}
	blocks := make([]scan.Block, len(live))
	for i, b := range live {
		blocks[i] = scan.Block{Addr: b.Addr, Size: b.Size, ID: uint64(i)}
	}
	rts, gnotes := roots.Gather(p, roots.Options{})
	trimRedZones(&rts, p.Threads())
	notes = append(notes, gnotes...)
	if missing := p.Missing(); len(missing) > 0 {
		notes = append(notes, fmt.Sprintf("threads %v did not stop at the exit: their stacks and registers were not scanned", missing))
	}
	base := len(rts.Ranges)
	rts.Ranges = append(rts.Ranges, otherMemory(p.Maps(), rts, live, p.Threads(), r.Partial)...)
	opt := scan.Options{Rules: scan.Rules(q.Rules), AfterRead: func() {
		p.Resume()
		if testHookResumed != nil {
			testHookResumed(pid)
		}
	}}
	res, err := scan.Scan(blocks, p, rts, opt)
	if errors.Is(err, scan.ErrOverlap) {
		// A free the session did not see leaves a block it thinks live
		// where a newer one is: leave out every block that overlaps
		// another, their memory taken as roots. (Rare: sorting for it
		// first would lengthen every pause.)
		var dropped int
		blocks, dropped = scanBlocks(live)
		notes = append(notes, fmt.Sprintf("%d blocks overlapped others (a free the session did not see): left out, their memory scanned as roots", dropped))
		if !r.Partial {
			r.Partial = true
			rts.Ranges = append(rts.Ranges[:base], otherMemory(p.Maps(), scan.Roots{Ranges: rts.Ranges[:base]}, live, p.Threads(), true)...)
		}
		res, err = scan.Scan(blocks, p, rts, opt)
	}
	r.Paused = int64(p.Paused())
	r.Blocks = uint64(len(blocks))
	if err != nil {
		return fail(err)
	}
	for _, u := range res.Unread {
		what := u.Root
		if what == "" {
			what = fmt.Sprintf("block %#x (%d bytes)", u.Addr, u.Size)
		}
		notes = append(notes, fmt.Sprintf("could not read %s: %v", what, u.Err))
	}
	r.Complete = len(res.Unread) == 0 && len(p.Missing()) == 0 && !lost
	if lost {
		notes = append(notes, "the session lost events: a block whose free was lost would look lost, so no block is called lost")
	}
	v := event.Verdict{PID: uint32(pid), Time: r.Time, Rules: q.Rules, Pause: r.Paused, Complete: r.Complete, Partial: r.Partial, AtExit: held != nil,
		Blocks: make([]event.BlockClass, len(blocks))}
	type siteKey struct {
		stack event.StackID
		class event.Class
	}
	sites := map[siteKey]*LeakSite{}
	for i, vd := range res.Verdicts {
		b := live[blocks[i].ID]
		c := event.Class(vd.Class) // scan's classes are event's, in the same order
		if lost && c.Lost() || len(p.Missing()) > 0 && c != event.ClassReachable {
			c = event.ClassUnknown
		}
		v.Blocks[i] = event.BlockClass{Addr: b.Addr, Class: c}
		a := r.Classes.of(c)
		a.Bytes += b.Size
		a.Blocks++
		k := siteKey{b.Stack, c}
		st := sites[k]
		if st == nil {
			st = &LeakSite{Class: c}
			sites[k] = st
		}
		st.Bytes += b.Size
		st.Blocks++
	}
	sort.Slice(v.Blocks, func(i, j int) bool { return v.Blocks[i].Addr < v.Blocks[j].Addr })
	r.Elapsed = int64(time.Since(start))
	v.Elapsed = r.Elapsed
	r.Notes = notes
	if err := s.sink.Note(v); err != nil {
		r.Notes = append(r.Notes, "the verdict could not be written to the trace: "+err.Error())
	}
	for _, n := range notes {
		s.sink.Note(event.Warning{PID: uint32(pid), Time: r.Time, Code: "leak-check", Text: fmt.Sprintf("leak check of pid %d: %s", pid, n)})
	}
	// The top sites of each class, with their frames.
	byClass := map[event.Class][]siteKey{}
	for k := range sites {
		byClass[k.class] = append(byClass[k.class], k)
	}
	s.sink.mu.Lock()
	for _, c := range []event.Class{event.ClassDefinite, event.ClassIndirect, event.ClassPossible, event.ClassReachable, event.ClassUnknown} {
		ks := byClass[c]
		sort.Slice(ks, func(i, j int) bool {
			a, b := sites[ks[i]], sites[ks[j]]
			if a.Bytes != b.Bytes {
				return a.Bytes > b.Bytes
			}
			return ks[i].stack < ks[j].stack
		})
		for _, k := range ks[:min(len(ks), q.Sites)] {
			st := sites[k]
			st.Frames = agg.Frames(uint32(pid), k.stack)
			r.Sites = append(r.Sites, *st)
		}
	}
	s.sink.mu.Unlock()
	return r
}

// scanBlocks turns a live set into the scan's blocks (ID: the index in
// live), leaving out blocks that overlap another: with a free lost, a
// block seen live may lie where a newer one is.
func scanBlocks(live []totals.LiveBlock) ([]scan.Block, int) {
	idx := make([]int, len(live))
	for i := range idx {
		idx[i] = i
	}
	sort.Slice(idx, func(i, j int) bool { return live[idx[i]].Addr < live[idx[j]].Addr })
	bad := make([]bool, len(live))
	end := uint64(0)
	last := -1
	for _, i := range idx {
		b := live[i]
		if last >= 0 && b.Addr < end {
			bad[i], bad[last] = true, true
		}
		if e := b.Addr + max(b.Size, 1); e > end {
			end, last = e, i
		}
	}
	var out []scan.Block
	dropped := 0
	for _, i := range idx {
		if bad[i] {
			dropped++
			continue
		}
		out = append(out, scan.Block{Addr: live[i].Addr, Size: live[i].Size, ID: uint64(i)})
	}
	return out, dropped
}

// otherMemory are the roots a check adds to LeakSanitizer's (scan/roots):
// the process's other writable memory, as Memcheck scans all of it but
// the heap. A program that keeps its objects in memory it mapped itself
// (Python's object arenas, a pool allocator over mmap) holds blocks of
// malloc's from there: without it they would look lost. Left out, when the
// check knows every live block: malloc's heap (see mallocHeap), where what
// is not a live block is free chunks, holding what freed blocks held, and
// the stacks of the threads (scanned from their stack pointers already). A
// partial check takes those too: the blocks it does not know lie there.
// Left out always: the interposer's rings and control block, which hold
// the address of every block it recorded.
func otherMemory(maps []proc.Mapping, rts scan.Roots, live []totals.LiveBlock, threads []stopped.Thread, partial bool) []scan.Range {
	covered := func(m proc.Mapping) bool {
		for _, r := range rts.Ranges {
			if r.Addr <= m.Start && r.Addr+r.Size >= m.End {
				return true
			}
		}
		return false
	}
	var heap []extent
	skip := make([]bool, len(maps))
	if !partial {
		heap = mallocHeap(maps, live)
		for _, t := range threads {
			if i := mapIndex(maps, t.SP()); i >= 0 {
				skip[i] = true
			}
		}
	}
	var out []scan.Range
	for i, m := range maps {
		if skip[i] || len(m.Perms) < 2 || m.Perms[0] != 'r' || m.Perms[1] != 'w' || covered(m) || m.Path == "[vvar]" ||
			roots.IsInterposer(m.Path) || strings.HasPrefix(m.Path, "/memfd:heapscope-") {
			continue
		}
		name := m.Path
		if name == "" {
			name = "anonymous"
		}
		// The mapping less malloc's heap in it.
		at := m.Start
		for _, h := range heap {
			if h.end <= at || h.start >= m.End {
				continue
			}
			if h.start > at {
				out = append(out, scan.Range{Addr: at, Size: h.start - at, Name: "writable memory outside the heap: " + name})
			}
			at = max(at, h.end)
		}
		if at < m.End {
			out = append(out, scan.Range{Addr: at, Size: m.End - at, Name: "writable memory outside the heap: " + name})
		}
	}
	return out
}

// extent is [start, end).
type extent struct{ start, end uint64 }

// glibc's layout: a heap of an arena other than the main one is a region
// of heapMax bytes aligned to its size; a block malloc mapped alone has its
// chunk's header (16 bytes) at the start of a page.
const (
	heapMax    = 64 << 20
	chunkHead  = 16
	pageSize   = 4096
	heapRegion = "[heap]"
)

// mallocHeap returns the extents of glibc malloc's heap that hold the live
// blocks, sorted: the main arena's [heap]; the heap of another arena a
// block lies in (its aligned region, within the mapping); a block mapped
// alone, its own pages.
func mallocHeap(maps []proc.Mapping, live []totals.LiveBlock) []extent {
	seen := map[extent]bool{}
	var out []extent
	add := func(e extent) {
		if e.start < e.end && !seen[e] {
			seen[e] = true
			out = append(out, e)
		}
	}
	for _, b := range live {
		i := mapIndex(maps, b.Addr)
		if i < 0 {
			continue
		}
		m := maps[i]
		switch {
		case m.Path == heapRegion:
			add(extent{m.Start, m.End})
		case (b.Addr-chunkHead)%pageSize == 0 && b.Addr-chunkHead >= m.Start:
			end := (b.Addr + b.Size + pageSize - 1) &^ (pageSize - 1)
			add(extent{b.Addr - chunkHead, min(end, m.End)})
		default:
			base := b.Addr &^ (heapMax - 1)
			add(extent{max(base, m.Start), min(base+heapMax, m.End)})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].start < out[j].start })
	return out
}

// mapIndex returns the index of the mapping that holds addr, or -1.
func mapIndex(maps []proc.Mapping, addr uint64) int {
	i := sort.Search(len(maps), func(i int) bool { return maps[i].End > addr })
	if i < len(maps) && maps[i].Start <= addr {
		return i
	}
	return -1
}

// monoNow is CLOCK_MONOTONIC in ns, the trace's clock.
func monoNow() int64 {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}

// launchedPID is the program Launch started, 0 for none.
func (s *Session) launchedPID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.child == nil || s.child.Process == nil {
		return 0
	}
	return s.child.Process.Pid
}

// watchExit seizes the program Launch started so that its exit is held for
// a leak check (LeakCheckExit), and so that the children it forks are held
// unseen (a backend that holds them, see ebpfBackend.holdsChildren); then
// it lets the program run. A program that cannot be seized runs on without
// them; the trace says why.
func (s *Session) watchExit(pid int) {
	var opt stopped.WatchOptions
	if h, ok := s.b.(interface{ watchOptions() stopped.WatchOptions }); ok {
		opt = h.watchOptions()
	}
	exitCheck := s.props.checksAtExit()
	if exitCheck {
		opt.OnExit = func(p *stopped.Process) {
			s.check(pid, p, LeaksQuery{Rules: s.props.LeakRules, Sites: 10})
		}
	}
	// The backend started it stopped (SIGSTOP) before its first
	// instruction: seized, it goes on.
	w, err := stopped.Seize(pid, opt)
	unix.Kill(pid, unix.SIGCONT)
	if err != nil {
		if !exitCheck {
			s.sink.Note(childrenStopped(pid, err))
			return
		}
		text := "no leak check at exit: " + err.Error()
		if errors.Is(err, errs.ErrCannotStop) {
			text += " (another debugger traces the program)"
		}
		s.sink.Note(event.Warning{PID: uint32(pid), Time: monoNow(), Code: "leak-check-failed", Text: text})
		return
	}
	s.leaks.mu.Lock()
	s.leaks.watch = w
	s.leaks.mu.Unlock()
}

// exitWatch returns the watch of the launched program, nil when there is
// none.
func (s *Session) exitWatch() *stopped.Watch {
	s.leaks.mu.Lock()
	defer s.leaks.mu.Unlock()
	return s.leaks.watch
}

// keepTotalsFromStart turns the session's totals on now, for good, when a
// leak check at exit could not read back the trace file for its live set
// (a circular or newfile series, or no file): they then cost a table
// insert and delete per block for the whole session.
func (s *Session) keepTotalsFromStart() {
	if s.sink.w != nil && s.props.FileMode == Sequential {
		return // the exit's check reads the file back
	}
	ts := &s.top
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.on {
		return
	}
	sk := s.sink
	sk.mu.Lock()
	if sk.keepAgg {
		// An exporting session's totals are kept from its start already
		// (exports.go); subscribe hands them to the check.
		sk.mu.Unlock()
		return
	}
	sk.agg = totals.New()
	sk.mu.Unlock()
	ts.gen++
	ts.on, ts.seeded, ts.reading, ts.fromStart = true, false, false, true
	ts.clients = map[string]*topClient{}
	ts.last = time.Now()
}

// openPidfd opens a pidfd of the child pid (-1 when the kernel has none:
// before 5.3).
func openPidfd(pid int) int {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return -1
	}
	return fd
}

// waitEnded waits until the process of pidfd has ended, and closes it. A
// pidfd becomes readable when the process exits, never at a stop.
func waitEnded(pidfd int) {
	if pidfd < 0 {
		return
	}
	defer unix.Close(pidfd)
	fds := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(fds, -1)
		if err == nil && n > 0 || err != nil && !errors.Is(err, unix.EINTR) {
			return
		}
	}
}

// livePIDs are the processes the session traces and has seen start (a
// Process record) and not end: the provider's (the processes it attached
// or launched) and the others (those they forked, which the preload
// provider follows), in order.
func (s *Session) livePIDs() []int {
	pids := s.b.pids()
	s.sink.mu.Lock()
	for pid := range s.sink.running {
		if !containsPID(pids, int(pid)) && proc.Alive(int(pid)) {
			pids = append(pids, int(pid))
		}
	}
	s.sink.mu.Unlock()
	sort.Ints(pids)
	return pids
}

// trimRedZones starts the stack of each thread stopped in a system call at
// its stack pointer, as LeakSanitizer and Memcheck take stacks: the 128
// bytes below it that scan/roots adds (the red zone, which a leaf function
// may use) hold only what the calls before it left when the thread sits in
// a system call, at its exit above all, where the exit path's last calls
// (free's wrapper among them) leave pointers to blocks that nothing holds.
func trimRedZones(rts *scan.Roots, threads []stopped.Thread) {
	for _, t := range threads {
		if int64(t.Regs.Orig_rax) < 0 {
			continue // interrupted in its own code: its red zone may be live
		}
		name := "stack of thread " + strconv.Itoa(t.TID)
		for i := range rts.Ranges {
			r := &rts.Ranges[i]
			if r.Name == name && r.Addr < t.SP() && t.SP() < r.Addr+r.Size {
				r.Size -= t.SP() - r.Addr
				r.Addr = t.SP()
			}
		}
	}
}
