// Package report renders a heap profile (analyze.Profile) for people and
// tools: a text report, JSON, a pprof profile and collapsed stacks for flame
// graphs.
//
// New symbolizes every stack of a profile once, drops the allocator's own
// frames from the top of each (malloc, operator new, the C library's
// internals above them, the interposer library), so that the first frame is
// the code that asked for memory, and merges the stacks that become
// identical: two call paths that differ only inside the allocator, or the
// same code in several processes, are one site. The renderers then only
// sort and print.
package report

import (
	"path"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/heapscope/heapscope/analyze"
	"github.com/heapscope/heapscope/event"
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
}

// Site is one call site: the stacks of one or more processes that are the
// same once symbolized and stripped of allocator frames, with their totals.
type Site struct {
	// Stack is innermost first; Stack[0] is the innermost frame outside
	// the allocator. Empty when the events had no stack.
	Stack []symbolize.Frame
	PIDs  []uint32 // the processes, ascending

	Allocations   uint64
	Reallocations uint64
	Failed        uint64
	Bytes         uint64
	Frees         uint64
	Temporary     uint64
	LeakedBytes   uint64
	LeakedBlocks  uint64
	PeakBytes     uint64
	PeakBlocks    uint64

	// members are the profile's stacks merged into this site, with the
	// frames kept for each, for the pprof export.
	members []member
}

type member struct {
	stack  *analyze.Stack
	frames []symbolize.Frame
}

// Report is a profile, symbolized and merged into sites.
type Report struct {
	Trace   Trace
	Profile *analyze.Profile
	Sites   []*Site // in no particular order; the renderers sort
}

