package heapscope

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/internal/errs"
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
const MaxFrames = 127

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

// The defaults and bounds of Properties' sizes, for programs that check
// their own input against them (heapscope's flags).
const (
	MinBufferSize         = 4    // KB
	MaxBufferSize         = 1024 // KB
	DefaultBufferSize     = 64   // KB
	DefaultMaximumBuffers = 64
	DefaultMinimumBuffers = 4
	DefaultFlushTimer     = time.Second
	// MaxBufferBytes bounds BufferSize × MaximumBuffers: the memory a
	// session may ask for its buffers.
	MaxBufferBytes = maxRingBytes
)

// Properties configure a session, with the meanings of ETW's
// EVENT_TRACE_PROPERTIES. The zero value is valid: a sequential trace file
// with default buffers, flushed every second, of the malloc heap families.
type Properties struct {
	// BufferSize is the size of one buffer in KB, 4 to 1024; 0 means 64.
	BufferSize int
	// MaximumBuffers is the number of buffers; 0 means 64. The eBPF
	// provider's kernel ring buffer holds MaximumBuffers buffers; the preload
	// provider gives each traced thread a ring of MaximumBuffers buffers.
	// Both round the ring up to a power of two bytes.
	MaximumBuffers int
	// MinimumBuffers is the number of buffers ETW allocates up front; 0
	// means 4. heapscope's rings are committed page by page as they fill,
	// so it only has to be at most MaximumBuffers.
	MinimumBuffers int
	// MaximumFileSize is the largest trace file in MB; 0 means unlimited.
	// Circular and NewFile need it.
	MaximumFileSize int64
	// LogFileMode is how the trace is written.
	LogFileMode LogFileMode
	// LogFileName is the trace file. It must be empty with RealTime and hold
	// one %d with NewFile. The file is made new, mode 0600, and takes the
	// name only once the session has started; a file of the caller's at
	// that path is replaced.
	LogFileName string
	// Overwrite lets the session replace a LogFileName that is a symbolic
	// link (the link is replaced, never followed) or a file of another
	// user; without it Start and Launch refuse them with ErrAccessDenied.
	Overwrite bool
	// FlushTimer bounds how long a captured event may wait before it reaches
	// the file and the hooks; 0 means one second.
	FlushTimer time.Duration
	// EnableFlags are the allocation families traced; 0 means event.FamilyHeap.
	EnableFlags event.Family
	// Provider captures the events. Start defaults to ProviderEBPF (it
	// attaches to running processes); Launch defaults to ProviderPreload.
	Provider Provider
	// Mode is Stream or Aggregate (eBPF only).
	Mode CaptureMode
	// OnFull is the policy when the buffers are full: the preload provider
	// blocks (the default) or drops; the eBPF provider drops and counts, and
	// rejects Block with ErrInvalidFlags.
	OnFull OnFull
	// Unwind is the stack walker (both providers).
	Unwind Unwind
	// MaxFrames is the deepest stack recorded, at most MaxFrames; 0 means
	// MaxFrames.
	MaxFrames int
	// NoFollowFork keeps the eBPF provider to the processes it is given,
	// followed across exec as one image: the processes they fork are not
	// traced. By default they are, each from its first instruction, and an
	// exec starts a new image of the process. (The preload provider always
	// follows children.)
	NoFollowFork bool
	// Hooks, when set, are installed before tracing begins, so that they see
	// the first event (as ETW's EventRecordCallback is given with the
	// session's log file). SetHooks replaces them later.
	Hooks Hooks `json:"-"`
	// TimeResolution is the precision of event times in the trace file
	// (ETW's clock resolution); 0 means 10µs, 1ns keeps exact times. The
	// order of events is exact whatever it is; coarser times make smaller
	// files (see tracefile/FORMAT.md).
	TimeResolution time.Duration
	// Sample, in bytes, turns on sampling: one allocation per Sample bytes
	// allocated is recorded on average (an allocation of S bytes with
	// probability 1 - exp(-S/Sample)), with the free and realloc of each
	// block recorded, and reports scale what they show back up. 0 records
	// every event. Both providers (the eBPF provider samples in BPF);
	// stream mode only; it excludes what needs every event (see
	// Validate). The hooks see only the sampled events.
	Sample int64
}

