package heapscope

import (
	"fmt"
	"strings"
	"time"

	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/export/push"
	"github.com/heapscope/heapscope/internal/errs"
	"github.com/heapscope/heapscope/tracefile"
)

// A PropertyError is an invalid property of a session: which field, its
// value, and what it may be (a range, or what it must be with another
// field's value). Validate returns one; it wraps ErrInvalidFlags, or
// ErrOutOfMemory for buffers that could never be had.
type PropertyError struct {
	Field string // the Properties field: "BufferSize"
	Value any    // its value, of the field's type
	// Min and Max bound the valid values, of the field's type, when they
	// are a range; nil leaves that side open.
	Min, Max any
	// Zero, when 0 is valid outside the range, says what it means
	// ("unlimited", "the default").
	Zero string
	// Want says what the value must be when it is not a range ("more than
	// 0", the names of an enumeration).
	Want string
	// With is the field whose value, WithValue, makes Value invalid: with
	// a range (Buffers, With BufferSize), the range depends on it; with a
	// Reason, the two cannot go together.
	With      string
	WithValue any
	// Reason says why Value cannot go with WithValue, for a combination;
	// Value is nil when no value of the field could.
	Reason string
	Err    error // ErrInvalidFlags or ErrOutOfMemory
}

func (e *PropertyError) Error() string {
	return e.Describe(func(field string) string { return field }, func(_ string, v any) string {
		if s, ok := v.(string); ok {
			return fmt.Sprintf("%q", s)
		}
		return fmt.Sprint(v)
	})
}

func (e *PropertyError) Unwrap() error { return e.Err }

// Describe writes the error with name naming each field and value writing
// each value (of the field's type) of a field, as a program that sets the
// properties from its own input calls them: heapscope's flags, in their
// units. Error is Describe with the Go names and fmt's %v.
func (e *PropertyError) Describe(name func(field string) string, value func(field string, v any) string) string {
	var b strings.Builder
	b.WriteString(name(e.Field))
	if e.Reason != "" {
		// "OnFull block with Provider ebpf: ...", or, when any value of
		// the field would be wrong, "Sample: Families mmap: ...".
		switch {
		case e.Value != nil && e.With != "":
			fmt.Fprintf(&b, " %s with %s %s", value(e.Field, e.Value), name(e.With), value(e.With, e.WithValue))
		case e.Value != nil:
			fmt.Fprintf(&b, " %s", value(e.Field, e.Value))
		case e.With != "":
			fmt.Fprintf(&b, ": %s %s", name(e.With), value(e.With, e.WithValue))
		}
		fmt.Fprintf(&b, ": %s", e.Reason)
		return b.String()
	}
	fmt.Fprintf(&b, " %s: must be ", value(e.Field, e.Value))
	if e.Zero != "" {
		fmt.Fprintf(&b, "0 (%s) or ", e.Zero)
	}
	switch {
	case e.Want != "":
		b.WriteString(e.Want)
	case e.Min != nil && e.Max != nil:
		fmt.Fprintf(&b, "%s to %s", value(e.Field, e.Min), value(e.Field, e.Max))
	case e.Min != nil:
		fmt.Fprintf(&b, "at least %s", value(e.Field, e.Min))
	case e.Max != nil:
		fmt.Fprintf(&b, "at most %s", value(e.Field, e.Max))
	}
	if e.With != "" {
		fmt.Fprintf(&b, " (with %s %s)", name(e.With), value(e.With, e.WithValue))
	}
	return b.String()
}

// Validate reports the first invalid value or combination in p as a
// *PropertyError. It applies ETW's exclusions (see the package doc), and
// heapscope's own. The zero Properties is invalid: it writes a
// file and names none (see Properties).
func (p Properties) Validate() error { return p.validate(false) }

// ValidateGiven is Validate for properties whose every field was given,
// none left to its default (heapscope's flags): a 0 where Validate would
// take the default is invalid too (BufferSize, Buffers, FlushInterval,
// MaxFrames, TimeResolution).
func (p Properties) ValidateGiven() error { return p.validate(true) }

