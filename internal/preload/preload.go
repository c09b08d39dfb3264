// Package preload is heapscope's in-process provider: an interposer library
// (C, built from csrc/ and embedded) that a launched program loads with
// LD_PRELOAD, and the collector that reads what it records.
//
// The interposer wraps the malloc family (and, on request, C++ operator new
// and delete and the mmap family), walks the stack of each call whose kind
// takes one, de-duplicates stacks in the process, and writes compact records
// into a ring of shared memory that belongs to the calling thread. The
// collector maps every ring, merges the rings of a process in timestamp
// order and hands the records to an event.Sink.
//
// A Collector serves one session: Prepare any number of commands with it,
// start them, report the direct child's end with Exited, and Close it.
// Processes those commands fork or exec are followed, each into its own
// stream; see README.md for what happens to children.
package preload

import (
	"fmt"
	"time"

	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/internal/errs"
)

// Unwind selects how the interposer walks the stack.
type Unwind uint8

const (
	// UnwindFP follows frame pointers: fast, and complete for code built
	// with them. The walk stays inside the thread's stack, so code without
	// frame pointers gives a shorter stack, never a fault.
	UnwindFP Unwind = iota
	// UnwindDWARF unwinds with the DWARF call frame information, using the
	// system's libunwind (libunwind.so.8), for code built without frame
	// pointers. Slower; allocations made before the interposer's
	// constructor ran are still walked with frame pointers.
	UnwindDWARF
	// UnwindTables walks with compact unwind tables the collector builds
	// from each file's .eh_frame (package unwind): DWARF-correct stacks at
	// about the frame-pointer walk's cost once the tables arrived. Where no
	// table answers (not arrived yet, no rule for the address) the stack is
	// walked with libunwind, as UnwindDWARF does, or with frame pointers
	// when libunwind is not installed.
	UnwindTables

	// unwindTablesOnly is UnwindTables with the frame pointer, not libunwind,
	// where no table answers: tests use it to see the tables at work.
	unwindTablesOnly
)

func (u Unwind) String() string {
	switch u {
	case UnwindFP:
		return "fp"
	case UnwindDWARF:
		return "dwarf"
	case UnwindTables:
		return "tables"
	}
	return fmt.Sprintf("unwind(%d)", uint8(u))
}

// ParseUnwind returns the Unwind named s: "fp", "dwarf" or "tables".
func ParseUnwind(s string) (Unwind, error) {
	switch s {
	case "fp":
		return UnwindFP, nil
	case "dwarf":
		return UnwindDWARF, nil
	case "tables":
		return UnwindTables, nil
	}
	return 0, fmt.Errorf("unknown unwind method %q: %w", s, errs.ErrInvalidFlags)
}

// OnFull is what a thread does when its buffer is full.
type OnFull uint8

const (
	// Block waits for the collector to make room: nothing is lost.
	Block OnFull = iota
	// Drop discards the event and counts it as event.LostBufferFull.
	Drop
)

func (o OnFull) String() string {
	switch o {
	case Block:
		return "block"
	case Drop:
		return "drop"
	}
	return fmt.Sprintf("onfull(%d)", uint8(o))
}

// ParseOnFull returns the OnFull named s: "block" or "drop".
func ParseOnFull(s string) (OnFull, error) {
	switch s {
	case "block":
		return Block, nil
	case "drop":
		return Drop, nil
	}
	return 0, fmt.Errorf("unknown buffer-full policy %q: %w", s, errs.ErrInvalidFlags)
}

// NoStacks is a Config.Stacks value that takes no stacks at all. (A zero
// Stacks means the default, DefaultStacks.) It holds no kind, so
// SetStacks(NoStacks) and SetStacks(0) both turn stacks off.
const NoStacks event.KindSet = 1

// Defaults for the zero fields of a Config.
const (
	DefaultMaxFrames     = 64
	DefaultBufferSize    = 4 << 20
	DefaultFlushInterval = 100 * time.Millisecond
)

// DefaultStacks is the kinds that carry a stack when Config.Stacks is zero.
var DefaultStacks = event.KindsOf(event.KindAlloc, event.KindRealloc)

