// Package totals keeps a session's per-stack totals of its heap from the
// events it has in hand, as the heap model (package analyze) counts them:
// live bytes and blocks, calls, frees and temporaries by process, thread and
// stack. They are what `heapscope top` shows (heapscope.Session.Top): the
// session keeps them only while a client asks, and answers each query with
// a View of them, whose Rows are the sites by stack. The cost is a few ns
// per event: a block table insert and delete per allocation freed later,
// less for a temporary, which never reaches the table (bench/topbench,
// bench/RESULTS-top.md). A session that exports interval profiles
// (Properties.Export) keeps them from its start to its end, and top shares
// them.
//
// The totals of a sampled session (NewSampled) are estimates: each recorded
// block counts what it stands for (analyze.SampledBlock) in its site's
// calls, bytes and live set, and its free takes that away again, as the
// heap model counts a sampled trace. They have no temporaries.
package totals

import (
	"sort"

	"github.com/heapscope/heapscope/analyze"
	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/internal/blocks"
)

// Totals are the per-stack totals of a heap, from the events in hand.
// Sites are per process, thread and stack. Totals implement event.Sink, to
// be seeded from a trace file. They are not safe for concurrent use.
type Totals struct {
	procs     map[uint32]*proc
	procList  []*proc
	last      *proc
	sites     []site
	modules   []event.Module
	known     map[event.Module]bool
	unmatched uint64
	lastTime  int64 // of the latest events or snapshot: how far the totals go
	rate      int64 // the session's sampling rate; 0: every event is recorded

	// While a seed is read from the trace file, the totals of the live
	// events keep the frees they cannot match: their blocks may be in the
	// seed (see KeepMisses, Merge).
	keepMisses bool
	misses     []miss
}

// proc is one process's part of the totals.
type proc struct {
	pid      uint32
	ppid     uint32
	exe      string
	cmdline  []string
	ended    bool
	exits    int  // exits counted (see Exit)
	snap     bool // reported by snapshots (eBPF aggregate mode): no events, no threads
	scanned  bool // a heap scan's verdict classified its blocks
	censused bool // a census added its blocks from before the trace
	frames   map[event.StackID][]uint64
	threads  map[uint32]*thread
	thrList  []*thread
	hot      [16]*thread // by TID, direct-mapped: threads take turns in a batch
	pending  int         // threads whose last allocation is held in thread.pend
	blocks   blocks.Table[blockVal]
}

// thread is one thread's sites, and its last allocation.
type thread struct {
	tid   uint32
	small []int32 // StackID → site index + 1, for IDs below smallStacks
	big   map[event.StackID]int32
	// The thread's last allocation is held here, out of the block table,
	// until its next event: a free of it then is a temporary (as
	// heaptrack counts them: freed with no heap event of the thread in
	// between) and costs no table work. 0: none.
	pend     uint64
	pendSize uint64
	pendSite int32
	// The site of the thread's last allocation: a loop allocates from
	// one stack over and over.
	lastStack event.StackID
	lastSite  int32 // -1: none
}

// smallStacks bounds the stack IDs a thread maps with a slice.
const smallStacks = 1 << 14

// site is one stack's totals in one thread of one process.
type site struct {
	liveBytes, liveBlocks uint64
	allocs, allocBytes    uint64 // allocation and reallocation calls that returned a block
	frees, freedBytes     uint64
	temporary             uint64
	// gone is what of liveBytes and liveBlocks the exit of the site's
	// process left: leaks, no longer in the heap (see Exit).
	goneBytes, goneBlocks uint64
	// classes are the live bytes a heap scan classified, by event.Class
	// (see Note): the leaks an exit left keep theirs.
	classes  [event.NumClasses]uint64
	pid, tid uint32
	stack    event.StackID
}

// miss is a free an aggregate could not match.
type miss struct {
	pid, tid uint32
	addr     uint64
}

// New returns empty totals of a session that records every event.
func New() *Totals {
	return &Totals{procs: map[uint32]*proc{}}
}

