// Package analyze is heapscope's heap model: it consumes the records of a
// trace in one streaming pass and answers what leaked, what was live at the
// peak and who allocated it, which sites make temporaries, and how the heap
// grew over time.
//
// A Model is an event.Sink: replay a trace into it (or tee a live session
// into it) and call Profile when the records end. Its memory is proportional
// to the blocks live at any one time and to the distinct stacks, never to the
// number of events, so a multi-gigabyte trace is read as easily as a small
// one.
//
// # Definitions
//
// Allocations are the calls that returned a new block: malloc, calloc, the
// aligned family, operator new, and mmap when that family is traced.
// Reallocations are the realloc and reallocarray calls. A realloc is the
// block moving: the old block is freed (its bytes leave the stack that
// allocated it) and the new block is allocated and attributed to the
// realloc's stack, with its full new size counted as bytes allocated, as
// heaptrack does. realloc(NULL, n) allocates; realloc(p, 0) returning NULL
// frees p; a realloc that failed leaves p live.
//
// Frees are counted on the stack that allocated the block, whatever stack
// the free itself had, so that for every stack
//
//	Bytes - FreedBytes == LiveBytes
//
// when no events were lost. A free of an address that is not live (a block
// allocated before tracing, or before the window) is an unmatched free:
// counted, never an error. free(NULL) does nothing and is not counted. An
// allocation that returned NULL (Addr 0) is counted as Failed and is never
// live.
//
// A temporary allocation is a block freed directly after it was made: the
// next heap event of the thread that made it (an allocation, a
// reallocation or a free) is the free of that very block. A realloc that
// moves the block made by the thread's previous event counts that block as
// temporary, a realloc being a free followed by an allocation.
//
// heaptrack's count (heaptrack_print, heaptrack_gui) differs in two ways,
// and Summary.HeaptrackTemporary gives it for comparison. It reads one
// stream of every thread's calls, so a call of another thread in between
// makes a block not temporary. And it does not compare blocks: a free is
// temporary when the record before it is an allocation of the same stack
// and size, whichever block that allocation made (its '-' record names an
// allocation info, the pair of stack and size, not an address). A program
// that allocates a block and then frees an older one of the same size from
// the same stack (a buffer replaced, a cache's page recycled) makes a
// heaptrack temporary at every turn and a heapscope one at none: on
// single-threaded sqlite3 heaptrack counts about 8 times as many. heaptrack
// also records no realloc that returned NULL, no failed allocation and no
// free of a block it did not see made.
//
// The heap is the blocks live in the traced processes that are running: a
// process's blocks still live when it exits stay its leaks (LiveBytes),
// but leave the heap there (Stack.ExitedBytes), since the process's memory
// is gone. The peak is the first instant at which the bytes live across
// all traced processes reached their maximum: in a build, the compiler
// that exited is not added to the assembler that runs after it. For each stack the model keeps the bytes
// and blocks it had live at that instant, in constant time per event: the
// model numbers each new peak, and a stack saves its live values the first
// time they change after the latest peak.
//
// The timeline holds at most Options.TimelinePoints points. Time is divided
// into buckets that double in width whenever the points would exceed that
// bound; each point is the sample of largest live bytes in its bucket (so
// the timeline's maximum is the peak), and the last point is the state at
// the end.
//
// # Windows
//
// Options.From and Options.To give the report that tracing only during
// [From, To) would have given: events before From and at or after To are
// ignored, so blocks allocated before From are unknown and their frees
// inside the window are unmatched frees, the peak is the peak of the blocks
// allocated in the window, and the live set at To is what the window
// allocated and did not free (its "leaks"). Stats records are not windowed:
// the last one of the trace is kept, and describes the whole session.
//
// # Censuses
//
// A census (event.Census: the blocks an allocator's heap held at one
// instant, read from the process's memory, as attach takes one) is a
// rundown: at its time the model keeps the live blocks the trace had seen,
// adds the others as allocated before the trace (stack PreTrace, no
// allocations counted), and drops those the census did not find (missed
// frees); see Rundown. Their frees then match, and the live heap, the peak
// and the timeline are the process's whole heap from the census on. The
// stack PreTrace is where Bytes - FreedBytes == LiveBytes does not hold:
// its blocks were live before any byte was counted.
//
// # Aggregate traces
//
// A provider in aggregate mode records Snapshots (the live blocks and the
// per-stack totals of a process) instead of every event. For a process that
// has snapshots, the last snapshot taken before To gives its live set (the
// leaks), and its per-stack totals, minus those of the last snapshot before
// From, give the allocations, bytes and frees per stack. The timeline has a
// point per snapshot, and the peak is the largest live total seen at a
// snapshot: a lower bound, at a snapshot's time, not the instant of the true
// peak. Temporaries, the size histogram, failed allocations and the split
// of allocations from reallocations are not recorded in that mode; the
// Profile's Missing field says so, and reports print it.
package analyze