// Limits of a Config.
const (
	MaxFrames     = 127
	MinBufferSize = 16 << 10
	MaxBufferSize = 1 << 30
)

// Config selects what a Collector traces and how.
type Config struct {
	// Families are the entry points traced; 0 means event.FamilyHeap.
	// Calls to a family not traced are not recorded: with FamilyCXX off,
	// operator new is seen as the malloc it calls.
	Families event.Family
	// Stacks are the kinds whose events carry a stack; 0 means
	// DefaultStacks, NoStacks none. SetStacks changes it live.
	Stacks event.KindSet
	// Unwind is how stacks are walked.
	Unwind Unwind
	// MaxFrames bounds the frames of a stack, at most MaxFrames; 0 means
	// DefaultMaxFrames.
	MaxFrames int
	// BufferSize is the bytes of each thread's buffer, rounded up to a power
	// of two, between MinBufferSize and MaxBufferSize; 0 means
	// DefaultBufferSize. Pages are committed as they are first written.
	BufferSize int
	// OnFull is what a thread does when its buffer is full.
	OnFull OnFull
	// FlushInterval bounds how long an event published by an idle thread
	// waits before the sink sees it; 0 means DefaultFlushInterval.
	FlushInterval time.Duration
	// SampleRate, when more than 0, records one allocation per SampleRate
	// bytes allocated on average (an allocation of S bytes with probability
	// 1 - exp(-S/SampleRate)), and only the frees and reallocs of the blocks
	// recorded; 0 records every event.
	SampleRate int64
	// SampleSeed seeds the sampling of every thread, for repeatable tests;
	// 0 seeds each thread from its clock.
	SampleSeed uint64
}

// withDefaults validates c and fills in its zero fields.
func (c Config) withDefaults() (Config, error) {
	bad := func(format string, args ...any) (Config, error) {
		return Config{}, fmt.Errorf("preload: "+format+": %w", append(args, errs.ErrInvalidFlags)...)
	}
	if c.Families == 0 {
		c.Families = event.FamilyHeap
	}
	if c.Families&^event.FamilyAll != 0 {
		return bad("unknown allocation families %#x", uint32(c.Families&^event.FamilyAll))
	}
	if c.Stacks == 0 {
		c.Stacks = DefaultStacks
	}
	if c.SampleRate < 0 {
		return bad("negative sampling rate %d", c.SampleRate)
	}
	if err := checkStacks(c.Stacks); err != nil {
		return Config{}, err
	}
	if c.Unwind > unwindTablesOnly {
		return bad("unknown unwind method %d", c.Unwind)
	}
	switch {
	case c.MaxFrames == 0:
		c.MaxFrames = DefaultMaxFrames
	case c.MaxFrames < 0 || c.MaxFrames > MaxFrames:
		return bad("MaxFrames %d outside 1..%d", c.MaxFrames, MaxFrames)
	}
	switch {
	case c.BufferSize == 0:
		c.BufferSize = DefaultBufferSize
	case c.BufferSize < MinBufferSize || c.BufferSize > MaxBufferSize:
		return bad("BufferSize %d outside %d..%d", c.BufferSize, MinBufferSize, MaxBufferSize)
	}
	for c.BufferSize&(c.BufferSize-1) != 0 {
		c.BufferSize += c.BufferSize & -c.BufferSize
	}
	if c.OnFull > Drop {
		return bad("unknown buffer-full policy %d", c.OnFull)
	}
	switch {
	case c.FlushInterval == 0:
		c.FlushInterval = DefaultFlushInterval
	case c.FlushInterval < 0:
		return bad("negative FlushInterval %v", c.FlushInterval)
	}
	return c, nil
}

// checkStacks rejects kind sets holding anything but kinds (and NoStacks).
func checkStacks(s event.KindSet) error {
	valid := NoStacks
	for k := event.KindAlloc; k.Valid(); k++ {
		valid |= event.KindsOf(k)
	}
	if s&^valid != 0 {
		return fmt.Errorf("preload: unknown kinds in stack set %#x: %w", uint8(s), errs.ErrInvalidFlags)
	}
	return nil
}