// withDefaults returns p with its zero fields filled in, for provider.
func (p Properties) withDefaults(provider Provider) Properties {
	if p.BufferSize == 0 {
		p.BufferSize = DefaultBufferSize
	}
	if p.MinimumBuffers == 0 {
		p.MinimumBuffers = DefaultMinimumBuffers
	}
	if p.MaximumBuffers == 0 {
		p.MaximumBuffers = max(DefaultMaximumBuffers, p.MinimumBuffers)
	}
	if p.FlushTimer == 0 {
		p.FlushTimer = DefaultFlushTimer
	}
	if p.EnableFlags == 0 {
		p.EnableFlags = event.FamilyHeap
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
	return p
}

// maxRingBytes bounds the memory a session may ask for its buffers.
const maxRingBytes = 4 << 30

// Validate reports the first invalid value or combination in p, wrapping
// ErrInvalidFlags (or ErrOutOfMemory for buffers that could never be had).
// It applies the exclusions ETW enforces, and heapscope's own.
func (p Properties) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf(format+": %w", append(args, errs.ErrInvalidFlags)...)
	}
	switch {
	case p.BufferSize != 0 && (p.BufferSize < 4 || p.BufferSize > 1024):
		return bad("BufferSize %d KB: must be 4 to 1024", p.BufferSize)
	case p.MinimumBuffers < 0 || p.MaximumBuffers < 0:
		return bad("negative buffer count")
	case p.MaximumBuffers != 0 && p.MinimumBuffers > p.MaximumBuffers:
		return bad("MinimumBuffers %d exceeds MaximumBuffers %d", p.MinimumBuffers, p.MaximumBuffers)
	case p.MaximumFileSize < 0:
		return bad("negative MaximumFileSize")
	case p.FlushTimer < 0:
		return bad("negative FlushTimer")
	case p.TimeResolution < 0 || p.TimeResolution > time.Second:
		return bad("TimeResolution %v: must be 1ns to 1s", p.TimeResolution)
	case p.MaxFrames < 0 || p.MaxFrames > MaxFrames:
		return bad("MaxFrames %d: must be 0 to %d", p.MaxFrames, MaxFrames)
	case p.EnableFlags&^event.FamilyAll != 0:
		return bad("unknown EnableFlags bits %#x", uint32(p.EnableFlags&^event.FamilyAll))
	}
	switch p.LogFileMode {
	case Sequential:
		if p.LogFileName == "" {
			return bad("sequential mode needs a LogFileName")
		}
	case Circular:
		if p.LogFileName == "" || p.MaximumFileSize == 0 {
			return bad("circular mode needs a LogFileName and a MaximumFileSize")
		}
	case NewFile:
		if p.MaximumFileSize == 0 {
			return bad("newfile mode needs a MaximumFileSize")
		}
		if strings.Count(p.LogFileName, "%d") != 1 || strings.Count(p.LogFileName, "%") != 1 {
			return bad("newfile mode needs exactly one %%d (and no other %%) in LogFileName %q", p.LogFileName)
		}
	case RealTime:
		if p.LogFileName != "" {
			return bad("real-time mode writes no file, but LogFileName is %q", p.LogFileName)
		}
		if p.MaximumFileSize != 0 {
			return bad("real-time mode writes no file, but MaximumFileSize is set")
		}
	default:
		return bad("unknown LogFileMode %d", p.LogFileMode)
	}
	if p.LogFileMode != NewFile && strings.Contains(p.LogFileName, "%") {
		return bad("%% in LogFileName %q is only for newfile mode", p.LogFileName)
	}
	switch p.Provider {
	case "", ProviderEBPF, ProviderPreload:
	default:
		return bad("unknown provider %q (want preload or ebpf)", p.Provider)
	}
	switch p.Mode {
	case Stream:
	case Aggregate:
		if p.Provider != ProviderEBPF && p.Provider != "" {
			return bad("aggregate mode needs the ebpf provider")
		}
		if p.EnableFlags&event.FamilyMmap != 0 {
			return bad("aggregate mode does not trace mmap")
		}
	default:
		return bad("unknown capture mode %d", p.Mode)
	}
	if p.OnFull > Drop {
		return bad("unknown OnFull policy %d", p.OnFull)
	}
	if p.OnFull == Block && p.Provider == ProviderEBPF {
		// A uprobe cannot wait for room: "block" would drop all the same.
		return bad("OnFull block with the ebpf provider: it cannot make the traced thread wait; it drops and counts (OnFull drop)")
	}
	if p.Unwind > Tables {
		return bad("unknown unwinder %d", p.Unwind)
	}
	if err := p.validateSample(); err != nil {
		return err
	}
	d := p.withDefaults(ProviderEBPF)
	if int64(d.BufferSize)*1024*int64(d.MaximumBuffers) > maxRingBytes {
		return fmt.Errorf("%d buffers of %d KB exceed %d GiB: %w", d.MaximumBuffers, d.BufferSize, maxRingBytes>>30, errs.ErrOutOfMemory)
	}
	return nil
}

// ringBytes is the size of the eBPF provider's ring buffer: MaximumBuffers
// buffers, rounded up to a power of two as the kernel requires.
func (p Properties) ringBytes() int {
	n := p.BufferSize * 1024 * p.MaximumBuffers
	size := 4096
	for size < n {
		size <<= 1
	}
	return size
}

// text renders p as key/value pairs for the trace file's header and queries.
func (p Properties) text() [][2]string {
	return [][2]string{
		{"buffer_size_kb", strconv.Itoa(p.BufferSize)},
		{"minimum_buffers", strconv.Itoa(p.MinimumBuffers)},
		{"maximum_buffers", strconv.Itoa(p.MaximumBuffers)},
		{"maximum_file_size_mb", strconv.FormatInt(p.MaximumFileSize, 10)},
		{"log_file_mode", p.LogFileMode.String()},
		{"log_file_name", p.LogFileName},
		{"flush_timer", p.FlushTimer.String()},
		{"enable_flags", p.EnableFlags.String()},
		{"provider", string(p.Provider)},
		{"mode", p.Mode.String()},
		{"on_full", p.OnFull.String()},
		{"unwind", p.Unwind.String()},
		{"max_frames", strconv.Itoa(p.MaxFrames)},
		{"time_resolution", p.TimeResolution.String()},
		{"sample", strconv.FormatInt(p.Sample, 10)},
	}
}
