package ebpf

import (
	"fmt"
	"time"

	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/internal/errs"
)

// Defaults for the zero fields of Config.
const (
	DefaultRingSize      = 4 << 20
	DefaultMaxLive       = 1 << 18
	DefaultStackMapSize  = 1 << 14
	DefaultMaxStacks     = 1 << 20
	DefaultFlushInterval = event.DefaultFlushInterval

	minRingSize = 4096
	maxMapSize  = 1 << 31
	// maxSample bounds Config.Sample: the BPF draw multiplies it by a
	// number below 2^21 in 64 bits.
	maxSample = event.MaxSample
)

// Config configures a Tracer. The zero value is a stream tracer of the whole
// malloc heap with allocation stacks.
type Config struct {
	// Mode is how the tracer hands what it sees to user space:
	// event.Stream sends every call through a BPF ring buffer as an
	// event.Event; event.Aggregate keeps the live blocks and per-stack
	// totals in BPF maps and sends event.Snapshot records at Flush and
	// Close (and every FlushInterval, when set): for long-running servers,
	// where every event would be too many.
	Mode event.CaptureMode
	// Families are the allocation families traced; 0 means
	// event.FamilyHeap. event.FamilyMmap adds mmap, munmap and mremap
	// (stream mode only) through the syscall tracepoints.
	Families event.Family
	// Stacks are the kinds whose events carry a stack; 0 means
	// event.DefaultStacks and event.NoStacks none.
	Stacks event.KindSet
	// RingSize is the size in bytes of the BPF ring buffer (stream mode),
	// rounded up to a power of two of at least a page.
	RingSize int
	// MaxLive is how many live blocks aggregate mode is sized for: its
	// table has room for twice as many, and fills up at about one and a
	// half times as many (a block finds both the table's buckets it may
	// go in full). A block that finds no room (or whose stack finds none
	// in the totals, sized by StackMapSize) is sent through the ring and
	// kept by this process, and so are, from then on, the frees of its
	// process that the table does not find: the table's size bounds the
	// kernel's part, not the live set. When sampling, such a block is lost
	// instead (counted as event.LostMapFull), as is, in stream mode, a
	// sampled block that finds the sampled map (MaxLive entries) full.
	MaxLive int
	// StackMapSize is how many stacks the BPF side holds the frames of
	// until this process has read them (0: DefaultStackMapSize): new
	// stacks in flight, not all the stacks seen (MaxStacks). In aggregate
	// mode it also sizes the kernel's per-stack totals (the rest go
	// through the ring, as in stream mode). A new stack that finds it
	// full, or another stack with its hash, is counted in
	// Stats.StacksLost and its event delivered without a stack.
	StackMapSize int
	// MaxStacks is how many distinct stacks the BPF side remembers as
	// already read (0: DefaultMaxStacks, a million), a few dozen bytes of
	// kernel memory each, taken as they come. Past it, stacks read are
	// kept in the stack map too, until that fills.
	MaxStacks int
	// FlushInterval bounds, in stream mode, how long an event waits in the
	// ring before it is delivered (0: DefaultFlushInterval). In aggregate
	// mode it is how often a snapshot is considered: one is taken when the
	// last listed fewer than 65,536 live blocks, or once the calls since
	// are at least as many as it listed (so that large snapshots never
	// list more blocks than the calls they stand for), and no sooner than
	// 20 times as long as the last took; 0 means snapshots only at Flush
	// and Close.
	FlushInterval time.Duration

	// NoFollowFork traces only the processes attached, as they run on
	// across exec: the processes they fork are not traced, and an exec is
	// not told apart. By default a process a traced process forks is
	// traced from its first instruction (it is held until its probes are
	// in), and an exec starts a new image of the process: the old one
	// ends with an Exit, the new one begins with a Process record and is
	// probed anew before its first instruction.
	NoFollowFork bool

	// UnwindTables walks stacks with unwind tables built from each mapped
	// file's call frame information (package unwind), falling back to the
	// frame pointer where a file has none: complete stacks through code
	// built without frame pointers (Debian's python3, libc). Stacks are
	// cut at 127 frames. Off by default: experimental.
	UnwindTables bool
	// UnwindEntries is the room for the tables of all files, in 8-byte
	// entries (0: DefaultUnwindEntries, at most MaxUnwindEntries), kernel
	// memory taken 2 MiB at a time as tables need it and given back as
	// they are freed. The processes of one user hold at most half of it.
	// A file whose table does not fit unwinds by frame pointer (see
	// unwind.go).
	UnwindEntries int

	// Sample, when above 0, samples the allocations in BPF: one per Sample
	// bytes allocated on average, an allocation of S bytes with
	// probability 1 - exp(-S/Sample), decided at its entry by a per-thread
	// countdown drawn from an exponential distribution. An allocation not
	// sampled sends nothing and takes no stack; the free and realloc of a
	// sampled block are sent, those of other blocks are not (the sampled
	// blocks are kept in a BPF hash map of MaxLive entries; a sampled
	// allocation that finds it full is not sent, and counted as
	// event.LostMapFull). The realloc of a block not sampled is a new draw,
	// sent, when sampled, as a realloc with no old block. In aggregate mode
	// the live table holds the sampled blocks, and each adds to its stack's
	// totals what it stands for, S/p bytes and 1/p objects (p = 1 -
	// exp(-S/Sample)), computed in BPF in fixed point: the Snapshot's
	// totals are estimates, its live blocks the sampled ones. Not with
	// event.FamilyMmap. 0 sends every call.
	Sample int64

	// Source is what is probed in each process: the allocator's functions
	// (SourceUprobes, the default), OpenTelemetry's otel_memory USDT
	// probes (SourceUSDT), or the probes where a process has them and the
	// functions elsewhere (SourceAuto). Through the probes, the target's
	// own sampler decides what is recorded, and each allocation event
	// carries the bytes it stands for in OldSize (the probe's weight).
	// Stream mode only.
	Source Source

	// noMulti forces classic uprobes even where uprobe_multi links work
	// (tests of the fallback).
	noMulti bool
}

