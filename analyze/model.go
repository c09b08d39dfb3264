package analyze

import (
	"math"
	"math/bits"
	"slices"
	"sort"

	"github.com/heapscope/heapscope/event"
)

// Options tune a Model. The zero value analyses the whole trace.
type Options struct {
	// From and To bound the window analysed, [From, To), in the trace's
	// clock (CLOCK_MONOTONIC ns); 0 leaves that side open. See the package
	// documentation for what a window means.
	From, To int64
	// TimelinePoints bounds the timeline (default 512).
	TimelinePoints int
	// SampleRate is the trace's sampling rate (tracefile.Header's), 0 for
	// an exact trace: a sampled trace's totals are estimated from it (see
	// SampleWeights).
	SampleRate int64
}

// DefaultTimelinePoints is the timeline's bound when Options leave it 0.
const DefaultTimelinePoints = 512

// Model is the heap model. It implements event.Sink; feed it a trace's
// records in order and call Profile when they end. A Model is not safe for
// concurrent use.
type Model struct {
	from, to int64

	procs    map[uint32]*proc
	procList []*proc
	nkeys    int // process keys given (see blockTable.procKey)
	lastPID  uint32
	lastProc *proc

	threads map[uint64]*thread
	thrHot  [16]*thread // direct-mapped by thread id: most streams use few threads

	// The process and thread of the last event, and their key.
	curKey    uint64
	curProc   *proc
	curThread *thread

	sites  []site
	frames frameArena
	blocks blockTable

	// Totals over every process, for the peak and the timeline.
	liveBytes, liveBlocks uint64
	peak                  Peak
	epoch                 uint64 // number of the latest peak
	timeline              timeline
	hist                  [65]uint64

	events, unmatched, missed uint64
	htTemporary               uint64  // temporaries by heaptrack's definition
	bytesVar                  float64 // of the bytes allocated, when sampled
	rate                      int64   // the trace's sampling rate; 0: exact
	sampled                   uint64  // allocations recorded, in a sampled trace
	start, end                int64
	firstEv, lastEv           int64 // the first and last heap events' times

	modules  []event.Module
	strs     map[string]string // the processes' strings, kept once
	stats    event.Stats
	hasStats bool
	warnings []event.Warning
	seenWarn map[event.Warning]bool
	memory   []event.Memory
	verdicts []Verdict

	rundown rundownState // what censuses told (census.go)

	snaps        map[uint32]*snapProc
	snapPeak     Peak
	snapPeakSet  map[uint32]*event.Snapshot // each process's latest snapshot at the snapshot peak
	snapLiveSums map[uint32][2]uint64       // live bytes and blocks of each process's latest snapshot
}

// proc is the model's state for one process.
type proc struct {
	pid   uint32
	key   uint64 // dense index << addrBits, for block keys
	info  Process
	known bool    // a Process record was seen
	ids   []int32 // StackID → site index + 1, for small IDs
	idm   map[event.StackID]int32
	maps  *mappings // live mmap pages; nil until the first
	// sites are the process's sites, for its exit; gen counts its exits,
	// and exitTime is the latest's.
	sites    []int32
	gen      uint32
	exitTime int64

	// The site (index + 1) and size of the process's last allocation
	// recorded, as heaptrack keeps them to count temporaries (see
	// heaptrackFreed); 0 after a free.
	htSite int32
	htSize uint64

	unmatched uint64 // unmatched frees since its last census (census.go)
}

// thread is a thread's last heap event, for temporaries: the address it
// allocated, or 0 when its last event was not a successful allocation.
type thread struct {
	key  uint64 // pid << 32 | tid
	tid  uint32
	last uint64
}

// site is what the model counts for one stack of one process: a Stack,
// laid out so that the counters every event touches share a cache line.
type site struct {
	stamp                 uint64 // the peak number at which peakBytes/peakBlocks were saved
	liveBytes, liveBlocks uint64
	allocs, bytes         uint64
	frees, freedBytes     uint64
	temporary             uint64

	reallocs, failed      uint64
	peakBytes, peakBlocks uint64
	// gone is what of liveBytes and liveBlocks the exit of the site's
	// process left: leaks, no longer in the heap (see Model.Exit).
	goneBytes, goneBlocks uint64
	// vars are, in a sampled trace, the variances of its estimates
	// (nil in an exact one, whose sites they would only weigh).
	vars *siteVars
	// classes are of the live blocks a scan classified (nil: none); the
	// leaks an exit left keep theirs.
	classes *[event.NumClasses]Amount
	pid     uint32
	id      event.StackID
	frames  []uint64
}