import (
	"math"
	"strings"

	"github.com/heapscope/heapscope/event"
)

// Profile is what a Model computed: the answers of one pass over a trace.
// Times are in the trace's clock (CLOCK_MONOTONIC nanoseconds).
type Profile struct {
	From, To int64 // the window applied; 0 when open on that side

	// Start and End are the times of the first and last records seen in
	// the window (events, snapshots, process starts and exits); 0 when
	// there were none.
	Start, End int64
	// FirstEvent and LastEvent are the times of the first and last heap
	// events in the window: the time a trace's events cover, which for a
	// circular file or a part of a newfile series is much less than the
	// session's (0 when there were none). Rates are per this span.
	FirstEvent, LastEvent int64

	Processes []Process
	Modules   []event.Module // every module record, in the order received
	Stacks    []Stack        // every (process, stack) that allocated in the window

	Summary   Summary
	Peak      Peak
	Timeline  []Point
	Histogram []Bucket // allocation sizes; empty when Missing has NoHistogram

	// Stats is the last Stats record of the trace: what the session
	// delivered and lost. HasStats is false when the trace had none.
	Stats    event.Stats
	HasStats bool

	// Warnings are what the session warned of as it traced, kept in the
	// trace: once each, in the order given.
	Warnings []event.Warning
	// Memory holds the samples of the processes' resident memory in the
	// window, in the order taken.
	Memory []event.Memory
	// Verdicts are the heap scans of the window's processes, in the order
	// taken; the classes they gave are the stacks' Counters.Classes. None:
	// no scan, and the live blocks are only "live at the end".
	Verdicts []Verdict
	// Rundowns are what the censuses in the window found live (see
	// Rundown), in the order taken; Resident the processes' resident
	// memory explained, as the censuses found it.
	Rundowns []Rundown
	Resident []event.Resident

	// Aggregate is true when some process was reported by snapshots.
	Aggregate bool
	// Missing says which parts this profile cannot give.
	Missing Missing
	// SampleRate is the trace's sampling rate in bytes, 0 when every event
	// was recorded. When it is set, every byte and object count (summary,
	// stacks, peak, timeline, histogram) is an estimate, scaled up from
	// the allocations recorded (see SampleWeights).
	SampleRate int64
}

// Estimated reports whether p's counts are estimates from a sampled trace.
func (p *Profile) Estimated() bool { return p.SampleRate > 0 }

// Summary holds the totals of a profile, over every process and stack: its
// Counters are the sum of the profile's Stacks' (the peak's bytes and
// blocks too: what the stacks had live at the peak instant).
type Summary struct {
	Counters
	Events uint64 // heap events read in the window, free(NULL) included
	// UnmatchedFrees counts frees of addresses that were not live: blocks
	// allocated before tracing or before the window.
	UnmatchedFrees uint64
	// MissedFrees counts blocks replaced by a new allocation at the same
	// address without a free in between: their free was lost. Zero when
	// no events were lost.
	MissedFrees uint64
	// Sampled counts the allocations and reallocations recorded in a
	// sampled trace (Profile.SampleRate > 0): the raw sample the estimates
	// are scaled up from. 0 in an exact trace.
	Sampled uint64
	// HeaptrackTemporary counts the temporary allocations by heaptrack's
	// definition (see the package documentation), for a comparison with
	// heaptrack; not known when Temporary is not (Profile.Missing).
	HeaptrackTemporary uint64
	// BytesVar is, in a sampled trace, the variance of the estimate of
	// the bytes allocated (see SampleVariance); 0 when exact or unknown.
	BytesVar float64
}

