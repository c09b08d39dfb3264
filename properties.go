package heapscope

import (
	"strconv"
	"strings"
	"time"

	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/export/push"
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

// Source is what the eBPF provider probes in a traced process.
type Source string

// The sources.
const (
	// SourceUprobes probes the allocator's functions (the default).
	SourceUprobes Source = "uprobes"
	// SourceUSDT traces through OpenTelemetry's otel_memory USDT probes,
	// alloc(ptr, size, weight) and free(ptr), which a target that samples
	// its own allocations fires: the target's sampler decides, each
	// allocation counts the bytes its probe weighed, and the calls it does
	// not sample cost nothing. A process without the probes is refused.
	SourceUSDT Source = "usdt"
	// SourceAuto traces each process through its otel_memory probes when
	// it has them, through its allocator's functions otherwise.
	SourceAuto Source = "auto"
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
	// Export are where the session sends interval heap profiles, each
	// FORMAT=URL: otlp=http://HOST:4318 (OTLP profiles over HTTP/protobuf,
	// to /v1development/profiles unless the URL has a path),
	// otlp=grpc://HOST:4317 (over gRPC), pprof=http://HOST:4040 (pprof to
	// a Pyroscope-compatible /ingest); see package export/push. Every
	// ExportInterval, and once more at the end, the session sends per
	// process what each stack allocated in the interval and what it holds
	// at its end, from totals it keeps for the whole session, O(stacks) per
	// interval whatever the events; estimates when it samples. Exports are
	// queued with a bound and dropped, counted, when a target cannot keep
	// up (Status.Exports): they never slow the tracing. A session that
	// exports needs no trace file (FileMode RealTime).
	Export []string `json:"export,omitempty"`
	// ExportInterval is the length of an exported interval, at least
	// MinExportInterval; 0 means DefaultExportInterval.
	ExportInterval time.Duration `json:"export_interval_ns,omitempty"`
	// ExportAddresses sends the frames as addresses and mappings with
	// their build-ids only, for backends that symbolize by build-id: the
	// session reads no symbols (about half an export's CPU).
	ExportAddresses bool `json:"export_addresses,omitempty"`
	// EmitUSDT makes the preload provider's interposer fire
	// OpenTelemetry's otel_memory USDT probes, alloc(ptr, size, weight) and
	// free(ptr), for the blocks it samples, so that a profiler that reads
	// them (the OpenTelemetry eBPF profiler) sees the traced processes'
	// heaps too. weight is the bytes a sample stands for, S/(1-e^(-S/R)).
	// The probes fire only while a tracer has raised their semaphores.
	// Needs Sample, and the preload provider.
	EmitUSDT bool `json:"emit_usdt,omitempty"`
	// Source is what the eBPF provider probes in each process (""
	// means SourceUprobes). SourceUSDT and SourceAuto need stream mode and
	// Sample: the estimates' rate (that of the targets' samplers, whose
	// weights each event carries; with SourceAuto, heapscope samples the
	// processes it probes through their functions at it).
	Source Source `json:"source,omitempty"`
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
	if len(p.Export) > 0 && p.ExportInterval == 0 {
		p.ExportInterval = DefaultExportInterval
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
	kv := [][2]string{
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
	if len(p.Export) > 0 {
		// Passwords in the URLs stay out of the file.
		var targets []string
		for _, e := range p.Export {
			if t, err := push.ParseTarget(e); err == nil {
				targets = append(targets, redactTarget(t))
			}
		}
		kv = append(kv, [2]string{"export", strings.Join(targets, " ")},
			[2]string{"export_interval", p.ExportInterval.String()})
	}
	if p.EmitUSDT {
		kv = append(kv, [2]string{"emit_usdt", "true"})
	}
	if p.Source != "" && p.Source != SourceUprobes {
		kv = append(kv, [2]string{"source", string(p.Source)})
	}
	return kv
}