func (p Properties) validate(given bool) error {
	// dflt is what 0 means for a field whose 0 is its default, when it may
	// be left to it.
	dflt := "the default"
	if given {
		dflt = ""
	}
	bs := p.BufferSize
	if bs == 0 && !given {
		bs = DefaultBufferSize
	}
	bad := func(e PropertyError) error {
		if e.Err == nil {
			e.Err = errs.ErrInvalidFlags
		}
		return &e
	}
	switch {
	case (given || p.BufferSize != 0) && (p.BufferSize < MinBufferSize || p.BufferSize > MaxBufferSize):
		return bad(PropertyError{Field: "BufferSize", Value: p.BufferSize, Min: MinBufferSize, Max: MaxBufferSize, Zero: dflt})
	case p.Buffers < 0 || given && p.Buffers == 0:
		return bad(PropertyError{Field: "Buffers", Value: p.Buffers, Min: 1, Max: int(MaxBufferBytes / bs), Zero: dflt,
			With: "BufferSize", WithValue: bs})
	case p.MaxFileSize < 0 || p.MaxFileSize > 0 && p.MaxFileSize < tracefile.MinMaxSize:
		return bad(PropertyError{Field: "MaxFileSize", Value: p.MaxFileSize, Min: Size(tracefile.MinMaxSize), Zero: "unlimited"})
	case p.FlushInterval < 0 || given && p.FlushInterval == 0:
		want := "more than 0"
		if !given {
			want = "more"
		}
		return bad(PropertyError{Field: "FlushInterval", Value: p.FlushInterval, Zero: dflt, Want: want})
	case p.TimeResolution < 0 || p.TimeResolution > time.Second || given && p.TimeResolution == 0:
		return bad(PropertyError{Field: "TimeResolution", Value: p.TimeResolution, Min: time.Nanosecond, Max: time.Second, Zero: dflt})
	case p.MaxFrames < 0 || p.MaxFrames > MaxFrames || given && p.MaxFrames == 0:
		return bad(PropertyError{Field: "MaxFrames", Value: p.MaxFrames, Min: 1, Max: MaxFrames, Zero: dflt})
	case p.Families&^event.FamilyAll != 0:
		return bad(PropertyError{Field: "Families", Value: bitSet(p.Families), Want: "a set of " + event.FamilyAll.String()})
	case event.CheckStacks(p.StackEvents) != nil:
		return bad(PropertyError{Field: "StackEvents", Value: bitSet(p.StackEvents), Want: "a set of " + event.AllKinds.String() + ", or none"})
	}
	mode := func(reason string) error {
		return bad(PropertyError{Field: "File", Value: p.File, With: "FileMode", WithValue: p.FileMode, Reason: reason})
	}
	noFile := bad(PropertyError{Field: "File", With: "FileMode", WithValue: p.FileMode, Reason: "a trace file is needed"})
	switch p.FileMode {
	case Sequential:
		if p.File == "" {
			return noFile
		}
	case Circular:
		if p.File == "" {
			return noFile
		}
		if p.MaxFileSize == 0 {
			return bad(PropertyError{Field: "MaxFileSize", Value: p.MaxFileSize, With: "FileMode", WithValue: p.FileMode,
				Reason: "a circular file needs a maximum size"})
		}
	case NewFile:
		if p.MaxFileSize == 0 {
			return bad(PropertyError{Field: "MaxFileSize", Value: p.MaxFileSize, With: "FileMode", WithValue: p.FileMode,
				Reason: "a new file is started at the maximum size, which is needed"})
		}
		if strings.Count(p.File, "%d") != 1 || strings.Count(p.File, "%") != 1 {
			return mode("the name needs exactly one %d, and no other %")
		}
	case RealTime:
		if p.File != "" {
			return mode("real-time mode writes no file")
		}
		if p.MaxFileSize != 0 {
			return bad(PropertyError{Field: "MaxFileSize", Value: p.MaxFileSize, With: "FileMode", WithValue: p.FileMode,
				Reason: "real-time mode writes no file"})
		}
	default:
		return bad(PropertyError{Field: "FileMode", Value: p.FileMode, Want: "sequential, circular, newfile or realtime"})
	}
	if p.FileMode != NewFile && strings.Contains(p.File, "%") {
		return mode("% in the name is only for newfile mode")
	}
	switch p.Provider {
	case "", ProviderEBPF, ProviderPreload:
	default:
		return bad(PropertyError{Field: "Provider", Value: p.Provider, Want: "preload or ebpf"})
	}
	switch p.Mode {
	case Stream:
	case Aggregate:
		if p.Provider != ProviderEBPF && p.Provider != "" {
			return bad(PropertyError{Field: "Mode", Value: p.Mode, With: "Provider", WithValue: p.Provider,
				Reason: "aggregate mode needs the ebpf provider"})
		}
		if p.Families&event.FamilyMmap != 0 {
			return bad(PropertyError{Field: "Families", With: "Mode", WithValue: p.Mode,
				Reason: "aggregate mode does not trace mmap"})
		}
	default:
		return bad(PropertyError{Field: "Mode", Value: p.Mode, Want: "stream or aggregate"})
	}
	if p.OnFull > Drop {
		return bad(PropertyError{Field: "OnFull", Value: p.OnFull, Want: "default, block or drop"})
	}
	if p.OnFull == Block && p.Provider == ProviderEBPF {
		// A uprobe cannot wait for room: "block" would drop all the same.
		return bad(PropertyError{Field: "OnFull", Value: p.OnFull, With: "Provider", WithValue: p.Provider,
			Reason: "it cannot make the traced thread wait; it drops and counts (drop)"})
	}
	if p.Unwind > Tables {
		return bad(PropertyError{Field: "Unwind", Value: p.Unwind, Want: "fp, dwarf or tables"})
	}
	if p.MaxStacks < 0 || p.MaxStacks > MaxMaxStacks {
		return bad(PropertyError{Field: "MaxStacks", Value: p.MaxStacks, Min: 1, Max: MaxMaxStacks, Zero: dflt})
	}
	if p.UnwindTablesSize < 0 || p.UnwindTablesSize != 0 && p.UnwindTablesSize < 2*MiB || p.UnwindTablesSize > MaxUnwindTablesSize {
		return bad(PropertyError{Field: "UnwindTablesSize", Value: p.UnwindTablesSize, Min: 2 * MiB, Max: Size(MaxUnwindTablesSize), Zero: dflt})
	}
	if p.CensusScan && p.NoCensus {
		return bad(PropertyError{Field: "CensusScan", Value: p.CensusScan, With: "NoCensus", WithValue: p.NoCensus,
			Reason: "it scans at the census, which NoCensus skips"})
	}
	switch {
	case p.Sample < 0 || p.Sample > MaxSample:
		return bad(PropertyError{Field: "Sample", Value: p.Sample, Min: Size(1), Max: MaxSample, Zero: "every event"})
	case p.Sample > 0 && p.Families&event.FamilyMmap != 0:
		// A mapping is recorded with its munmap; a sampled munmap would need
		// the mappings kept in the process, which the interposer does not.
		return bad(PropertyError{Field: "Sample", With: "Families", WithValue: event.FamilyMmap,
			Reason: "mmap and munmap are not sampled; trace them without sampling"})
	}
	for _, e := range p.Export {
		if _, err := push.ParseTarget(e); err != nil {
			return bad(PropertyError{Field: "Export", Value: e,
				Reason: strings.TrimPrefix(err.Error(), fmt.Sprintf("export target %q: ", e))})
		}
	}
	switch {
	case p.ExportInterval < 0 || p.ExportInterval > 0 && p.ExportInterval < MinExportInterval ||
		given && len(p.Export) > 0 && p.ExportInterval == 0:
		return bad(PropertyError{Field: "ExportInterval", Value: p.ExportInterval, Min: MinExportInterval, Zero: dflt})
	case p.EmitUSDT && p.Sample == 0:
		return bad(PropertyError{Field: "EmitUSDT", Value: p.EmitUSDT, With: "Sample", WithValue: p.Sample,
			Reason: "the otel_memory probes fire for sampled blocks only"})
	case p.EmitUSDT && p.Provider == ProviderEBPF:
		return bad(PropertyError{Field: "EmitUSDT", Value: p.EmitUSDT, With: "Provider", WithValue: p.Provider,
			Reason: "the probes are fired by the preload provider's interposer, in the process"})
	case p.Source != "" && p.Source != SourceUprobes && p.Source != SourceUSDT && p.Source != SourceAuto:
		return bad(PropertyError{Field: "Source", Value: p.Source, Want: "uprobes, usdt or auto"})
	case (p.Source == SourceUSDT || p.Source == SourceAuto) && p.Provider == ProviderPreload:
		return bad(PropertyError{Field: "Source", Value: p.Source, With: "Provider", WithValue: p.Provider,
			Reason: "the otel_memory probes are read by the ebpf provider"})
	case (p.Source == SourceUSDT || p.Source == SourceAuto) && p.Mode == Aggregate:
		return bad(PropertyError{Field: "Source", Value: p.Source, With: "Mode", WithValue: p.Mode,
			Reason: "the probes' weights are recorded in stream mode only"})
	case (p.Source == SourceUSDT || p.Source == SourceAuto) && p.Sample == 0:
		return bad(PropertyError{Field: "Source", Value: p.Source, With: "Sample", WithValue: p.Sample,
			Reason: "the probes' samples are estimates: give the rate of the targets' samplers (e.g. 512KiB)"})
	case p.ExportAddresses && len(p.Export) == 0:
		return bad(PropertyError{Field: "ExportAddresses", Value: p.ExportAddresses, Reason: "without an export target, nothing is exported"})
	}
	if err := p.validateLeakCheck(); err != nil {
		return err // leaks.go
	}
	if d := p.withDefaults(ProviderEBPF); d.BufferSize*Size(d.Buffers) > MaxBufferBytes {
		return bad(PropertyError{Field: "Buffers", Value: p.Buffers, Min: 1, Max: int(MaxBufferBytes / d.BufferSize),
			With: "BufferSize", WithValue: p.BufferSize, Err: errs.ErrOutOfMemory})
	}
	return nil
}

// bitSet writes a set with unknown bits as its number.
type bitSet uint64

func (b bitSet) String() string { return fmt.Sprintf("%#x", uint64(b)) }