// siteVars are the variances of a sampled site's estimates liveBytes,
// goneBytes and peakBytes (see SampleVariance).
type siteVars struct{ live, gone, peak float64 }

// heapVar is the variance of s's bytes in the heap.
func (s *site) heapVar() float64 {
	if s.vars == nil {
		return 0
	}
	return max(s.vars.live-s.vars.gone, 0)
}

// stack returns s as a Stack, its values at the peak saved at peak number
// epoch.
func (s *site) stack(epoch uint64) Stack {
	st := Stack{
		PID: s.pid, ID: s.id, Frames: s.frames,
		Counters: Counters{
			Allocations: s.allocs, Reallocations: s.reallocs, Failed: s.failed,
			Bytes: s.bytes, Frees: s.frees, FreedBytes: s.freedBytes, Temporary: s.temporary,
			LiveBytes: s.liveBytes, LiveBlocks: s.liveBlocks, PeakBytes: s.peakBytes, PeakBlocks: s.peakBlocks,
		},
		ExitedBytes: s.goneBytes, ExitedBlocks: s.goneBlocks,
	}
	if s.vars != nil {
		st.LiveVar, st.PeakVar = s.vars.live, s.vars.peak
	}
	if s.classes != nil {
		st.Classes = *s.classes
	}
	if s.stamp != epoch {
		// Unchanged since the peak.
		st.PeakBytes, st.PeakBlocks, st.PeakVar = s.heapBytes(), s.heapBlocks(), s.heapVar()
	}
	return st
}

// heapBytes and heapBlocks are what of the site's live blocks is in the
// heap: its process has not exited since they were made.
func (s *site) heapBytes() uint64  { return s.liveBytes - s.goneBytes }
func (s *site) heapBlocks() uint64 { return s.liveBlocks - s.goneBlocks }

// New returns an empty Model.
func New(o Options) *Model {
	m := &Model{
		from:     o.From,
		to:       o.To,
		procs:    map[uint32]*proc{},
		threads:  map[uint64]*thread{},
		timeline: newTimeline(o.TimelinePoints),
		rate:     max(o.SampleRate, 0),
	}
	if o.TimelinePoints <= 0 {
		m.timeline = newTimeline(DefaultTimelinePoints)
	}
	if m.to <= 0 {
		m.to = math.MaxInt64
	}
	return m
}

var _ event.Sink = (*Model)(nil)

func (m *Model) inWindow(t int64) bool { return t >= m.from && t < m.to }

func (m *Model) seen(t int64) {
	if m.start == 0 || t < m.start {
		m.start = t
	}
	if t > m.end {
		m.end = t
	}
}

func (m *Model) proc(pid uint32) *proc {
	if m.lastProc != nil && m.lastPID == pid {
		return m.lastProc
	}
	p := m.procs[pid]
	if p == nil {
		m.nkeys++
		p = &proc{pid: pid, key: m.blocks.procKey(m.nkeys)}
		p.info.PID = pid
		m.procs[pid] = p
		m.procList = append(m.procList, p)
	}
	m.lastPID, m.lastProc = pid, p
	return p
}

func (m *Model) thread(pid, tid uint32) *thread {
	k := uint64(pid)<<32 | uint64(tid)
	h := &m.thrHot[(tid^pid)%uint32(len(m.thrHot))]
	if *h != nil && (*h).key == k {
		return *h
	}
	t := m.threads[k]
	if t == nil {
		t = &thread{key: k, tid: tid}
		m.threads[k] = t
	}
	*h = t
	return t
}

// maxDenseID bounds the stack IDs kept in a slice; larger ones go to a map.
const maxDenseID = 1 << 22

// siteOf returns the index of the site of stack id in p, creating it.
func (m *Model) siteOf(p *proc, id event.StackID) int32 {
	if int(id) < len(p.ids) {
		if s := p.ids[id]; s != 0 {
			return s - 1
		}
	}
	return m.newSite(p, id)
}