// NewSampled returns empty totals of a session sampled at rate bytes
// (Properties.Sample): their counts are estimates (see the package
// documentation). A rate of 0 is New's.
func NewSampled(rate int64) *Totals {
	a := New()
	a.rate = max(rate, 0)
	return a
}

// SampleRate is the sampling rate the totals weigh blocks by, 0 when they
// count every event as it is.
func (a *Totals) SampleRate() int64 { return a.rate }

func (a *Totals) proc(pid uint32) *proc {
	p := a.procs[pid]
	if p == nil {
		p = &proc{pid: pid, frames: map[event.StackID][]uint64{}, threads: map[uint32]*thread{}}
		a.procs[pid] = p
		a.procList = append(a.procList, p)
	}
	a.last = p
	return p
}

func (p *proc) thread(tid uint32) *thread {
	if t := p.hot[tid&15]; t != nil && t.tid == tid {
		return t
	}
	t := p.threads[tid]
	if t == nil {
		t = &thread{tid: tid, lastSite: -1}
		p.threads[tid] = t
		p.thrList = append(p.thrList, t)
	}
	p.hot[tid&15] = t
	return t
}

// site returns the index of the site of stack id in thread t of p.
func (a *Totals) site(p *proc, t *thread, id event.StackID) int32 {
	if id < smallStacks {
		if int(id) < len(t.small) {
			if si := t.small[id]; si != 0 {
				return si - 1
			}
		} else {
			t.small = append(t.small, make([]int32, int(id)+1-len(t.small))...)
		}
		si := a.newSite(p, t, id)
		t.small[id] = si + 1
		return si
	}
	if si, ok := t.big[id]; ok {
		return si
	}
	if t.big == nil {
		t.big = map[event.StackID]int32{}
	}
	si := a.newSite(p, t, id)
	t.big[id] = si
	return si
}

func (a *Totals) newSite(p *proc, t *thread, id event.StackID) int32 {
	a.sites = append(a.sites, site{pid: p.pid, tid: t.tid, stack: id})
	return int32(len(a.sites) - 1)
}

// events counts evs. mmap and munmap are left out: top shows the heap.
func (a *Totals) events(evs []event.Event) {
	if a.rate > 0 {
		a.sampledEvents(evs)
		return
	}
	last := a.lastTime
	calm := 0 // no run of temporaries is looked for before this event
	for i := 0; i < len(evs); i++ {
		e := &evs[i]
		// A provider's batch need not be in time order (eBPF's ring
		// holds events in the order their probes finished).
		last = max(last, e.Time)
		p := a.last
		if p == nil || p.pid != e.PID {
			p = a.proc(e.PID)
		}
		// Threads' events interleave: a table by TID, whose hits the
		// processor predicts, rather than the last thread, which it
		// cannot.
		t := p.hot[e.TID&15]
		if t == nil || t.tid != e.TID {
			t = p.thread(e.TID)
		}
		// A run of temporaries made at the thread's last site: counted
		// by a loop of its own (see temporaries), when it is likely to
		// be longer than what entering that loop costs.
		if i >= calm && i+2 < len(evs) && evs[i+2].TID == e.TID &&
			(e.Kind == event.KindAlloc && e.Stack == t.lastStack || e.Kind == event.KindFree && e.Addr == t.pend) {
			n := a.temporaries(evs[i:], p, t, &last)
			if n < 8 {
				// Threads take turns: runs are short here.
				calm = i + 64
			}
			if n > 0 {
				i += n - 1
				continue
			}
		}
		switch e.Kind {
		case event.KindAlloc:
			if e.Addr != 0 {
				a.alloc(p, t, e)
			} else if t.pend != 0 {
				// A failed call is a heap event of the thread: what it
				// holds is no temporary (as the model counts them).
				a.settle(p, t)
			}
		case event.KindFree:
			if e.Addr != 0 && e.Addr == t.pend {
				a.freeHeld(p, t) // a temporary, without free's call
			} else if e.Addr != 0 {
				a.free(p, t, e.Addr)
			}
		case event.KindRealloc:
			if e.Addr == 0 && (e.Size != 0 || e.OldAddr == 0) {
				// Failed: the old block stays.
				if t.pend != 0 {
					a.settle(p, t)
				}
				continue
			}
			if e.OldAddr != 0 {
				a.free(p, t, e.OldAddr)
			}
			if e.Addr != 0 {
				a.alloc(p, t, e)
			}
		default:
			// mmap and munmap are not counted, but they are heap
			// events of the thread.
			if t.pend != 0 && (e.Kind == event.KindMmap || e.Kind == event.KindMunmap) {
				a.settle(p, t)
			}
		}
	}
	a.lastTime = last
}

