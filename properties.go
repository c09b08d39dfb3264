package heapscope

import (
	"strconv"
	"time"

	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/tracefile"
)

// The session's enumerations are defined once, in package event, which the
// providers and the trace file share; these are their names here.
type (
	// LogFileMode says how a session writes its trace: Sequential,
	// Circular, NewFile or RealTime.
	LogFileMode = event.LogFileMode
	// Provider is the mechanism that captures a session's events:
	// ProviderPreload or ProviderEBPF.
	Provider = event.Provider
	// CaptureMode says whether a session streams every event (Stream) or
	// keeps aggregates (Aggregate).
	CaptureMode = event.CaptureMode
	// OnFull says what a provider does when the collector falls behind:
	// OnFullDefault, Block or Drop.
	OnFull = event.OnFull
	// Unwind is how a provider walks stacks: FramePointers, DWARF or
	// Tables.
	Unwind = event.Unwind
)

// The log file modes; see event.LogFileMode.
const (
	Sequential = event.Sequential
	Circular   = event.Circular
	NewFile    = event.NewFile
	RealTime   = event.RealTime
)

// The providers; see event.Provider.
const (
	ProviderPreload = event.ProviderPreload
	ProviderEBPF    = event.ProviderEBPF
)

// The capture modes; see event.CaptureMode.
const (
	Stream    = event.Stream
	Aggregate = event.Aggregate
)

// The full-buffer policies; see event.OnFull.
const (
	OnFullDefault = event.OnFullDefault
	Block         = event.Block
	Drop          = event.Drop
)

// The unwinders; see event.Unwind. Tables is the CLI's default for run and
// attach.
const (
	FramePointers = event.UnwindFP
	DWARF         = event.UnwindDWARF
	Tables        = event.UnwindTables
)

// ParseLogFileMode parses "sequential", "circular", "newfile" or "realtime".
func ParseLogFileMode(s string) (LogFileMode, error) { return event.ParseLogFileMode(s) }

// ParseCaptureMode parses "stream" or "aggregate".
func ParseCaptureMode(s string) (CaptureMode, error) { return event.ParseCaptureMode(s) }

// DefaultStacks is the set of event kinds that carry a call stack unless
// chosen otherwise: allocations and reallocations.
const DefaultStacks = event.DefaultStacks

// MaxFrames is the deepest stack heapscope records.
const MaxFrames = event.MaxFrames

// DefaultStacksFor is the set of event kinds that carry a call stack when
// the families f are traced and nothing else was chosen: every kind that
// makes memory (allocations, reallocations, and mmap when it is traced).
// Frees and munmaps are charged to the stack that made the block, so their
// own stacks are recorded only when asked for.
func DefaultStacksFor(f event.Family) event.KindSet {
	if f&event.FamilyMmap != 0 {
		return DefaultStacks | event.KindsOf(event.KindMmap)
	}
	return DefaultStacks
}

// The defaults and bounds of Properties, for programs that check their own
// input against them (heapscope's flags).
const (
	MinBufferSize        = 4 * KiB
	MaxBufferSize        = 1 * MiB
	DefaultBufferSize    = 64 * KiB
	DefaultBuffers       = 64
	DefaultFlushInterval = event.DefaultFlushInterval
	// MaxBufferBytes bounds BufferSize × Buffers: the memory a session may
	// ask for its buffers.
	MaxBufferBytes = 4 * GiB
	// DefaultMaxStacks and MaxMaxStacks are Properties.MaxStacks's
	// default and bound.
	DefaultMaxStacks = 1 << 20
	MaxMaxStacks     = 1 << 31
	// DefaultUnwindTablesSize and MaxUnwindTablesSize are
	// Properties.UnwindTablesSize's default and bound.
	DefaultUnwindTablesSize = 64 * MiB
	MaxUnwindTablesSize     = 1 * GiB
)