// newSite is siteOf for an id not in p.ids.
func (m *Model) newSite(p *proc, id event.StackID) int32 {
	if id >= maxDenseID {
		if s, ok := p.idm[id]; ok {
			return s - 1
		}
	}
	m.sites = append(m.sites, site{pid: p.pid, id: id})
	s := int32(len(m.sites))
	p.sites = append(p.sites, s-1)
	if id < maxDenseID {
		if int(id) >= len(p.ids) {
			n := max(2*len(p.ids), int(id)+1, 4)
			p.ids = append(p.ids, make([]int32, n-len(p.ids))...)
		}
		p.ids[id] = s
	} else {
		if p.idm == nil {
			p.idm = map[event.StackID]int32{}
		}
		p.idm[id] = s
	}
	return s - 1
}

// lookupSite is siteOf without creating: -1 when p has no such site.
func (m *Model) lookupSite(p *proc, id event.StackID) int32 {
	if int(id) < len(p.ids) {
		return p.ids[id] - 1
	}
	if s, ok := p.idm[id]; ok {
		return s - 1
	}
	return -1
}

// touch saves s's live values as its values at the peak, the first time they
// change after the latest peak.
func (m *Model) touch(s *site) {
	if s.stamp != m.epoch {
		s.peakBytes, s.peakBlocks, s.stamp = s.heapBytes(), s.heapBlocks(), m.epoch
		if s.vars != nil {
			s.vars.peak = s.heapVar()
		}
	}
}

// Process records a process.
func (m *Model) Process(ev event.Process) error {
	p := m.proc(ev.PID)
	// The caller does not reuse a Process's command line (event.Sink):
	// it is kept, its strings once each (the same command lines, by the
	// thousand in a build), equal strings put in its place.
	ev.Exe = m.intern(ev.Exe)
	for i, a := range ev.Cmdline {
		ev.Cmdline[i] = m.intern(a)
	}
	p.info.Process = ev
	p.known = true
	if m.inWindow(ev.Time) {
		m.seen(ev.Time)
	}
	return nil
}

// intern returns s, or an equal string kept before.
func (m *Model) intern(s string) string {
	if t, ok := m.strs[s]; ok {
		return t
	}
	if m.strs == nil {
		m.strs = map[string]string{}
	}
	if len(m.strs) < 1<<20 { // a bound: a million distinct strings are not shared anyway
		m.strs[s] = s
	}
	return s
}

// Exit records the end of a process. Its blocks still live stay its
// leaks (the stacks' LiveBytes and LiveBlocks), but leave the heap: from
// here on the total live bytes, the timeline and the peak count them no
// more (they are the stacks' ExitedBytes and ExitedBlocks), and the
// process's later events (of the program an exec started) find none of
// them: its blocks are keyed anew.
func (m *Model) Exit(ev event.Exit) error {
	p := m.proc(ev.PID)
	p.info.Exited, p.info.Exit = true, ev
	if m.inWindow(ev.Time) {
		m.seen(ev.Time)
	}
	if p.gen > 0 && ev.Time <= p.exitTime {
		return nil // an exit restated (a circular file's full chunk)
	}
	p.gen++
	p.exitTime = ev.Time
	var bytes, blocks uint64
	for _, si := range p.sites {
		s := &m.sites[si]
		if s.liveBlocks == s.goneBlocks && s.liveBytes == s.goneBytes {
			continue
		}
		m.touch(s)
		bytes += s.heapBytes()
		blocks += s.heapBlocks()
		s.goneBytes, s.goneBlocks = s.liveBytes, s.liveBlocks
		if s.vars != nil {
			s.vars.gone = s.vars.live
		}
	}
	m.liveBytes -= bytes
	m.liveBlocks -= blocks
	m.nkeys++
	p.key = m.blocks.procKey(m.nkeys)
	p.maps = nil
	p.htSite = 0
	p.unmatched = 0 // the exited program's: no census of the next one explains them
	if m.snaps[ev.PID] != nil {
		m.snapExit(ev)
	}
	if blocks > 0 && m.inWindow(ev.Time) {
		m.timeline.add(ev.Time, m.liveBytes, m.liveBlocks)
	}
	return nil
}

// Module records a module.
func (m *Model) Module(mod event.Module) error {
	m.modules = append(m.modules, mod)
	return nil
}

// Stack records a stack's frames.
func (m *Model) Stack(st event.Stack) error {
	p := m.proc(st.PID)
	si := m.siteOf(p, st.ID)
	m.sites[si].frames = m.frames.store(st.Frames)
	return nil
}