// temporaries counts the run of events at the start of evs that thread t of
// p makes at its last site and frees at once: allocation, free, allocation,
// free, as a loop that makes temporaries does. It returns how many it
// counted, 0 if evs does not start such a run. The general path
// (events) handles everything else.
//
// Why a loop of its own: with the thread's state in registers, not in its
// struct, and the counts added to the site once per run, an event here
// costs a few instructions; the general loop, whose calls make the
// compiler keep its state on the stack, costs several times that. It is
// what top's totals cost a session whose program churns (bench/topbench).
func (a *Totals) temporaries(evs []event.Event, p *proc, t *thread, last *int64) int {
	if t.lastSite < 0 || t.pend != 0 && t.pendSite != t.lastSite {
		return 0
	}
	pid, tid := p.pid, t.tid
	pend, pendSize := t.pend, t.pendSize
	stack := t.lastStack
	tm := *last
	// Few variables, so that the loop keeps them in registers: the
	// calls and frees follow from the events' count and what is held
	// before and after (see below).
	var allocBytes uint64
	i := 0
	if pend == 0 {
		// Pairs of an allocation and its free, checked with one branch
		// (the fields are compared with xor and or, not && and ||).
		for ; i+1 < len(evs); i += 2 {
			e, f := &evs[i], &evs[i+1]
			// (In Go, ^ and | bind alike: each xor is in parentheses.)
			bad := uint64((e.PID^pid)|(e.TID^tid)|(f.PID^pid)|(f.TID^tid)|uint32(e.Stack^stack)) |
				uint64((e.Kind^event.KindAlloc)|(f.Kind^event.KindFree)) | (e.Addr ^ f.Addr)
			if bad != 0 || e.Addr == 0 {
				break
			}
			allocBytes += e.Size
		}
		if i > 0 {
			// A thread's events are in time order: the run's last
			// is its latest.
			tm = max(tm, evs[i-1].Time)
		}
	}
	for ; i < len(evs); i++ {
		e := &evs[i]
		if e.PID != pid || e.TID != tid {
			break
		}
		if e.Kind == event.KindFree {
			if e.Addr != pend || pend == 0 {
				break
			}
			pend = 0
		} else if e.Kind == event.KindAlloc {
			if e.Addr == 0 || pend != 0 || e.Stack != stack {
				break
			}
			allocBytes += e.Size
			pend, pendSize = e.Addr, e.Size
		} else {
			break
		}
		tm = max(tm, e.Time)
	}
	if i == 0 {
		return 0
	}
	*last = tm
	// The run alternates allocations and frees of them: with h0 and h1
	// (0 or 1) allocations held before and after it, it made
	// (i+h1-h0)/2 allocations and (i-h1+h0)/2 frees, and freed what was
	// held before and what it allocated, less what it holds after.
	var h0, h1, size0, size1 uint64
	if t.pend != 0 {
		h0, size0 = 1, t.pendSize
	}
	if pend != 0 {
		h1, size1 = 1, pendSize
	}
	frees := (uint64(i) + h0 - h1) / 2
	s := &a.sites[t.lastSite]
	s.allocs += (uint64(i) + h1 - h0) / 2
	s.allocBytes += allocBytes
	s.frees += frees
	s.freedBytes += size0 + allocBytes - size1
	s.temporary += frees
	p.pending += int(h1) - int(h0)
	t.pend, t.pendSize = pend, pendSize
	if pend != 0 {
		t.pendSite = t.lastSite
	}
	return i
}