// Properties configure a session.
//
// Every field's zero value means its default, applied in one place when the
// session starts, except File: a session writes a trace file unless
// FileMode is RealTime, and File must then name it. So Properties{File:
// "t.hst"} and Properties{FileMode: RealTime} are complete; Validate
// rejects the zero Properties for want of a file.
type Properties struct {
	// File is the trace file: required, unless FileMode is RealTime (when
	// it must be empty); with NewFile it holds one %d. The file is made
	// new, mode 0600, and takes the name only once the session has
	// started; a file of the caller's at that path is replaced.
	File string `json:"file,omitempty"`
	// FileMode is how the trace is written; the zero value is Sequential.
	FileMode LogFileMode `json:"file_mode"`
	// MaxFileSize is the largest trace file, 0 (unlimited) or at least
	// tracefile.MinMaxSize (64 KiB); Circular and NewFile need it.
	MaxFileSize Size `json:"max_file_size"`
	// Overwrite lets the session replace a File that is a symbolic link
	// (the link is replaced, never followed) or a file of another user;
	// without it Start and Launch refuse them with ErrAccessDenied.
	Overwrite bool `json:"overwrite,omitempty"`
	// BufferSize is the size of one buffer, MinBufferSize to MaxBufferSize;
	// 0 means DefaultBufferSize.
	BufferSize Size `json:"buffer_size"`
	// Buffers is the number of buffers; 0 means DefaultBuffers. The eBPF
	// provider's kernel ring buffer holds Buffers buffers; the preload
	// provider gives each traced thread a ring of Buffers buffers. Both
	// round the ring up to a power of two bytes, and commit its pages as
	// they are first written.
	Buffers int `json:"buffers"`
	// FlushInterval bounds how long a captured event may wait before it
	// reaches the file and the hooks; 0 means DefaultFlushInterval.
	FlushInterval time.Duration `json:"flush_interval_ns"`
	// Families are the allocation families traced; 0 means
	// event.FamilyHeap.
	Families event.Family `json:"families"`
	// StackEvents are the event kinds that carry a call stack; 0 means
	// DefaultStacksFor(Families), event.NoStacks none. Update changes them
	// on a running session.
	StackEvents event.KindSet `json:"stack_events"`
	// Provider captures the events. Start defaults to ProviderEBPF (it
	// attaches to running processes); with ProviderPreload, Start injects
	// the interposer into them. Launch defaults to ProviderPreload.
	Provider Provider `json:"provider,omitempty"`
	// Mode is Stream (the zero value) or Aggregate (eBPF only).
	Mode CaptureMode `json:"mode"`
	// OnFull is the policy when the buffers are full: the preload provider
	// blocks (its default) or drops; the eBPF provider drops and counts,
	// and rejects Block with ErrInvalidFlags.
	OnFull OnFull `json:"on_full"`
	// Unwind is the stack walker (both providers); the zero value is
	// FramePointers.
	Unwind Unwind `json:"unwind"`
	// MaxFrames is the deepest stack recorded, at most MaxFrames; 0 means
	// MaxFrames.
	MaxFrames int `json:"max_frames"`
	// NoFollowFork keeps the eBPF provider to the processes it is given,
	// followed across exec as one image: the processes they fork are not
	// traced. By default they are, each from its first instruction, and an
	// exec starts a new image of the process. (The preload provider always
	// follows children.)
	NoFollowFork bool `json:"no_follow_fork,omitempty"`
	// Hooks, when set, are installed before tracing begins, so that they
	// see the first event. SetHooks replaces them later.
	Hooks Hooks `json:"-"`
	// TimeResolution is the precision of event times in the trace file; 0
	// means 10µs, 1ns keeps exact times. The order of events is exact
	// whatever it is; coarser times make smaller files (see
	// tracefile/FORMAT.md).
	TimeResolution time.Duration `json:"time_resolution_ns"`
	// Sample turns on sampling: one allocation per Sample bytes allocated
	// is recorded on average (an allocation of S bytes with probability
	// 1 - exp(-S/Sample)), with the free and realloc of each block
	// recorded, and reports scale what they show back up. 0 records every
	// event. Both providers (the eBPF provider samples in BPF, in stream
	// and aggregate modes); it excludes what needs every event (see
	// Validate). The hooks see only the sampled events.
	Sample Size `json:"sample,omitempty"`
	// NoCensus skips the census Start and Update take of each process's
	// heap once its probes are in (see census.go): without it, the blocks
	// live before the attach are unknown and their frees unmatched.
	NoCensus bool `json:"no_census,omitempty"`
	// CensusScan also scans the heap at the census for reachability
	// (event.Verdict) and who holds each kind of block, in the same stop:
	// a longer pause, as long as copying the live heap takes.
	CensusScan bool `json:"census_scan,omitempty"`
	// MaxStacks is how many distinct stacks the eBPF provider's kernel
	// side remembers (0: 1,048,576), a few dozen bytes of kernel memory
	// each, taken as stacks come; the frames of each are kept only until
	// heapscope has read them. An event whose stack finds no room goes
	// without it, counted (Stats.StacksLost).
	MaxStacks int `json:"max_stacks,omitempty"`
	// UnwindTablesSize is the most kernel memory the eBPF provider's
	// unwind tables take (0: 64 MiB, at most 1 GiB), 2 MiB at a time as
	// the files traced processes map need it, given back when no traced
	// process maps a file any more. The processes of one user take at
	// most half of it. Stacks through a file whose table finds no room
	// are cut, counted (Stats.StacksCutNoTable).
	UnwindTablesSize Size `json:"unwind_tables_size,omitempty"`
	// LeakCheck is when the session checks its processes for leaks (see
	// LeakCheck and Session.Leaks): the zero value checks a program
	// Launch starts at its exit, unless the session samples.
	LeakCheck LeakCheck `json:"leak_check,omitempty"`
	// LeakRules are whose rules its leak checks classify by: Memcheck's
	// (the zero value) or LeakSanitizer's (event.RulesLSan).
	LeakRules LeakRules `json:"leak_rules"`
}

