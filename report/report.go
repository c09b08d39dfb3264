// Package report renders a heap profile (analyze.Profile) for people and
// tools: a text report, JSON, a pprof profile and collapsed stacks for flame
// graphs.
//
// New symbolizes every stack of a profile once, drops the allocator's own
// frames from the top of each (symbolize.TrimAllocator: malloc, operator
// new, the C library's internals above them, the interposer library), so
// that the first frame is the code that asked for memory, and merges the
// stacks that become identical (by symbolize.Frame.Key): two call paths that differ only inside the allocator, or the
// same code in several processes, are one site. The renderers then only
// sort and print.
package report

import (
	"sort"
	"time"

	"github.com/heapscope/heapscope/analyze"
	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/suppress"
	"github.com/heapscope/heapscope/symbolize"
)

// Resolver turns a return address of a traced process into frames,
// innermost first, never none. *symbolize.Symbolizer is one.
type Resolver interface {
	Frames(pid uint32, addr uint64) []symbolize.Frame
}

// Trace describes the trace a profile came from.
type Trace struct {
	File     string
	Session  string
	Provider string
	// Start is when the session started (CLOCK_MONOTONIC ns, the trace
	// header's MonoStart). Reported times are relative to it; when 0, to
	// the profile's first record.
	Start     int64
	WallStart time.Time
	// Warnings are the trace reader's and the symbolizer's: reports print
	// them.
	Warnings []string
	// Properties are the session's properties, from the trace header
	// ("families": "malloc,free", ...).
	Properties map[string]string
}

// Site is one call site: the stacks of one or more processes that are the
// same once symbolized and stripped of allocator frames, with their totals:
// the sum of their stacks' Counters, where LiveBytes and LiveBlocks are the
// site's leaks (see SuppressedBy).
type Site struct {
	PIDs []uint32 // the processes, ascending

	analyze.Counters

	// SuppressedBy is the rule that suppressed the site's leaks (see
	// Report.Suppress), whose bytes and blocks then moved from LiveBytes
	// and LiveBlocks to SuppressedBytes and SuppressedBlocks.
	SuppressedBy     *suppress.Rule
	SuppressedBytes  uint64
	SuppressedBlocks uint64
	// SuppressedClasses are the reachability classes of the suppressed
	// leaks, moved from Classes as the bytes were.
	SuppressedClasses [event.NumClasses]analyze.Amount

	ids     []uint32 // the stack, as indices into the report's frame table
	key     string   // ids as bytes: the identity sites merge by
	table   *frameTable
	members []*analyze.Stack // the profile's stacks merged into this site
}

// Stack returns the site's stack, innermost first: Stack()[0] is the
// innermost frame outside the allocator. It is empty when the events had
// no stack. For a site of several processes, each frame's Address is that
// of one of them.
func (s *Site) Stack() []symbolize.Frame {
	out := make([]symbolize.Frame, len(s.ids))
	for i, id := range s.ids {
		out[i] = s.table.frames[id]
	}
	return out
}

// Name is the site's name in one word (symbolize.SiteName): its first
// frame that is not an allocator wrapper.
func (s *Site) Name() string {
	if len(s.ids) == 0 {
		return symbolize.NoStack
	}
	return s.table.name(s.ids[symbolize.SiteFrame(len(s.ids), s.frame)])
}

func (s *Site) depth() int                   { return len(s.ids) }
func (s *Site) frame(i int) *symbolize.Frame { return &s.table.frames[s.ids[i]] }

// Report is a profile, symbolized and merged into sites.
type Report struct {
	Trace   Trace
	Profile *analyze.Profile
	Sites   []*Site // in no particular order; the renderers sort
	// Suppressed says what each suppression rule took out of the leaks,
	// largest first (see Suppress).
	Suppressed []*Suppressed

	resolver Resolver
	table    *frameTable
	syms     *symTable // what newReport resolved
}