func (a *Totals) alloc(p *proc, t *thread, e *event.Event) {
	if t.pend != 0 {
		a.settle(p, t)
	}
	si := t.lastSite
	if e.Stack != t.lastStack || si < 0 {
		si = a.site(p, t, e.Stack)
		t.lastStack, t.lastSite = e.Stack, si
	}
	s := &a.sites[si]
	s.allocs++
	s.allocBytes += e.Size
	t.pend, t.pendSize, t.pendSite = e.Addr, e.Size, si
	p.pending++
}

// settle moves t's held allocation into the block table, and into its
// site's live bytes and blocks (a held one is not counted there: a
// temporary never is).
func (a *Totals) settle(p *proc, t *thread) {
	s := &a.sites[t.pendSite]
	s.liveBytes += t.pendSize
	s.liveBlocks++
	if old, ok := p.blocks.Put(t.pend, blockVal{size: t.pendSize, site: t.pendSite, objects: 1}); ok {
		// A block at the same address was never seen freed.
		a.release(old, false)
	}
	t.pend = 0
	p.pending--
}

// freeHeld frees the allocation t holds: a temporary, which never
// entered its site's live counts. Small enough to inline in the event loop.
func (a *Totals) freeHeld(p *proc, t *thread) {
	s := &a.sites[t.pendSite]
	s.frees++
	s.freedBytes += t.pendSize
	s.temporary++
	t.pend = 0
	p.pending--
}

func (a *Totals) free(p *proc, t *thread, addr uint64) {
	if t.pend == addr {
		a.freeHeld(p, t)
		return
	}
	if t.pend != 0 {
		a.settle(p, t)
	}
	if v, ok := p.blocks.Delete(addr); ok {
		a.release(v, true)
		return
	}
	// Another thread's held allocation, freed here.
	if p.pending > 0 {
		for _, o := range p.thrList {
			if o.pend == addr {
				s := &a.sites[o.pendSite]
				s.frees++
				s.freedBytes += o.pendSize
				o.pend = 0
				p.pending--
				return
			}
		}
	}
	a.unmatched++
	// After an exit the seed's blocks of p are out of the heap: no Merge
	// matches this free with one.
	if a.keepMisses && p.exits == 0 {
		a.misses = append(a.misses, miss{pid: p.pid, tid: t.tid, addr: addr})
	}
}

// release takes block v out of its site's live set; counted: as a free.
func (a *Totals) release(v blockVal, counted bool) {
	s := &a.sites[v.site]
	n := uint64(v.objects)
	s.liveBytes -= v.size
	s.liveBlocks -= n
	if v.class != 0 {
		s.classes[v.class-1] -= v.size
	}
	if counted {
		s.frees += n
		s.freedBytes += v.size
	}
}

// sampledEvents counts the events of a sampled session: every recorded
// block at its weight. Nothing is held back as a possible temporary:
// temporaries need every event.
func (a *Totals) sampledEvents(evs []event.Event) {
	for i := range evs {
		e := &evs[i]
		a.lastTime = max(a.lastTime, e.Time)
		p := a.last
		if p == nil || p.pid != e.PID {
			p = a.proc(e.PID)
		}
		t := p.hot[e.TID&15]
		if t == nil || t.tid != e.TID {
			t = p.thread(e.TID)
		}
		switch e.Kind {
		case event.KindAlloc:
			if e.Addr != 0 {
				a.sampledAlloc(p, t, e)
			}
		case event.KindFree:
			if e.Addr != 0 {
				a.free(p, t, e.Addr)
			}
		case event.KindRealloc:
			if e.Addr == 0 && (e.Size != 0 || e.OldAddr == 0) {
				continue // failed: the old block stays
			}
			if e.OldAddr != 0 {
				a.free(p, t, e.OldAddr)
			}
			if e.Addr != 0 {
				a.sampledAlloc(p, t, e)
			}
		}
	}
}