// Note keeps the session's warnings (once each, whatever the window: they
// are about the session) and the memory samples in the window, and applies
// the verdicts of heap scans taken in the window to the blocks they list
// (see Verdict).
func (m *Model) Note(n event.Note) error {
	switch n := n.(type) {
	case event.Warning:
		if m.seenWarn == nil {
			m.seenWarn = make(map[event.Warning]bool)
		}
		k := n
		k.Time = 0
		if !m.seenWarn[k] {
			m.seenWarn[k] = true
			m.warnings = append(m.warnings, n)
		}
	case event.Memory:
		if n.Time >= m.from && n.Time < m.to {
			m.memory = append(m.memory, n)
		}
	case event.Verdict:
		if m.inWindow(n.Time) {
			m.verdict(&n)
		}
	case event.Census:
		m.census(&n)
	case event.Resident:
		if n.Time >= m.from && n.Time < m.to {
			m.rundown.resident = append(m.rundown.resident, n)
		}
	}
	return nil
}

// Stats keeps the latest statistics.
func (m *Model) Stats(st event.Stats) error {
	m.stats, m.hasStats = st, true
	return nil
}

// Events applies a batch of heap events.
//
// This is the model's inner loop: the common events (allocations and frees
// with an address, in the window, of the process and thread of the event
// before) take the shortest path.
func (m *Model) Events(evs []event.Event) error {
	from, to, start, end, n := m.from, m.to, m.start, m.end, uint64(0)
	first, last := m.firstEv, m.lastEv
	for i := range evs {
		e := &evs[i]
		if e.Time < from || e.Time >= to {
			continue
		}
		if k := uint64(e.PID)<<32 | uint64(e.TID); k != m.curKey || m.curThread == nil {
			m.curProc, m.curThread, m.curKey = m.proc(e.PID), m.thread(e.PID, e.TID), k
		}
		p, t := m.curProc, m.curThread
		n++
		end = max(end, e.Time)
		if e.Time < start || start == 0 {
			start = e.Time
		}
		if e.Time < first || first == 0 {
			first = e.Time
		}
		last = max(last, e.Time)
		if m.rate > 0 {
			m.sampledEvent(p, t, e)
			m.timeline.add(e.Time, m.liveBytes, m.liveBlocks)
			continue
		}
		switch e.Kind {
		case event.KindAlloc:
			var si int32
			if id := e.Stack; int(id) < len(p.ids) && p.ids[id] != 0 {
				si = p.ids[id] - 1
			} else {
				si = m.newSite(p, id)
			}
			if e.Addr == 0 {
				m.sites[si].allocs++
				m.sites[si].failed++
				t.last = 0
				break
			}
			m.sites[si].allocs++
			// m.alloc, with the table's call the only one: every
			// allocation comes here.
			if packable(p, e.Addr) {
				if old, ok := m.blocks.packed.Put(p.key|e.Addr, block{size: e.Size, site: si, tid: t.tid}); ok {
					m.replaced(old)
				}
				m.added(si, e.Size)
				p.htSite, p.htSize = si+1, e.Size
			} else {
				m.alloc(p, si, t.tid, e.Addr, e.Size)
			}
			t.last = e.Addr
			m.peaked(e.Time)
		case event.KindFree:
			if e.Addr == 0 {
				continue // free(NULL) does nothing
			}
			// m.free, likewise.
			if !packable(p, e.Addr) {
				m.free(p, t, e.Addr)
			} else if b, ok := m.blocks.packed.Delete(p.key | e.Addr); ok {
				m.release(b, true)
				if t.last == e.Addr && b.thread() == t.tid {
					m.sites[b.site].temporary++
				}
				m.heaptrackFreed(p, b)
			} else {
				m.unmatched++
				p.unmatched++
			}
			t.last = 0
		case event.KindRealloc:
			m.realloc(p, t, e)
		case event.KindMmap:
			si := m.siteOf(p, e.Stack)
			m.sites[si].allocs++
			if e.Addr == 0 {
				m.sites[si].failed++
				t.last = 0
				break
			}
			m.mmap(p, si, t, e.Addr, e.Size)
			t.last = e.Addr
			m.peaked(e.Time)
		case event.KindMunmap:
			m.munmap(p, t, e.Addr, e.Size)
			t.last = 0
		default:
			n--
			continue
		}
		m.timeline.add(e.Time, m.liveBytes, m.liveBlocks)
	}
	m.start, m.end, m.events = start, end, m.events+n
	m.firstEv, m.lastEv = first, last
	return nil
}