// frameTable interns frames: the same frame in thousands of stacks is
// stored once, and a stack is a list of small indices.
type frameTable struct {
	frames []symbolize.Frame
	index  map[symbolize.FrameKey]uint32 // by Frame.Key: what a reader sees of a frame
	names  []string                      // Frame.Name of each, made on first use
}

func (t *frameTable) intern(f symbolize.Frame) uint32 {
	k := f.Key()
	if id, ok := t.index[k]; ok {
		return id
	}
	id := uint32(len(t.frames))
	t.index[k] = id
	t.frames = append(t.frames, f)
	return id
}

func (t *frameTable) name(id uint32) string {
	for len(t.names) <= int(id) {
		t.names = append(t.names, "")
	}
	if t.names[id] == "" {
		t.names[id] = t.frames[id].Name()
	}
	return t.names[id]
}

// New symbolizes p's stacks with r and merges them into sites. r may be nil:
// frames then have only their module and offset, from p's module records.
func New(p *analyze.Profile, t Trace, r Resolver) *Report {
	if r == nil {
		r = newModuleResolver(p.Modules)
	}
	return newReport(p, t, newSymTable(r))
}

// symTable resolves each return address of each process once, to the
// indices of its frames in a frameTable. It is not safe for concurrent use.
type symTable struct {
	r     Resolver
	table frameTable
	addrs map[pidAddr][]uint32 // one map, not one per process: a trace may have a million
}

func newSymTable(r Resolver) *symTable {
	return &symTable{r: r, table: frameTable{index: map[symbolize.FrameKey]uint32{}}, addrs: map[pidAddr][]uint32{}}
}

// ids returns the frames of addr in process pid.
func (t *symTable) ids(pid uint32, addr uint64) []uint32 {
	k := pidAddr{pid, addr}
	if ids, ok := t.addrs[k]; ok {
		return ids
	}
	fs := t.r.Frames(pid, addr)
	ids := make([]uint32, len(fs))
	for i, f := range fs {
		ids[i] = t.table.intern(f)
	}
	t.addrs[k] = ids
	return ids
}

func newReport(p *analyze.Profile, t Trace, st *symTable) *Report {
	rep := &Report{Trace: t, Profile: p, resolver: st.r, table: &st.table, syms: st}
	bySite := map[string]*Site{}
	// Stacks of one process with the same frames, which the model stores
	// once, are one site: found by their frames' slice, not symbolized
	// again (a trace may hold a million of them).
	type framesKey struct {
		pid   uint32
		first *uint64
		n     int
	}
	byFrames := map[framesKey]*Site{}
	var ids []uint32
	var kb []byte
	for i := range p.Stacks {
		stack := &p.Stacks[i]
		var fk framesKey
		if len(stack.Frames) > 0 {
			fk = framesKey{stack.PID, &stack.Frames[0], len(stack.Frames)}
			if s := byFrames[fk]; s != nil {
				s.members = append(s.members, stack)
				s.Add(&stack.Counters)
				continue
			}
		}
		ids = ids[:0]
		for _, a := range stack.Frames {
			ids = append(ids, st.ids(stack.PID, a)...)
		}
		if stack.ID == analyze.PreTrace && len(stack.Frames) == 0 {
			ids = append(ids, st.table.intern(beforeTraceFrame)) // a site of its own (census.go)
		}
		ids = ids[symbolize.AllocatorFrames(len(ids), func(i int) *symbolize.Frame { return &st.table.frames[ids[i]] }):]
		kb = kb[:0]
		for _, id := range ids {
			kb = append(kb, byte(id), byte(id>>8), byte(id>>16), byte(id>>24))
		}
		s := bySite[string(kb)]
		if s == nil {
			s = &Site{ids: append([]uint32(nil), ids...), key: string(kb), table: rep.table}
			bySite[s.key] = s
			rep.Sites = append(rep.Sites, s)
		}
		s.members = append(s.members, stack)
		if n := len(s.PIDs); n == 0 || s.PIDs[n-1] != stack.PID {
			s.PIDs = append(s.PIDs, stack.PID)
		}
		s.Add(&stack.Counters)
		if fk.first != nil {
			byFrames[fk] = s
		}
	}
	for _, s := range rep.Sites {
		sort.Slice(s.PIDs, func(i, j int) bool { return s.PIDs[i] < s.PIDs[j] })
		s.PIDs = dedup(s.PIDs)
	}
	return rep
}