// sampledAlloc counts a recorded block at what it stands for.
func (a *Totals) sampledAlloc(p *proc, t *thread, e *event.Event) {
	si := t.lastSite
	if e.Stack != t.lastStack || si < 0 {
		si = a.site(p, t, e.Stack)
		t.lastStack, t.lastSite = e.Stack, si
	}
	bytes, n := analyze.EventWeights(e, a.rate)
	s := &a.sites[si]
	s.allocs += uint64(n)
	s.allocBytes += bytes
	s.liveBytes += bytes
	s.liveBlocks += uint64(n)
	if old, ok := p.blocks.Put(e.Addr, blockVal{size: bytes, site: si, objects: n}); ok {
		a.release(old, false)
	}
}

// held calls f with each held allocation's site and size: live, but not
// yet in its site's counts.
func (a *Totals) held(f func(site int32, size uint64)) {
	for _, p := range a.procList {
		if p.pending == 0 {
			continue
		}
		for _, t := range p.thrList {
			if t.pend != 0 {
				f(t.pendSite, t.pendSize)
			}
		}
	}
}

// settleAll moves every held allocation into the block tables.
func (a *Totals) settleAll() {
	for _, p := range a.procList {
		for _, t := range p.thrList {
			if t.pend != 0 {
				a.settle(p, t)
			}
		}
	}
}

// snapshot replaces the totals of sn's process with the kernel's (eBPF
// aggregate mode): live blocks by stack, calls and bytes since tracing
// began.
func (a *Totals) snapshot(sn *event.Snapshot) {
	p := a.proc(sn.PID)
	p.snap = true
	a.lastTime = max(a.lastTime, sn.Time)
	t := p.thread(0)
	for _, si := range t.small {
		if si != 0 {
			a.sites[si-1] = site{pid: p.pid, stack: a.sites[si-1].stack}
		}
	}
	for _, si := range t.big {
		a.sites[si] = site{pid: p.pid, stack: a.sites[si].stack}
	}
	for i := range sn.Totals {
		tot := &sn.Totals[i]
		s := &a.sites[a.site(p, t, tot.Stack)]
		s.allocs, s.allocBytes, s.frees, s.freedBytes = tot.Allocs, tot.AllocBytes, tot.Frees, tot.FreeBytes
	}
	for i := range sn.Live {
		b := &sn.Live[i]
		s := &a.sites[a.site(p, t, b.Stack)]
		// The kernel weighs its totals; its live blocks are counted here,
		// as the model counts them.
		bytes, n := b.Size, uint32(1)
		if a.rate > 0 {
			bytes, n = analyze.SampledBlock(b.Size, b.Addr, b.Time, a.rate)
		}
		s.liveBytes += bytes
		s.liveBlocks += uint64(n)
	}
}

// Merge adds b, the totals of the events after a's (a seed read from the
// trace file), to a. The frees b could not match (see KeepMisses) are
// matched against a's blocks first.
func (a *Totals) Merge(b *Totals) {
	a.settleAll()
	b.settleAll()
	for _, m := range b.misses {
		p := a.procs[m.pid]
		if p == nil {
			a.unmatched++
			continue
		}
		if v, ok := p.blocks.Delete(m.addr); ok {
			a.release(v, true)
		} else {
			a.unmatched++
		}
	}
	a.unmatched += b.unmatched - uint64(len(b.misses))
	for _, bp := range b.procList {
		if ap := a.procs[bp.pid]; ap != nil && bp.exits > 0 {
			// It exited after the seed: the seed's blocks left the heap.
			a.retire(ap)
		}
	}
	a.lastTime = max(a.lastTime, b.lastTime)
	for _, m := range b.modules {
		a.Module(m)
	}
	for _, bp := range b.procList {
		ap := a.procs[bp.pid]
		if ap == nil {
			ap = a.proc(bp.pid)
		}
		if bp.exe != "" {
			ap.exe, ap.ppid, ap.cmdline = bp.exe, bp.ppid, bp.cmdline
		}
		ap.ended = bp.ended
		ap.snap = ap.snap || bp.snap
		ap.scanned = ap.scanned || bp.scanned
		ap.censused = ap.censused || bp.censused
		for id, f := range bp.frames {
			ap.frames[id] = f
		}
		// b's site index → a's.
		remap := make(map[int32]int32)
		for _, bt := range bp.thrList {
			at := ap.thread(bt.tid)
			each := func(id event.StackID, bsi int32) {
				asi := a.site(ap, at, id)
				remap[bsi] = asi
				s, o := &a.sites[asi], &b.sites[bsi]
				s.liveBytes += o.liveBytes
				s.liveBlocks += o.liveBlocks
				s.allocs += o.allocs
				s.allocBytes += o.allocBytes
				s.frees += o.frees
				s.freedBytes += o.freedBytes
				s.temporary += o.temporary
				s.goneBytes += o.goneBytes
				s.goneBlocks += o.goneBlocks
				for c := range s.classes {
					s.classes[c] += o.classes[c]
				}
			}
			for id, si := range bt.small {
				if si != 0 {
					each(event.StackID(id), si-1)
				}
			}
			for id, si := range bt.big {
				each(id, si)
			}
		}
		for addr, v := range bp.blocks.All() {
			v.site = remap[v.site]
			if old, ok := ap.blocks.Put(addr, v); ok {
				a.release(old, false)
			}
		}
	}
	a.last = nil
}

