// Package export builds interval heap profiles of traced processes and
// writes them for continuous-profiling pipelines: as OTLP profiles (the
// OpenTelemetry v1development profiles signal, through the Collector's pdata
// library) and as pprof profiles (for Pyroscope's /ingest, Parca, speedscope
// and the Collector's pprof receiver).
//
// An Interval is the data: per traced process, per stack, what the stack
// allocated during the interval and what it held live at its end, with the
// process's mappings and metadata and the host's. It is what a session's
// per-stack totals map onto, and what a trace file's analysis (FromProfile)
// gives for a whole trace or a window. Building either output costs
// O(stacks in the interval): nothing here looks at events.
//
// Each process is one OTLP resource, with the resource attributes that
// OpenTelemetry's semantic conventions define for processes and hosts, and
// four profiles sharing one dictionary: alloc_objects/count and
// alloc_space/bytes for the interval, inuse_objects/count and
// inuse_space/bytes at its end. In pprof, the same four are the sample
// types of one profile per process, as in a Go heap profile. Estimates (a
// sampled session) and lost events are attributes of every profile (pprof:
// comments and the Period), never left out.
package export

import "time"

// Interval is the heap of the traced processes over [Start, End).
type Interval struct {
	Start, End time.Time

	// Host describes the machine the processes ran on.
	Host Host

	// SampleRate is the session's sampling rate in bytes (the mean bytes
	// between samples), 0 when every allocation was recorded. When it is
	// set the Stacks' values are estimates, already scaled up (see
	// analyze.SampleWeights, or an otel_memory probe's weight), and the
	// profiles say so.
	SampleRate int64

	// Lost is the count of events the session lost (buffers full, maps
	// full) over [LostFrom, End), and StacksLost the events delivered
	// without their stack. LostFrom is Start when the counts are the
	// interval's own; a trace window knows only its session's totals and
	// sets it to the session's start.
	Lost, StacksLost uint64
	LostFrom         time.Time

	Processes []Process
}

// Host is the machine's identity, as OpenTelemetry's host.* and os.*
// attributes name it.
type Host struct {
	Name string // host.name
	ID   string // host.id: /etc/machine-id; "" to leave it out
	Arch string // host.arch: "amd64", "arm64"
}

// Process is one traced process in an interval.
type Process struct {
	PID, PPID uint32
	Exe       string   // path of the executable
	Cmdline   []string // argv
	// Service is the OTLP service.name; "" gives
	// "unknown_service:" + the executable's base name, as OpenTelemetry's
	// SDKs name a service nobody named.
	Service string

	// Mappings are the process's executable mappings, in any order; the
	// frames' addresses fall in them.
	Mappings []Mapping

	// Stacks are the stacks that allocated in the interval or held memory
	// at its end; others may be left out (and are, by the writers).
	Stacks []Stack
}

// Mapping is an executable mapping of a file.
type Mapping struct {
	Start, Limit uint64 // [Start, Limit) in the process
	Offset       uint64 // file offset of Start
	File         string
	BuildID      string // hex; "" when the file has none
}

// Stack is what one stack of a process did in the interval.
type Stack struct {
	// ID identifies the stack within its process (the provider's stack
	// ID): Deltas matches a stack's totals across intervals by it.
	ID uint64

	// Frames are return addresses, innermost first, as the provider
	// recorded them; empty for allocations that carried no stack.
	Frames []uint64

	// Allocs and AllocBytes are the allocation calls that returned a block
	// during the interval (reallocations included) and their bytes.
	Allocs, AllocBytes uint64
	// LiveObjects and LiveBytes are what the stack's allocations, of this
	// interval or earlier ones, still held at its end.
	LiveObjects, LiveBytes uint64
}

// Duration is the interval's length.
func (iv *Interval) Duration() time.Duration { return iv.End.Sub(iv.Start) }