// frames appends st's frames, symbolized with their own addresses and
// without the allocator's, to buf.
func (r *Report) frames(st *analyze.Stack, buf []symbolize.Frame) []symbolize.Frame {
	for _, a := range st.Frames {
		buf = append(buf, r.resolver.Frames(st.PID, a)...)
	}
	t := symbolize.TrimAllocator(buf)
	return buf[:copy(buf, t)]
}

func dedup(x []uint32) []uint32 {
	out := x[:0]
	for i, v := range x {
		if i == 0 || v != x[i-1] {
			out = append(out, v)
		}
	}
	return out
}

// moduleResolver gives frames with module and offset from module records
// alone, when no symbolizer is at hand.
type moduleResolver map[uint32][]event.Module

func newModuleResolver(mods []event.Module) moduleResolver {
	r := moduleResolver{}
	for _, m := range mods {
		r[m.PID] = append(r[m.PID], m)
	}
	return r
}

func (r moduleResolver) Frames(pid uint32, addr uint64) []symbolize.Frame {
	mods := r[pid]
	// The latest record covering addr wins, as a later mmap replaces.
	for i := len(mods) - 1; i >= 0; i-- {
		if m := mods[i]; addr >= m.Start && addr < m.End {
			return []symbolize.Frame{{Module: m.Path, Offset: addr - m.Start + m.Offset, Address: addr}}
		}
	}
	return []symbolize.Frame{{Address: addr}}
}

// origin is the time reported times are relative to.
func (r *Report) origin() int64 {
	if r.Trace.Start != 0 {
		return r.Trace.Start
	}
	return r.Profile.Start
}

// Duration is the span the report covers: from the window's start (or the
// session's) to the last record.
func (r *Report) Duration() time.Duration {
	start := r.origin()
	if r.Profile.From > start {
		start = r.Profile.From
	}
	if r.Profile.End <= start {
		return 0
	}
	return time.Duration(r.Profile.End - start)
}

// CallRate is the allocation calls (allocations and reallocations) per
// second over the time the trace's events cover, its first event to its
// last: a circular file or one part of a newfile series covers only the
// end or a piece of the session, and a rate over the session's duration
// would be too low by as much. An aggregate trace (snapshots, no events)
// uses Duration. 0 when the span is empty.
func (r *Report) CallRate() float64 {
	span := time.Duration(r.Profile.LastEvent - r.Profile.FirstEvent)
	if r.Profile.Aggregate || r.Profile.FirstEvent == 0 {
		span = r.Duration()
	}
	if span <= 0 {
		return 0
	}
	s := r.Profile.Summary
	return float64(s.Calls()) / span.Seconds()
}

// rel returns t relative to the trace's start.
func (r *Report) rel(t int64) time.Duration {
	if t == 0 {
		return 0
	}
	return time.Duration(t - r.origin())
}

// sorted returns the sites with key(s) > 0, largest first (ties: more
// bytes, then a fixed order), at most top of them when top > 0.
func (r *Report) sorted(key func(*Site) uint64, top int) []*Site {
	var out []*Site
	for _, s := range r.Sites {
		if key(s) > 0 {
			out = append(out, s)
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		a, b := key(out[i]), key(out[j])
		if a != b {
			return a > b
		}
		if out[i].Bytes != out[j].Bytes {
			return out[i].Bytes > out[j].Bytes
		}
		return out[i].key < out[j].key
	})
	if top > 0 && len(out) > top {
		out = out[:top]
	}
	return out
}

// The orderings of the reports' sections.
func byLeaked(s *Site) uint64 { return s.LiveBytes }
func byPeak(s *Site) uint64   { return s.PeakBytes }
func byCalls(s *Site) uint64  { return s.Calls() }
func byTemp(s *Site) uint64   { return s.Temporary }