// The event.Sink methods.

// Process records a process.
func (a *Totals) Process(pr event.Process) error {
	p := a.proc(pr.PID)
	p.exe, p.ppid, p.cmdline = pr.Exe, pr.PPID, append([]string(nil), pr.Cmdline...)
	p.ended = false // a new image of the PID (an exec) runs
	return nil
}

// Exit marks a process ended. Its blocks stay its sites' live bytes (its
// leaks), but leave the heap: the sum of a View's rows counts them no
// more, as the heap model does (analyze.Model.Exit), and the events after
// (of a program an exec starts under the PID) find none of them.
func (a *Totals) Exit(x event.Exit) error {
	// (Made when unknown: after a seed, its blocks are in the seed's.)
	p := a.proc(x.PID)
	p.ended = true
	p.exits++
	a.retire(p)
	return nil
}

// retire takes p's live blocks out of the heap (see Exit).
func (a *Totals) retire(p *proc) {
	for _, t := range p.thrList {
		if t.pend != 0 {
			a.settle(p, t)
		}
	}
	gone := func(si int32) {
		s := &a.sites[si]
		s.goneBytes, s.goneBlocks = s.liveBytes, s.liveBlocks
	}
	for _, t := range p.thrList {
		for _, si := range t.small {
			if si != 0 {
				gone(si - 1)
			}
		}
		for _, si := range t.big {
			gone(si)
		}
	}
	p.blocks = blocks.Table[blockVal]{}
}

// Module records a module, once.
func (a *Totals) Module(m event.Module) error {
	// A trace file repeats its definitions in its chunks.
	if a.known == nil {
		a.known = map[event.Module]bool{}
	}
	if !a.known[m] {
		a.known[m] = true
		a.modules = append(a.modules, m)
	}
	return nil
}

// Stack records a stack's frames.
func (a *Totals) Stack(st event.Stack) error {
	a.proc(st.PID).frames[st.ID] = append([]uint64(nil), st.Frames...)
	return nil
}

// Events counts evs (see events).
func (a *Totals) Events(evs []event.Event) error {
	a.events(evs)
	return nil
}

// Snapshot replaces a process's totals with the kernel's (see snapshot).
func (a *Totals) Snapshot(sn event.Snapshot) error {
	a.snapshot(&sn)
	return nil
}

// Stats is ignored: the totals count no losses.
func (a *Totals) Stats(event.Stats) error { return nil }

// Note gives the blocks a heap scan's verdict lists their class: top shows
// what each site has lost, possibly lost and still reachable. A block keeps
// the class of the latest scan that listed it until it is freed. Other
// notes change no totals.
func (a *Totals) Note(n event.Note) error {
	if c, ok := n.(event.Census); ok {
		a.census(&c)
		return nil
	}
	v, ok := n.(event.Verdict)
	if !ok {
		return nil
	}
	p := a.procs[v.PID]
	if p == nil || p.snap {
		return nil
	}
	a.settleAll() // a held allocation the scan listed is classified too
	for _, bc := range v.Blocks {
		b, ok := p.blocks.Get(bc.Addr)
		if !ok || !bc.Class.Valid() {
			continue
		}
		s := &a.sites[b.site]
		if b.class != 0 {
			s.classes[b.class-1] -= b.size
		}
		b.class = uint8(bc.Class) + 1
		s.classes[bc.Class] += b.size
		p.blocks.Put(bc.Addr, b)
	}
	p.scanned = true
	return nil
}