// withDefaults returns p with its zero fields filled in, for provider: the
// one place where defaults are applied.
func (p Properties) withDefaults(provider Provider) Properties {
	if p.BufferSize == 0 {
		p.BufferSize = DefaultBufferSize
	}
	if p.Buffers == 0 {
		p.Buffers = DefaultBuffers
	}
	if p.FlushInterval == 0 {
		p.FlushInterval = DefaultFlushInterval
	}
	if p.Families == 0 {
		p.Families = event.FamilyHeap
	}
	if p.StackEvents == 0 {
		p.StackEvents = DefaultStacksFor(p.Families)
	}
	if p.Provider == "" {
		p.Provider = provider
	}
	if p.OnFull == OnFullDefault {
		p.OnFull = Block
		if p.Provider == ProviderEBPF {
			p.OnFull = Drop
		}
	}
	if p.MaxFrames == 0 {
		p.MaxFrames = MaxFrames
	}
	if p.TimeResolution == 0 {
		p.TimeResolution = tracefile.DefaultTimeResolution
	}
	if p.MaxStacks == 0 {
		p.MaxStacks = DefaultMaxStacks
	}
	if p.UnwindTablesSize == 0 {
		p.UnwindTablesSize = DefaultUnwindTablesSize
	}
	return p
}

// ringBytes is the size of the eBPF provider's ring buffer: Buffers
// buffers, rounded up to a power of two as the kernel requires.
func (p Properties) ringBytes() int {
	n := int(p.BufferSize) * p.Buffers
	size := 4096
	for size < n {
		size <<= 1
	}
	return size
}

// text renders p as key/value pairs for the trace file's header, each
// named as its field is in JSON (durations without the _ns of their JSON
// numbers: here they are written "1s"). Traces of earlier versions named
// some as ETW does: log_file_mode, log_file_name, flush_timer and
// enable_flags.
func (p Properties) text() [][2]string {
	return [][2]string{
		{"buffer_size", p.BufferSize.String()},
		{"buffers", strconv.Itoa(p.Buffers)},
		{"max_file_size", p.MaxFileSize.String()},
		{"file_mode", p.FileMode.String()},
		{"file", p.File},
		{"flush_interval", p.FlushInterval.String()},
		{"families", p.Families.String()},
		{"stack_events", p.StackEvents.String()},
		{"provider", string(p.Provider)},
		{"mode", p.Mode.String()},
		{"on_full", p.OnFull.String()},
		{"unwind", p.Unwind.String()},
		{"max_frames", strconv.Itoa(p.MaxFrames)},
		{"time_resolution", p.TimeResolution.String()},
		{"sample", strconv.FormatInt(int64(p.Sample), 10)},
		{"max_stacks", strconv.Itoa(p.MaxStacks)},
		{"unwind_tables_size", p.UnwindTablesSize.String()},
	}
}
