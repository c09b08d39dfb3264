// Package event is the model every part of heapscope shares: the records a
// provider captures (events, stacks, processes, modules, snapshots, stats) and
// the Sink they flow into.
//
// It is the ground floor of the project and imports nothing of it, so that
// providers, the trace file and the analysis side can all depend on it
// without forming a cycle.
package event

import (
	"fmt"
	"strings"
)

// Kind is what an event did to the heap.
type Kind uint8

// The event kinds. The zero Kind is invalid.
const (
	KindAlloc   Kind = 1 + iota // a new block: malloc, calloc, the aligned family, operator new
	KindRealloc                 // a block resized, possibly moved: realloc, reallocarray
	KindFree                    // a block released: free, operator delete
	KindMmap                    // an anonymous mapping made with mmap
	KindMunmap                  // a mapping (or part of one) removed with munmap

	numKinds = iota + 1
)

var kindNames = [...]string{"", "alloc", "realloc", "free", "mmap", "munmap"}

func (k Kind) String() string {
	if int(k) < len(kindNames) && k != 0 {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Valid reports whether k is one of the defined kinds.
func (k Kind) Valid() bool { return k >= KindAlloc && k < numKinds }

// ParseKind returns the Kind named s ("alloc", "realloc", ...).
func ParseKind(s string) (Kind, error) {
	for i, n := range kindNames {
		if i != 0 && n == s {
			return Kind(i), nil
		}
	}
	return 0, fmt.Errorf("unknown event kind %q", s)
}

// KindSet is a set of event kinds, as a bit mask indexed by Kind. It says, for
// instance, which kinds carry a stack (the seeds' STACK_TRACING_EVENT_ID).
type KindSet uint8

// KindsOf returns the set holding kinds.
func KindsOf(kinds ...Kind) KindSet {
	var s KindSet
	for _, k := range kinds {
		s |= 1 << k
	}
	return s
}

// Has reports whether k is in s.
func (s KindSet) Has(k Kind) bool { return s&(1<<k) != 0 }

// Kinds returns the members of s in order.
func (s KindSet) Kinds() []Kind {
	var ks []Kind
	for k := KindAlloc; k < numKinds; k++ {
		if s.Has(k) {
			ks = append(ks, k)
		}
	}
	return ks
}

// String writes s as ParseKindSet reads it: "alloc,realloc", "none" for
// NoStacks, "default" for the zero set.
func (s KindSet) String() string {
	switch {
	case s == 0:
		return "default"
	case s&^NoStacks == 0:
		return "none"
	}
	out := ""
	for _, k := range s.Kinds() {
		if out != "" {
			out += ","
		}
		out += k.String()
	}
	return out
}

// Func is the entry point an event came through (the seeds' SourceId).
type Func uint8

// The traced entry points.
const (
	FuncUnknown Func = iota
	FuncMalloc
	FuncCalloc
	FuncRealloc
	FuncReallocarray
	FuncFree
	FuncPosixMemalign
	FuncAlignedAlloc
	FuncMemalign
	FuncValloc
	FuncPvalloc
	FuncNew         // operator new (all non-array variants)
	FuncNewArray    // operator new[]
	FuncDelete      // operator delete (all non-array variants)
	FuncDeleteArray // operator delete[]
	FuncMmap
	FuncMunmap
	FuncMremap

	numFuncs
)

var funcNames = [numFuncs]string{
	"unknown", "malloc", "calloc", "realloc", "reallocarray", "free",
	"posix_memalign", "aligned_alloc", "memalign", "valloc", "pvalloc",
	"operator new", "operator new[]", "operator delete", "operator delete[]",
	"mmap", "munmap", "mremap",
}

func (f Func) String() string {
	if f < numFuncs {
		return funcNames[f]
	}
	return fmt.Sprintf("func(%d)", uint8(f))
}

// Family returns the allocation family f belongs to.
func (f Func) Family() Family {
	switch f {
	case FuncMalloc:
		return FamilyMalloc
	case FuncCalloc:
		return FamilyCalloc
	case FuncRealloc, FuncReallocarray:
		return FamilyRealloc
	case FuncFree:
		return FamilyFree
	case FuncPosixMemalign, FuncAlignedAlloc, FuncMemalign, FuncValloc, FuncPvalloc:
		return FamilyAligned
	case FuncNew, FuncNewArray, FuncDelete, FuncDeleteArray:
		return FamilyCXX
	case FuncMmap, FuncMunmap, FuncMremap:
		return FamilyMmap
	}
	return 0
}

// Family is a set of allocation families, as a bit mask: which entry points a
// session traces.
type Family uint32

// The allocation families.
const (
	FamilyMalloc  Family = 1 << iota // malloc
	FamilyCalloc                     // calloc
	FamilyRealloc                    // realloc, reallocarray
	FamilyFree                       // free
	FamilyAligned                    // posix_memalign, aligned_alloc, memalign, valloc, pvalloc
	FamilyCXX                        // C++ operator new and delete, all variants
	FamilyMmap                       // mmap, munmap, mremap of anonymous memory

	// FamilyHeap is every family of the malloc heap: the default.
	FamilyHeap = FamilyMalloc | FamilyCalloc | FamilyRealloc | FamilyFree | FamilyAligned | FamilyCXX
	// FamilyAll is every family.
	FamilyAll = FamilyHeap | FamilyMmap
)

var familyNames = []struct {
	f    Family
	name string
}{
	{FamilyMalloc, "malloc"}, {FamilyCalloc, "calloc"}, {FamilyRealloc, "realloc"},
	{FamilyFree, "free"}, {FamilyAligned, "aligned"}, {FamilyCXX, "cxx"}, {FamilyMmap, "mmap"},
}

// ParseFamily parses a comma-separated list of family names ("malloc",
// "calloc", "realloc", "free", "aligned", "cxx", "mmap", "heap", "all").
func ParseFamily(s string) (Family, error) {
	var f Family
	for _, part := range splitComma(s) {
		switch part {
		case "heap":
			f |= FamilyHeap
			continue
		case "all":
			f |= FamilyAll
			continue
		}
		found := false
		for _, fn := range familyNames {
			if fn.name == part {
				f |= fn.f
				found = true
			}
		}
		if !found {
			return 0, fmt.Errorf("unknown allocation family %q", part)
		}
	}
	return f, nil
}

func (f Family) String() string {
	if f == 0 {
		return "none"
	}
	out := ""
	for _, fn := range familyNames {
		if f&fn.f != 0 {
			if out != "" {
				out += ","
			}
			out += fn.name
		}
	}
	return out
}

func splitComma(s string) []string {
	var parts []string
	start := 0
	for i := 0; i <= len(s); i++ {
		if i == len(s) || s[i] == ',' {
			if p := s[start:i]; p != "" {
				parts = append(parts, p)
			}
			start = i + 1
		}
	}
	return parts
}

// Heap identifies the allocator an event went to (the seeds' heap handle).
type Heap uint16

// The allocators heapscope tells apart.
const (
	HeapLibc     Heap = iota // the C library's malloc (glibc)
	HeapExe                  // a malloc family defined in the executable (static binaries, bundled allocators)
	HeapMmap                 // anonymous mappings
	HeapJemalloc             // jemalloc (a shared library, preloaded, or linked into the executable)
	HeapTcmalloc             // gperftools' tcmalloc
	HeapMimalloc             // Microsoft's mimalloc
)

func (h Heap) String() string {
	switch h {
	case HeapLibc:
		return "libc"
	case HeapExe:
		return "exe"
	case HeapMmap:
		return "mmap"
	case HeapJemalloc:
		return "jemalloc"
	case HeapTcmalloc:
		return "tcmalloc"
	case HeapMimalloc:
		return "mimalloc"
	}
	return fmt.Sprintf("heap(%d)", uint16(h))
}

// StackID names a stack within one process. Zero means "no stack".
type StackID uint32

// Event is one call to an allocation function.
//
// For KindRealloc, OldAddr is the block passed in and Addr the block returned;
// realloc(NULL, n) has OldAddr 0, and a realloc that frees (size 0) has Addr 0.
// An allocation that failed has Addr 0.
//
// In a sampled trace, a KindAlloc whose provider weighed it carries in
// OldSize the bytes it stands for (an otel_memory USDT probe's weight,
// the target's sampler's estimate); 0 leaves it to the trace's sampling
// rate (analyze.EventWeights).
type Event struct {
	Time    int64   // CLOCK_MONOTONIC, nanoseconds
	PID     uint32  // process (thread group) id
	TID     uint32  // thread id
	Kind    Kind    // what happened
	Func    Func    // the entry point called
	Heap    Heap    // the allocator
	Stack   StackID // the call stack, scoped by PID; 0 if none was taken
	Addr    uint64  // the block allocated or freed (the new block for realloc)
	Size    uint64  // bytes requested (the new size for realloc); 0 for frees
	OldAddr uint64  // realloc: the block passed in
	OldSize uint64  // realloc: that block's size, when the provider knows it, else 0 (see above for alloc)
}

// Stack is a call stack, innermost frame first. Frames are return addresses
// (the instruction after each call); Frames[0] is in the code that called the
// allocation function, or in the allocator itself when the provider could not
// skip it. IDs are assigned by the provider and scoped by PID.
type Stack struct {
	PID    uint32
	ID     StackID
	Frames []uint64
}

// Process describes a traced process when tracing of it begins.
//
// A Process record with the pid and time of the last one of its pid updates
// that process's command line (a program that wrote its title over its
// argv, or a forked child that took a title of its own); one with a time
// of its own begins a new image of the pid (an exec).
type Process struct {
	PID     uint32
	PPID    uint32
	Time    int64    // when tracing of it began (CLOCK_MONOTONIC ns)
	Exe     string   // path of the executable
	Cmdline []string // argv
}

// CommandLine returns p's argv as one line that bash reads back as the
// same words: an argument holding anything but letters, digits and
// -_./=:,+@% is single-quoted, and one holding control characters (a
// newline in a python -c script) is written $'...' with escapes, so that
// the line stays one line.
func (p Process) CommandLine() string {
	var b strings.Builder
	for i, a := range p.Cmdline {
		if i > 0 {
			b.WriteByte(' ')
		}
		switch {
		case a != "" && strings.Trim(a, safeArgChars) == "":
			b.WriteString(a)
		case strings.IndexFunc(a, func(r rune) bool { return r < 0x20 || r == 0x7f }) >= 0:
			b.WriteString("$'")
			for i := 0; i < len(a); i++ {
				switch c := a[i]; {
				case c == '\n':
					b.WriteString(`\n`)
				case c == '\t':
					b.WriteString(`\t`)
				case c == '\\' || c == '\'':
					b.WriteByte('\\')
					b.WriteByte(c)
				case c < 0x20 || c == 0x7f:
					fmt.Fprintf(&b, `\x%02x`, c)
				default:
					b.WriteByte(c)
				}
			}
			b.WriteByte('\'')
		default:
			b.WriteByte('\'')
			b.WriteString(strings.ReplaceAll(a, "'", `'\''`))
			b.WriteByte('\'')
		}
	}
	return b.String()
}

const safeArgChars = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./=:,+@%"

// Exit records the end of a traced process, or the end of its tracing.
type Exit struct {
	PID  uint32
	Time int64
	// Status is the exit code, or 128+signal when it was killed by a signal;
	// -1 when unknown (the process was detached or was not our child).
	Status int32
	Signal int32 // the signal that killed it, else 0
}

// Module is a file mapped executable into a process: enough to symbolize its
// addresses later, on another machine.
type Module struct {
	PID     uint32
	Time    int64  // when the mapping was seen
	Start   uint64 // first address of the executable mapping
	End     uint64 // one past its last address
	Offset  uint64 // file offset of Start
	Path    string
	BuildID string // hex, "" when the file has none
}

// LiveBlock is one allocation still live at a snapshot.
type LiveBlock struct {
	Addr  uint64
	Size  uint64
	Stack StackID
	Time  int64 // when it was allocated
}

// StackTotal is what one stack allocated and freed, summed since tracing began.
type StackTotal struct {
	Stack      StackID
	Allocs     uint64 // allocation calls (including reallocs that returned a block)
	AllocBytes uint64
	Frees      uint64
	FreeBytes  uint64
}

// Snapshot is the aggregate state of one process at a flush or at stop, from
// a provider that keeps state instead of streaming every event (the eBPF
// provider's aggregate mode).
type Snapshot struct {
	PID    uint32
	Time   int64
	Final  bool // taken at stop
	Live   []LiveBlock
	Totals []StackTotal
}

// LostReason says why events were lost.
type LostReason uint8

// The reasons events are lost. Each is counted separately in Stats.
const (
	LostRingFull    LostReason = iota // the kernel ring buffer was full (eBPF stream mode)
	LostMapFull                       // a BPF map was full (aggregate mode, in-flight calls)
	LostBufferFull                    // the in-process buffer was full and the policy was to drop (preload)
	LostFileLimit                     // the trace file reached its maximum size (sequential mode), or writing it failed (a full disk)
	LostOverwritten                   // overwritten by newer data (circular mode)
	LostOther                         // anything else; see the provider's warnings

	NumLostReasons = iota
)

var lostNames = [NumLostReasons]string{"ring_full", "map_full", "buffer_full", "file_limit", "overwritten", "other"}

func (r LostReason) String() string {
	if r < NumLostReasons {
		return lostNames[r]
	}
	return fmt.Sprintf("lost(%d)", uint8(r))
}

// Stats counts what a session delivered and lost. Counters are cumulative
// since the session started; a later Stats supersedes an earlier one.
type Stats struct {
	Time       int64                  `json:"time_ns"` // when taken (CLOCK_MONOTONIC ns)
	Delivered  uint64                 `json:"delivered"`
	Lost       [NumLostReasons]uint64 `json:"lost"`        // by LostReason
	StacksLost uint64                 `json:"stacks_lost"` // events delivered without their stack (stack map full or collision)
	// StacksCut counts events delivered with a stack that does not reach
	// the thread's first frame: cut at the depth limit (StacksCutDepth of
	// them), or where the unwinder lost the chain (no rule, no frame
	// pointer), StacksCutNoTable of them after a frame in code no unwind
	// table covered (a module without one, or whose table found no room).
	// The eBPF provider counts them; 0 from one that does not.
	StacksCut        uint64 `json:"stacks_cut,omitempty"`
	StacksCutDepth   uint64 `json:"stacks_cut_depth,omitempty"`
	StacksCutNoTable uint64 `json:"stacks_cut_no_table,omitempty"`
	Unmatched        uint64 `json:"unmatched"` // frees of addresses never seen allocated (allocated before tracing)
	Bytes            uint64 `json:"bytes"`     // bytes written to the trace
}

// TotalLost is the sum of events lost for every reason.
func (s *Stats) TotalLost() uint64 {
	var n uint64
	for _, v := range s.Lost {
		n += v
	}
	return n
}

// Sink consumes the records of a trace, in order. A provider writes into one;
// the trace file writer, the hooks and the heap model are sinks; a trace file
// reader replays into one.
//
// A Stack is sent before the first event that refers to it, a Process before
// its first event and a Module before the stacks that point into it. Events
// passed to Events, and the Frames of a Stack passed to Stack, may be reused
// by the caller after it returns: a sink that keeps them copies them. A
// Process's command line is the sink's to keep.
type Sink interface {
	Process(Process) error
	Exit(Exit) error
	Module(Module) error
	Stack(Stack) error
	Events([]Event) error
	Snapshot(Snapshot) error
	Stats(Stats) error
	Note(Note) error
}

// MarshalText writes f by name ("malloc,free"), for JSON.
func (f Family) MarshalText() ([]byte, error) { return []byte(f.String()), nil }

// UnmarshalText parses what MarshalText writes.
func (f *Family) UnmarshalText(b []byte) (err error) {
	if string(b) == "none" {
		*f = 0
		return nil
	}
	*f, err = ParseFamily(string(b))
	return err
}