// Peak is the instant the live heap was largest.
type Peak struct {
	Time   int64 // 0 when nothing was ever live
	Bytes  uint64
	Blocks uint64
}

// Point is one sample of the timeline.
type Point struct {
	Time   int64
	Bytes  uint64 // live bytes
	Blocks uint64 // live blocks
}

// Bucket is one bucket of the allocation size histogram: Count allocations
// of more than the previous bucket's Le and at most Le bytes. Buckets are
// powers of two; Count is not cumulative.
type Bucket struct {
	Le    uint64
	Count uint64
}

// Process is a traced process: what its Process record said and, when it
// ended while traced, its Exit record.
type Process struct {
	event.Process
	Exited bool
	Exit   event.Exit
}

// Stack is what one stack of one process did. Frames are the stack's return
// addresses, innermost first, as the provider recorded them; nil for the
// events that carried no stack (ID 0) or whose Stack record is missing.
// Frees count the blocks of this stack freed, whatever stack the free had.
type Stack struct {
	PID    uint32
	ID     event.StackID
	Frames []uint64
	Counters
	// ExitedBytes and ExitedBlocks are what of LiveBytes and LiveBlocks
	// the exit of the process left: leaks that were no longer in the heap
	// once it ended, so that neither the peak nor the timeline counts
	// them after that.
	ExitedBytes, ExitedBlocks uint64
	// LiveVar and PeakVar are, in a sampled trace, the variances of the
	// estimates LiveBytes and PeakBytes (see SampleVariance): 0 when
	// exact, or unknown (an aggregate trace, a window of serve's index).
	LiveVar, PeakVar float64
}

// Missing is a set of the parts of a profile that its trace could not give.
type Missing uint8

// The parts a profile may lack.
const (
	NoPeakInstant  Missing = 1 << iota // the peak is the largest total seen at a snapshot, a lower bound
	NoTemporaries                      // temporaries are not known
	NoTimeline                         // the timeline has only the snapshot instants
	NoHistogram                        // allocation sizes are not known
	NoReallocSplit                     // reallocations are counted among allocations
	NoFailed                           // failed allocations are not known
)

var missingText = []struct {
	m    Missing
	text string
}{
	{NoPeakInstant, "no peak instant: the peak shown is the largest live total at a snapshot (a lower bound)"},
	{NoTemporaries, "no temporary allocations: the trace does not hold every event (snapshots, or sampled)"},
	{NoTimeline, "no full timeline: only the snapshot instants"},
	{NoHistogram, "no allocation size histogram"},
	{NoReallocSplit, "reallocations are counted among allocations"},
	{NoFailed, "failed allocations are not known"},
}

// Has reports whether every part in x is missing.
func (m Missing) Has(x Missing) bool { return m&x == x }

// Describe returns one sentence per missing part.
func (m Missing) Describe() []string {
	var out []string
	for _, t := range missingText {
		if m&t.m != 0 {
			out = append(out, t.text)
		}
	}
	return out
}

func (m Missing) String() string {
	if m == 0 {
		return "none"
	}
	return strings.Join(m.Describe(), "; ")
}

// SizeBuckets turns counts of allocation sizes, bucket i holding the sizes
// in (2^(i-1), 2^i] and bucket 64 the larger ones, into a histogram that
// ends at the last bucket counted.
func SizeBuckets(counts *[65]uint64) []Bucket {
	last := 0
	for i, n := range counts {
		if n != 0 {
			last = i + 1
		}
	}
	if last == 0 {
		return nil
	}
	out := make([]Bucket, 0, last)
	for i := 0; i < last; i++ {
		le := uint64(math.MaxUint64)
		if i < 64 {
			le = 1 << i
		}
		out = append(out, Bucket{Le: le, Count: counts[i]})
	}
	return out
}

// AddStacks adds the per-stack counts of stacks to the summary's totals:
// what the summary says is the sum of its stacks.
func (s *Summary) AddStacks(stacks []Stack) {
	for i := range stacks {
		s.Add(&stacks[i].Counters)
	}
}