// peaked notes a new peak, when the live bytes (just grown at time t) are
// more than ever before.
func (m *Model) peaked(t int64) {
	if m.liveBytes > m.peak.Bytes {
		m.peak = Peak{Time: t, Bytes: m.liveBytes, Blocks: m.liveBlocks}
		m.epoch++
	}
}

func (m *Model) realloc(p *proc, t *thread, e *event.Event) {
	si := m.siteOf(p, e.Stack)
	m.sites[si].reallocs++
	if e.Addr == 0 && (e.Size != 0 || e.OldAddr == 0) {
		// Failed: the old block is untouched.
		m.sites[si].failed++
		t.last = 0
		return
	}
	if e.Heap == event.HeapMmap {
		m.mremap(p, si, t, e)
		return
	}
	if e.OldAddr != 0 {
		// heaptrack records no realloc that returned NULL (one that
		// freed its block): its free leaves heaptrack's last
		// allocation as it was.
		htSite, htSize := p.htSite, p.htSize
		m.free(p, t, e.OldAddr)
		if e.Addr == 0 {
			p.htSite, p.htSize = htSite, htSize
		}
	}
	if e.Addr != 0 {
		m.alloc(p, si, t.tid, e.Addr, e.Size)
		m.peaked(e.Time)
	}
	t.last = e.Addr
}

func sizeBucket(size uint64) int {
	if size == 0 {
		return 0
	}
	return bits.Len64(size - 1)
}

func (m *Model) alloc(p *proc, si int32, tid uint32, addr, size uint64) {
	if old, ok := m.blocks.put(p, addr, block{size: size, site: si, tid: tid}); ok {
		m.replaced(old)
	}
	m.added(si, size)
	p.htSite, p.htSize = si+1, size
}

// replaced counts a live block found at the address of a new one: its free
// was lost.
func (m *Model) replaced(old block) {
	if m.sites[old.site].id != PreTrace || !m.rundown.overtaken(old) {
		m.missed++
	}
	m.release(old, false)
}

// added counts a new live block of size bytes at site si.
func (m *Model) added(si int32, size uint64) {
	s := &m.sites[si]
	m.touch(s)
	s.liveBytes += size
	s.liveBlocks++
	s.bytes += size
	m.liveBytes += size
	m.liveBlocks++
	m.hist[sizeBucket(size)]++
}

// release takes block b out of the live set.
func (m *Model) release(b block, counted bool) {
	s := &m.sites[b.site]
	m.touch(s)
	if c, ok := b.class(); ok {
		s.classes[c].Bytes -= b.size
		s.classes[c].Blocks--
	}
	s.liveBytes -= b.size
	s.liveBlocks--
	if counted {
		s.frees++
		s.freedBytes += b.size
	}
	m.liveBytes -= b.size
	m.liveBlocks--
	if s.id == PreTrace {
		m.rundown.released(b)
	}
}

func (m *Model) free(p *proc, t *thread, addr uint64) {
	b, ok := m.blocks.take(p, addr)
	if !ok {
		m.unmatched++
		p.unmatched++
		return
	}
	m.freed(p, t, addr, b)
}

// freed counts the free by thread t of p of block b at addr.
func (m *Model) freed(p *proc, t *thread, addr uint64, b block) {
	m.release(b, true)
	if t.last == addr && b.thread() == t.tid {
		m.sites[b.site].temporary++
	}
	m.heaptrackFreed(p, b)
}

// heaptrackFreed counts the free of block b of p as heaptrack counts a
// temporary (heaptrack_print and heaptrack_gui, accumulatedtracedata.cpp):
// its stream is every thread's calls, one after the other, and a free
// (its '-' record) is temporary when the record before it was an
// allocation ('+') of the same allocation info, the pair (stack, size),
// whichever block that allocation made. So a loop that allocates a new
// block and then frees an older one of the same size from the same stack
// counts a temporary at every turn, where heapscope counts none: the
// block freed is not the one just made.
func (m *Model) heaptrackFreed(p *proc, b block) {
	if p.htSite == b.site+1 && p.htSize == b.size {
		m.htTemporary++
	}
	p.htSite = 0
}

// frameArena stores stack frames in large shared chunks, so that many small
// stacks cost no allocation each, and each distinct list of frames once:
// stacks of the same frames (the same call path under several IDs, a
// trace made to weigh) share one copy.
type frameArena struct {
	chunk []uint64
	seen  map[uint64][]uint64 // by FrameHash: the first list stored with it
}