// New symbolizes p's stacks with r and merges them into sites. r may be nil:
// frames then have only their module and offset, from p's module records.
func New(p *analyze.Profile, t Trace, r Resolver) *Report {
	if r == nil {
		r = newModuleResolver(p.Modules)
	}
	rep := &Report{Trace: t, Profile: p}
	byKey := map[string]*Site{}
	var kb strings.Builder
	for i := range p.Stacks {
		st := &p.Stacks[i]
		frames := make([]symbolize.Frame, 0, len(st.Frames))
		for _, a := range st.Frames {
			frames = append(frames, r.Frames(st.PID, a)...)
		}
		frames = TrimAllocator(frames)
		kb.Reset()
		for _, f := range frames {
			writeKey(&kb, f)
		}
		key := kb.String()
		s := byKey[key]
		if s == nil {
			s = &Site{Stack: frames}
			byKey[key] = s
			rep.Sites = append(rep.Sites, s)
		}
		s.members = append(s.members, member{st, frames})
		if n := len(s.PIDs); n == 0 || s.PIDs[n-1] != st.PID {
			s.PIDs = append(s.PIDs, st.PID)
		}
		s.Allocations += st.Allocations
		s.Reallocations += st.Reallocations
		s.Failed += st.Failed
		s.Bytes += st.Bytes
		s.Frees += st.Frees
		s.Temporary += st.Temporary
		s.LeakedBytes += st.LiveBytes
		s.LeakedBlocks += st.LiveBlocks
		s.PeakBytes += st.PeakBytes
		s.PeakBlocks += st.PeakBlocks
	}
	for _, s := range rep.Sites {
		sort.Slice(s.PIDs, func(i, j int) bool { return s.PIDs[i] < s.PIDs[j] })
		s.PIDs = dedup(s.PIDs)
	}
	return rep
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

// writeKey writes f's identity: what a reader sees of it. Addresses are
// left out so that the same code in several processes merges; a frame
// without a function is known by its module and offset.
func writeKey(b *strings.Builder, f symbolize.Frame) {
	if f.Function == "" {
		b.WriteString(f.Module)
		b.WriteByte('+')
		if f.Module == "" {
			b.WriteString(strconv.FormatUint(f.Address, 16))
		} else {
			b.WriteString(strconv.FormatUint(f.Offset, 16))
		}
	} else {
		b.WriteString(f.Function)
		b.WriteByte(0)
		b.WriteString(f.File)
		b.WriteByte(0)
		b.WriteString(strconv.Itoa(f.Line))
		b.WriteByte(0)
		b.WriteString(f.Module)
	}
	b.WriteByte(1)
}

// TrimAllocator returns frames without the allocator's frames at the top:
// the allocation functions themselves (malloc, calloc, realloc, free, the
// aligned family, operator new and delete, mmap, and the C library's names
// for them), any frame of the interposer library (libheapscope*.so), and the
// frames of the C and C++ runtime libraries that lie above (are called by)
// such a frame. The first frame left is the caller of the allocator. Frames
// of the runtime libraries that called the allocator themselves (strdup,
// std::string) stay: they are the caller.
func TrimAllocator(frames []symbolize.Frame) []symbolize.Frame {
	cut := 0
	for i, f := range frames {
		switch {
		case isAllocator(f.Function) || isInterposer(f.Module):
			cut = i + 1
		case isRuntimeLib(f.Module):
			// Internal to the allocator only if an allocator frame
			// follows; decided by a later iteration.
		default:
			return frames[cut:]
		}
	}
	return frames[cut:]
}

var allocatorNames = map[string]bool{}

func init() {
	for _, n := range []string{
		"malloc", "calloc", "realloc", "reallocarray", "free", "cfree",
		"posix_memalign", "aligned_alloc", "memalign", "valloc", "pvalloc",
		"mmap", "mmap64", "munmap", "mremap",
	} {
		allocatorNames[n] = true
		// glibc's internal and exported aliases of the same functions.
		allocatorNames["__libc_"+n] = true
		allocatorNames["__"+n] = true
	}
}

func isAllocator(fn string) bool {
	if fn == "" {
		return false
	}
	fn = strings.TrimPrefix(fn, "__GI_")
	if allocatorNames[fn] {
		return true
	}
	// operator new/delete, demangled ("operator new(unsigned long)",
	// "operator delete[](void*, std::align_val_t)") or not (_Znwm, _ZdaPv).
	return strings.HasPrefix(fn, "operator new") || strings.HasPrefix(fn, "operator delete") ||
		strings.HasPrefix(fn, "_Znw") || strings.HasPrefix(fn, "_Zna") ||
		strings.HasPrefix(fn, "_Zdl") || strings.HasPrefix(fn, "_Zda")
}

func isInterposer(module string) bool {
	base := path.Base(module)
	return strings.HasPrefix(base, "libheapscope") && strings.Contains(base, ".so")
}

// runtimeLibs are the libraries whose frames between the allocator and its
// caller are allocator internals.
var runtimeLibs = []string{"libc.so", "libc-", "ld-linux", "libstdc++.so", "libc++.so", "libc++abi.so", "libgcc_s.so"}

func isRuntimeLib(module string) bool {
	if module == "" {
		return false
	}
	base := path.Base(module)
	for _, p := range runtimeLibs {
		if strings.HasPrefix(base, p) {
			return true
		}
	}
	return false
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

// rel returns t relative to the trace's start.
func (r *Report) rel(t int64) time.Duration {
	if t == 0 {
		return 0
	}
	return time.Duration(t - r.origin())
}

// sorted returns the sites with key(s) > 0, largest first (ties: more
// bytes, then the stack's text), at most top of them when top > 0.
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
		return stackText(out[i].Stack) < stackText(out[j].Stack)
	})
	if top > 0 && len(out) > top {
		out = out[:top]
	}
	return out
}

func stackText(fs []symbolize.Frame) string {
	var b strings.Builder
	for _, f := range fs {
		writeKey(&b, f)
	}
	return b.String()
}

// The orderings of the reports' sections.
func byLeaked(s *Site) uint64 { return s.LeakedBytes }
func byPeak(s *Site) uint64   { return s.PeakBytes }
func byCalls(s *Site) uint64  { return s.Allocations + s.Reallocations }
func byTemp(s *Site) uint64   { return s.Temporary }

// frameName is how a frame is named where one word is needed: its function,
// else its module and offset, else its address.
func frameName(f symbolize.Frame) string {
	switch {
	case f.Function != "":
		return f.Function
	case f.Module != "":
		return path.Base(f.Module) + "+0x" + strconv.FormatUint(f.Offset, 16)
	}
	return "0x" + strconv.FormatUint(f.Address, 16)
}
