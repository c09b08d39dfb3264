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

// unwindTablesOnly is event.UnwindTables with the frame pointer, not
// libunwind, where no table answers (the wire's unwindTablesFP): tests use
// it to see the tables at work. Config.Unwind takes the event.Unwind values
// otherwise; they are the wire's numbers (TestProtocolMatchesC).
const unwindTablesOnly = event.UnwindTables + 1

// Defaults for the zero fields of a Config: the session's.
const (
	DefaultMaxFrames     = event.MaxFrames
	DefaultBufferSize    = 4 << 20
	DefaultFlushInterval = event.DefaultFlushInterval
)

// Limits of a Config.
const (
	MaxFrames     = event.MaxFrames // csrc/protocol.h's HS_MAX_FRAMES (protocol.go checks)
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
	// event.DefaultStacks, event.NoStacks none. SetStacks changes it live.
	Stacks event.KindSet
	// Unwind is how stacks are walked.
	Unwind event.Unwind
	// MaxFrames bounds the frames of a stack, at most MaxFrames; 0 means
	// DefaultMaxFrames.
	MaxFrames int
	// BufferSize is the bytes of each thread's buffer, rounded up to a power
	// of two, between MinBufferSize and MaxBufferSize; 0 means
	// DefaultBufferSize. Pages are committed as they are first written.
	BufferSize int
	// OnFull is what a thread does when its buffer is full: event.Block
	// (the default) or event.Drop, counted as event.LostBufferFull.
	OnFull event.OnFull
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
	// EmitUSDT makes the interposer fire OpenTelemetry's otel_memory USDT
	// probes (alloc(ptr, size, weight), free(ptr)) for the blocks it
	// samples, while a tracer has raised their semaphores (csrc/usdt.inc).
	// It needs SampleRate.
	EmitUSDT bool
	// OnWarning, when set, is called with each warning the collector
	// has for the user about a traced process (event.Warning; its Code is
	// one of the Warn constants), from the collector's goroutine, as it
	// arises. The sink gets each as a Note too, so it is kept in the trace.
	// The interposer never writes to the program's own streams: heapscope
	// prints these.
	OnWarning func(event.Warning)
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
		c.Stacks = event.DefaultStacks
	}
	if c.SampleRate < 0 {
		return bad("negative sampling rate %d", c.SampleRate)
	}
	if c.EmitUSDT && c.SampleRate == 0 {
		return bad("the otel_memory probes fire for sampled blocks: EmitUSDT needs a SampleRate")
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
	switch c.OnFull {
	case event.OnFullDefault:
		c.OnFull = event.Block
	case event.Block, event.Drop:
	default:
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

// checkStacks rejects kind sets holding anything but kinds (and
// event.NoStacks).
func checkStacks(s event.KindSet) error {
	if err := event.CheckStacks(s); err != nil {
		return fmt.Errorf("preload: %w", err)
	}
	return nil
}