const arenaChunk = 1 << 16

func (a *frameArena) store(f []uint64) []uint64 {
	if len(f) == 0 {
		return nil
	}
	h := FrameHash(f)
	if s, ok := a.seen[h]; ok && slices.Equal(s, f) {
		return s
	}
	var s []uint64
	if len(f) > arenaChunk/8 {
		s = append([]uint64(nil), f...)
	} else {
		if cap(a.chunk)-len(a.chunk) < len(f) {
			a.chunk = make([]uint64, 0, arenaChunk)
		}
		n := len(a.chunk)
		a.chunk = append(a.chunk, f...)
		s = a.chunk[n : n+len(f) : n+len(f)]
	}
	if a.seen == nil {
		a.seen = map[uint64][]uint64{}
	}
	if _, ok := a.seen[h]; !ok {
		a.seen[h] = s
	}
	return s
}

// FrameHash is a hash of a list of frames, for interning them.
func FrameHash(f []uint64) uint64 {
	h := uint64(len(f)) * 0x9e3779b97f4a7c15
	for _, v := range f {
		h = (h ^ v) * 0xbf58476d1ce4e5b9
		h ^= h >> 29
	}
	return h
}

// Profile returns what the model has computed so far. It may be called more
// than once, and more records may follow it.
func (m *Model) Profile() *Profile {
	pr := &Profile{
		From:       m.from,
		Start:      m.start,
		End:        m.end,
		FirstEvent: m.firstEv,
		LastEvent:  m.lastEv,
		Modules:    append([]event.Module(nil), m.modules...),
		Stats:      m.stats,
		HasStats:   m.hasStats,
		Warnings:   m.warnings,
		Memory:     m.memory,
		Verdicts:   m.verdicts,
		Peak:       m.peak,
		Aggregate:  len(m.snaps) > 0,
		SampleRate: m.rate,
	}
	if m.to != math.MaxInt64 {
		pr.To = m.to
	}
	pr.Processes = make([]Process, 0, len(m.procList))
	for _, p := range m.procList {
		pr.Processes = append(pr.Processes, p.info)
	}
	sort.Slice(pr.Processes, func(i, j int) bool { return pr.Processes[i].PID < pr.Processes[j].PID })

	// Counted first, so that a million stacks are not copied as the slice
	// grows.
	reported := func(s *site) bool {
		return m.snaps[s.pid] == nil && // else reported from its snapshots below
			(s.allocs != 0 || s.reallocs != 0 || s.frees != 0 || s.liveBlocks != 0)
	}
	n := 0
	for i := range m.sites {
		if reported(&m.sites[i]) {
			n++
		}
	}
	pr.Stacks = make([]Stack, 0, n)
	for i := range m.sites {
		if s := &m.sites[i]; reported(s) {
			pr.Stacks = append(pr.Stacks, s.stack(m.epoch))
		}
	}
	if len(m.snaps) > 0 {
		m.snapshotStacks(pr)
	}

	sum := &pr.Summary
	sum.Events = m.events
	sum.UnmatchedFrees = m.unmatched
	sum.MissedFrees = m.missed
	sum.Sampled = m.sampled
	sum.HeaptrackTemporary = m.htTemporary
	sum.BytesVar = m.bytesVar
	if m.rate > 0 {
		// The providers record neither every event nor a failed
		// allocation when they sample.
		pr.Missing |= NoTemporaries | NoFailed
	}
	sum.AddStacks(pr.Stacks)
	pr.Histogram = SizeBuckets(&m.hist)

	if pr.Aggregate {
		pr.Missing |= NoTemporaries | NoHistogram | NoReallocSplit | NoFailed
		sum.UnmatchedFrees += m.stats.Unmatched
		if m.events == 0 {
			pr.Missing |= NoPeakInstant | NoTimeline
			pr.Peak = m.snapPeak
		}
	}
	m.rundownProfile(pr)
	var liveBytes, liveBlocks uint64
	if pr.Aggregate && m.events == 0 {
		for _, v := range m.snapLiveSums {
			liveBytes += v[0]
			liveBlocks += v[1]
		}
	} else {
		liveBytes, liveBlocks = m.liveBytes, m.liveBlocks
	}
	pr.Timeline = m.timeline.points(Point{Time: m.end, Bytes: liveBytes, Blocks: liveBlocks})
	return pr
}