// Time is how far the totals go: the time of the latest event or snapshot
// counted.
func (a *Totals) Time() int64 { return a.lastTime }

// census adds the blocks a census of a process's heap found in use that
// the totals do not hold (those allocated before the trace), live at the
// site of stack 0 ("allocated before the trace"), as the model does: a
// leak check then knows every block of the process (Censused).
func (a *Totals) census(c *event.Census) {
	p := a.proc(c.PID)
	if p.snap {
		return
	}
	a.settleAll()
	t := p.thread(0)
	for _, b := range c.Blocks {
		if _, ok := p.blocks.Get(b.Addr); ok {
			continue
		}
		si := a.site(p, t, 0)
		s := &a.sites[si]
		s.liveBytes += b.Size
		s.liveBlocks++
		p.blocks.Put(b.Addr, blockVal{size: b.Size, site: si, objects: 1})
	}
	p.censused = true
}

// Censused reports whether a census of process pid's heap added the blocks
// it had before the trace.
func (a *Totals) Censused(pid uint32) bool {
	p := a.procs[pid]
	return p != nil && p.censused
}

// LiveBlock is a block live in the totals.
type LiveBlock struct {
	Addr, Size uint64
	Stack      event.StackID
}

// LiveBlocks returns the blocks process pid has live, in no order: what a
// heap scan of it classifies. Allocations a thread still holds (see
// thread.pend) are among them.
func (a *Totals) LiveBlocks(pid uint32) []LiveBlock {
	p := a.procs[pid]
	if p == nil {
		return nil
	}
	out := make([]LiveBlock, 0, p.blocks.Len()+p.pending)
	for addr, v := range p.blocks.All() {
		out = append(out, LiveBlock{Addr: addr, Size: v.size, Stack: a.sites[v.site].stack})
	}
	for _, t := range p.thrList {
		if t.pend != 0 {
			out = append(out, LiveBlock{Addr: t.pend, Size: t.pendSize, Stack: a.sites[t.pendSite].stack})
		}
	}
	return out
}

// Frames returns the frames of stack id of process pid, innermost first.
func (a *Totals) Frames(pid uint32, id event.StackID) []uint64 {
	if p := a.procs[pid]; p != nil {
		return p.frames[id]
	}
	return nil
}

// Modules returns the module records of process pid (every process's
// when pid is 0).
func (a *Totals) Modules(pid uint32) []event.Module {
	var out []event.Module
	for _, m := range a.modules {
		if pid == 0 || m.PID == pid {
			out = append(out, m)
		}
	}
	return out
}

// processes lists the processes and their threads, by PID and TID.
func (a *Totals) processes() []Process {
	var out []Process
	for _, p := range a.procList {
		tp := Process{PID: p.pid, PPID: p.ppid, Exe: p.exe, Cmdline: p.cmdline, Ended: p.ended}
		if !p.snap {
			for _, t := range p.thrList {
				tp.Threads = append(tp.Threads, t.tid)
			}
			sort.Slice(tp.Threads, func(i, j int) bool { return tp.Threads[i] < tp.Threads[j] })
		}
		out = append(out, tp)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].PID < out[j].PID })
	return out
}

// KeepMisses sets whether the totals keep the frees they cannot match, for
// a Merge into totals that may hold their blocks. Turned off, the kept ones
// are dropped.
func (a *Totals) KeepMisses(keep bool) {
	a.keepMisses = keep
	if !keep {
		a.misses = nil
	}
}

// blockVal is a live block: its size and site, the objects it counts for
// (1, or in sampled totals what it stands for; its bytes are then the bytes
// it stands for), and its reachability class plus one (0: none; see Note).
type blockVal struct {
	size    uint64
	site    int32
	objects uint32
	class   uint8
}