// withDefaults fills in the zero fields and checks the rest.
func (c Config) withDefaults() (Config, error) {
	if c.Mode != event.Stream && c.Mode != event.Aggregate {
		return c, fmt.Errorf("mode %d: %w", c.Mode, errs.ErrInvalidFlags)
	}
	if c.Families == 0 {
		c.Families = event.FamilyHeap
	}
	if c.Families&^event.FamilyAll != 0 {
		return c, fmt.Errorf("unknown allocation families %#x: %w", uint32(c.Families&^event.FamilyAll), errs.ErrInvalidFlags)
	}
	if c.Mode == event.Aggregate && c.Families&event.FamilyMmap != 0 {
		return c, fmt.Errorf("mmap tracing is stream-only (mappings are ranges, not blocks): %w", errs.ErrInvalidFlags)
	}
	if c.Sample < 0 {
		return c, fmt.Errorf("negative sampling size %d: %w", c.Sample, errs.ErrInvalidFlags)
	}
	if c.Sample > maxSample {
		return c, fmt.Errorf("sampling size %d over %d (1 TiB): %w", c.Sample, int64(maxSample), errs.ErrInvalidFlags)
	}
	if c.Sample > 0 && c.Families&event.FamilyMmap != 0 {
		return c, fmt.Errorf("mmap tracing is not sampled: %w", errs.ErrInvalidFlags)
	}
	if c.Source > SourceAuto {
		return c, fmt.Errorf("source %d: %w", c.Source, errs.ErrInvalidFlags)
	}
	if c.Source != SourceUprobes && c.Mode == event.Aggregate {
		return c, fmt.Errorf("tracing through otel_memory probes is stream-only (their weights are not in the aggregate tables): %w", errs.ErrInvalidFlags)
	}
	if c.Stacks == 0 {
		c.Stacks = event.DefaultStacks
	}
	if err := event.CheckStacks(c.Stacks); err != nil {
		return c, err
	}
	if c.RingSize < 0 || c.MaxLive < 0 || c.StackMapSize < 0 || c.FlushInterval < 0 {
		return c, fmt.Errorf("negative size or interval: %w", errs.ErrInvalidFlags)
	}
	if c.RingSize == 0 {
		c.RingSize = DefaultRingSize
	}
	if c.RingSize > 1<<30 {
		return c, fmt.Errorf("ring of %d bytes is over 1 GiB: %w", c.RingSize, errs.ErrInvalidFlags)
	}
	size := minRingSize
	for size < c.RingSize {
		size <<= 1
	}
	c.RingSize = size
	if c.MaxLive == 0 {
		c.MaxLive = DefaultMaxLive
	}
	if c.StackMapSize == 0 {
		c.StackMapSize = DefaultStackMapSize
	}
	if c.MaxStacks < 0 || c.MaxStacks > maxMapSize {
		return c, fmt.Errorf("max stacks %d: %w", c.MaxStacks, errs.ErrInvalidFlags)
	}
	if c.MaxStacks == 0 {
		c.MaxStacks = DefaultMaxStacks
	}
	if c.UnwindEntries < 0 || c.UnwindEntries > MaxUnwindEntries {
		return c, fmt.Errorf("unwind entries %d: %w", c.UnwindEntries, errs.ErrInvalidFlags)
	}
	if c.UnwindEntries == 0 {
		c.UnwindEntries = DefaultUnwindEntries
	}
	if c.MaxLive > maxMapSize || c.StackMapSize > maxMapSize {
		return c, fmt.Errorf("map of over %d entries: %w", maxMapSize, errs.ErrInvalidFlags)
	}
	if c.FlushInterval == 0 && c.Mode == event.Stream {
		c.FlushInterval = DefaultFlushInterval
	}
	return c, nil
}

// stackMask is the BPF program's stack_kinds: bit k set when kind k
// carries a stack.
func stackMask(s event.KindSet) uint8 { return uint8(s &^ event.NoStacks) }
