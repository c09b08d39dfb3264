package main

import (
	"errors"
	"flag"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/heapscope/heapscope"
	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/export"
	"github.com/heapscope/heapscope/tracefile"
)

// sessionFlags are the flags of a session's properties: run's (a launch),
// attach's, and top's, which takes both.
type sessionFlags struct {
	launch, attach bool // the flags of a launch, of an attach are registered
	provider       event.Provider
	unwind         event.Unwind
	onFull         event.OnFull
	noFollowFork   bool
	inject         bool

	name          setString
	output        string
	stacks        event.KindSet
	events        string
	mode          event.CaptureMode
	logMode       event.LogFileMode
	bufferSize    heapscope.Size
	sizeText      map[string]string // the text of each size flag given, by field
	buffers       int
	maxSize       heapscope.Size
	flushInterval time.Duration
	maxFrames     int
	timeRes       time.Duration
	overwrite     bool
	quiet         bool
	sample        heapscope.Size
	maxStacks     int
	unwindSize    heapscope.Size
	export        exportList
	exportEvery   time.Duration
	exportAddrs   bool
	emitUSDT      bool
	source        heapscope.Source
}

// exportList is the repeatable --export flag.
type exportList []string

func (l *exportList) String() string { return strings.Join(*l, " ") }
func (l *exportList) Set(v string) error {
	*l = append(*l, v)
	return nil
}

// The flags of launching a program and of attaching to processes.
const (
	launchFlags = 1 << iota
	attachFlags
)

// register registers the flags of every session, and those of which:
// launchFlags, attachFlags or both.
func (f *sessionFlags) register(fs *flag.FlagSet, which int) {
	f.launch, f.attach = which&launchFlags != 0, which&attachFlags != 0
	f.provider, f.unwind, f.onFull = heapscope.ProviderPreload, heapscope.Tables, heapscope.OnFullDefault
	fs.TextVar(&f.unwind, "unwind", f.unwind, "stack walker `UNWINDER`: "+choices(heapscope.Tables, heapscope.FramePointers, heapscope.DWARF)+". tables (unwind tables built from each file's .eh_frame;\ncomplete stacks on code without frame pointers; with eBPF walked in BPF), fp (frame pointers only:\nfastest, short stacks on code built without them) or dwarf (preload: libunwind at every frame; eBPF: the same as tables)")
	if f.launch {
		fs.TextVar(&f.provider, "provider", f.provider, "`PROVIDER` of a launched program: "+choices(heapscope.ProviderPreload, heapscope.ProviderEBPF)+" (the LD_PRELOAD interposer or uprobes)")
	}
	fs.BoolVar(&f.noFollowFork, "no-follow-fork", false, "eBPF: trace only the given processes (or the launched program), not the children they fork\n(an exec goes on as the same process); no ptrace is used to hold the children unseen")
	fs.TextVar(&f.onFull, "on-full", f.onFull, "`POLICY` when the collector falls behind: "+choices(heapscope.OnFullDefault, heapscope.Block, heapscope.Drop)+". With preload (and attach --inject), block\n(exact, slows the program) or drop (count losses); with ebpf, drop only (a uprobe cannot wait).\n(default: the provider's own, block for preload, drop for ebpf)")
	fs.BoolVar(&f.emitUSDT, "emit-usdt", false, "with --sample (preload, and attach --inject): fire OpenTelemetry's otel_memory USDT probes, alloc(ptr, size, weight)\n"+
		"and free(ptr), for the sampled blocks, so that a profiler that reads them (the OpenTelemetry eBPF\n"+
		"profiler) sees the program's heap too; they fire only while a tracer has raised their semaphores")
	if f.attach {
		f.source = heapscope.SourceUprobes
		fs.Func("source", "`SOURCE` of the events (ebpf): uprobes (the allocator's functions), usdt (OpenTelemetry's\n"+
			"otel_memory USDT probes, which a target that samples its own allocations fires: its sampler decides and\n"+
			"its weights are the estimates; needs --sample, the samplers' rate) or auto (the probes where a process\n"+
			"has them, uprobes elsewhere, sampled at --sample) (default uprobes)", func(s string) error {
			switch v := heapscope.Source(s); v {
			case heapscope.SourceUprobes, heapscope.SourceUSDT, heapscope.SourceAuto:
				f.source = v
				return nil
			}
			return fmt.Errorf("%q: want uprobes, usdt or auto", s)
		})
		fs.BoolVar(&f.inject, "inject", false, "load heapscope's interposer into the processes (ptrace, no gdb) instead of placing uprobes:\nrun's cost per call, run's stack walkers; the children they fork are not traced")
	}
	fs.Var(&f.name, "name", fmt.Sprintf("session `NAME`, unique on the machine, 1 to %d characters (default heapscope-PROGRAM-PID)", heapscope.MaxNameLen))
	fs.StringVar(&f.output, "o", "", "trace file (default heapscope.PROGRAM.PID.hst; needs %d with --log-mode newfile)")
	fs.TextVar(&f.stacks, "stacks", event.KindSet(0), "`KINDS` that carry a call stack: "+choices(event.KindAlloc, event.KindRealloc, event.KindFree, event.KindMmap, event.KindMunmap)+
		"\nas a list, all or none (default: every kind traced that makes memory: alloc,realloc, and mmap when --events has it)")
	fs.StringVar(&f.events, "events", "heap", "allocation families traced: malloc,calloc,realloc,free,aligned,cxx,mmap, heap (all but mmap) or all")
	fs.TextVar(&f.mode, "mode", heapscope.Stream, "`MODE`: "+choices(heapscope.Stream, heapscope.Aggregate)+": every event, or the live set and per-stack totals kept in the kernel (ebpf only)")
	fs.TextVar(&f.logMode, "log-mode", heapscope.Sequential, "how the trace is written, `MODE`: "+choices(heapscope.Sequential, heapscope.Circular, heapscope.NewFile, heapscope.RealTime)+" (no file)")
	f.bufferSize = heapscope.DefaultBufferSize
	f.sizeText = map[string]string{}
	fs.Var(sizeFlag{&f.bufferSize, propertyFlags["BufferSize"].unit, f.sizeText, "BufferSize"}, "buffer-size", fmt.Sprintf("`SIZE` of a buffer, %v to %v (e.g. 64KiB; a bare number is in KiB)", heapscope.MinBufferSize, heapscope.MaxBufferSize))
	fs.IntVar(&f.buffers, "buffers", heapscope.DefaultBuffers, "number of buffers, at least 1 (buffers × buffer size at most 4 GiB)")
	fs.Var(sizeFlag{&f.maxSize, propertyFlags["MaxFileSize"].unit, f.sizeText, "MaxFileSize"}, "max-size", "largest trace file `SIZE` (e.g. 512MiB; a bare number is in MiB; 0: unlimited; needed by circular and newfile)")
	fs.DurationVar(&f.flushInterval, "flush-interval", heapscope.DefaultFlushInterval, "longest time an event waits before it reaches the file, more than 0")
	fs.IntVar(&f.maxFrames, "max-frames", heapscope.MaxFrames, fmt.Sprintf("deepest stack recorded, 1 to %d", heapscope.MaxFrames))
	fs.DurationVar(&f.timeRes, "time-resolution", tracefile.DefaultTimeResolution, "precision of event times in the file, 1ns to 1s; 1ns keeps exact times")
	fs.BoolVar(&f.overwrite, "overwrite", false, "replace an existing output that is a symbolic link (the link, never its target) or another user's file;\nwithout it they are refused. Trace files are made new, mode 0600, once the session has started")
	fs.BoolVar(&f.quiet, "q", false, "print no summary at the end")
	fs.TextVar(&f.sample, "sample", heapscope.Size(0), "record one allocation per `SIZE` bytes allocated on average (e.g. 512KiB, 1MiB, 65536) and\nestimate the rest; 0 records every event. Not with --events mmap")
	fs.IntVar(&f.maxStacks, "max-stacks", heapscope.DefaultMaxStacks, fmt.Sprintf("ebpf: distinct stacks the kernel side remembers, 1 to %d (a few dozen bytes each, taken as they come);\nan event whose stack finds no room is recorded without it, and counted", heapscope.MaxMaxStacks))
	fs.TextVar(&f.unwindSize, "unwind-tables-size", heapscope.Size(heapscope.DefaultUnwindTablesSize), "ebpf: most kernel `SIZE` for unwind tables, up to 1GiB, taken 2MiB at a time as mapped files need it and\ngiven back when no traced process maps them; one user's processes take at most half.\nStacks through a file whose table finds no room are cut, and counted")
	fs.Var(&f.export, "export", "send interval heap profiles to `FORMAT=URL` every --export-interval and at the end (repeat for several):\n"+
		"otlp=http://HOST:4318 (OTLP profiles over HTTP/protobuf to /v1development/profiles), otlp=grpc://HOST:4317,\n"+
		"or pprof=http://HOST:4040 (pprof to Pyroscope's /ingest). OTLP profiles are an alpha signal: encoded with the\n"+
		"pdata of OpenTelemetry Collector "+export.CollectorRelease+" (a collector of another release may not read them; it needs\n"+
		"--feature-gates=service.profilesSupport). Needs no trace file (--log-mode realtime). Exports that a collector\n"+
		"cannot take are queued, retried, then dropped and counted (query, the summary); they never slow the tracing")
	fs.DurationVar(&f.exportEvery, "export-interval", heapscope.DefaultExportInterval, "length of an exported interval, at least 1s")
	fs.BoolVar(&f.exportAddrs, "export-addresses", false, "export frames as addresses and mappings with build-ids only, unsymbolized (for backends that symbolize)")
}

// validate checks what is not a property: the session's name.
func (f *sessionFlags) validate() error {
	switch {
	case f.name.set && f.name.s == "":
		return usagef("--name: must be 1 to %d characters, not empty", heapscope.MaxNameLen)
	case f.name.set && utf8.RuneCountInString(f.name.s) > heapscope.MaxNameLen:
		return usagef("--name: must be 1 to %d characters, not %d", heapscope.MaxNameLen, utf8.RuneCountInString(f.name.s))
	}
	return nil
}

// propertyFlags names the flag that sets each field of
// heapscope.Properties, and the unit of a size flag's bare numbers.
var propertyFlags = map[string]struct {
	name string
	unit heapscope.Size
}{
	"File":             {"-o", 0},
	"FileMode":         {"--log-mode", 0},
	"MaxFileSize":      {"--max-size", heapscope.MiB},
	"BufferSize":       {"--buffer-size", heapscope.KiB},
	"Buffers":          {"--buffers", 0},
	"FlushInterval":    {"--flush-interval", 0},
	"Families":         {"--events", 0},
	"StackEvents":      {"--stacks", 0},
	"Provider":         {"--provider", 0},
	"Mode":             {"--mode", 0},
	"OnFull":           {"--on-full", 0},
	"Unwind":           {"--unwind", 0},
	"MaxFrames":        {"--max-frames", 0},
	"TimeResolution":   {"--time-resolution", 0},
	"Sample":           {"--sample", 0},
	"MaxStacks":        {"--max-stacks", 0},
	"UnwindTablesSize": {"--unwind-tables-size", heapscope.MiB},
	"Export":           {"--export", 0},
	"ExportInterval":   {"--export-interval", 0},
	"ExportAddresses":  {"--export-addresses", 0},
	"EmitUSDT":         {"--emit-usdt", 0},
	"Source":           {"--source", 0},
}

// flagError writes an error of Properties.Validate in terms of flags, a
// usage error: the flags' names, their values as given.
func (f *sessionFlags) flagError(err error) error {
	var pe *heapscope.PropertyError
	if !errors.As(err, &pe) {
		return usageError{err.Error()}
	}
	name := func(field string) string {
		if f, ok := propertyFlags[field]; ok {
			return f.name
		}
		return field
	}
	value := func(field string, v any) string {
		if t, ok := f.sizeText[field]; ok && (field == "BufferSize" && v == f.bufferSize || field == "MaxFileSize" && v == f.maxSize) {
			return t
		}
		return fmt.Sprint(v)
	}
	return usageError{pe.Describe(name, value)}
}

// sizeFlag is a size flag: a size with a unit, as heapscope.ParseSize
// reads it (64KiB, 1MiB, 65536B), or a bare number in the flag's unit, as
// the flags of sizes have always taken them (--buffer-size 64 is 64 KiB).
// The text given is kept in text[field], for errors.
type sizeFlag struct {
	size  *heapscope.Size
	unit  heapscope.Size
	text  map[string]string
	field string
}

func (f sizeFlag) String() string {
	if f.size == nil {
		return "0"
	}
	if *f.size%f.unit == 0 {
		return strconv.FormatInt(int64(*f.size/f.unit), 10)
	}
	return f.size.String()
}

func (f sizeFlag) Set(s string) error {
	if n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64); err == nil {
		*f.size = heapscope.Size(n) * f.unit
	} else if *f.size, err = heapscope.ParseSize(s); err != nil {
		return err
	}
	f.text[f.field] = s
	return nil
}

// setString is a string flag that records whether it was given.
type setString struct {
	s   string
	set bool
}

func (v *setString) String() string { return v.s }
func (v *setString) Set(s string) error {
	v.s, v.set = s, true
	return nil
}

// properties builds the properties of a session that launches program
// (attach false) or attaches to pid (attach true); they name the default
// output file.
func (f *sessionFlags) properties(program string, pid int, attach bool) (heapscope.Properties, error) {
	var p heapscope.Properties
	if err := f.validate(); err != nil {
		return p, err
	}
	var err error
	if p.Families, err = event.ParseFamily(f.events); err != nil {
		return p, usagef("--events: %v", err)
	}
	p.StackEvents, p.Mode, p.FileMode = f.stacks, f.mode, f.logMode
	p.BufferSize, p.Buffers = f.bufferSize, f.buffers
	p.MaxFileSize, p.FlushInterval, p.MaxFrames = f.maxSize, f.flushInterval, f.maxFrames
	p.TimeResolution = f.timeRes
	p.Overwrite = f.overwrite
	p.Sample = f.sample
	p.Export, p.ExportInterval, p.ExportAddresses = f.export, f.exportEvery, f.exportAddrs
	p.EmitUSDT = f.emitUSDT
	if f.source != heapscope.SourceUprobes {
		p.Source = f.source
	}
	p.Unwind, p.Provider, p.OnFull = f.unwind, f.provider, f.onFull
	if !attach && f.noFollowFork {
		if p.Provider != heapscope.ProviderEBPF {
			return p, usagef("--no-follow-fork: with --provider ebpf (the interposer follows children through LD_PRELOAD, with no hold)")
		}
		p.NoFollowFork = true
	}
	if attach {
		p.Provider, p.NoFollowFork = heapscope.ProviderEBPF, f.noFollowFork
		if f.inject {
			p.Provider = heapscope.ProviderPreload
		} else if p.OnFull == heapscope.Block {
			return p, usagef("--on-full block: eBPF uprobes can only drop and count; --inject can block")
		} else if p.EmitUSDT {
			return p, usagef("--emit-usdt: only heapscope's interposer fires the probes: attach --inject --sample R --emit-usdt")
		}
	}
	p.MaxStacks, p.UnwindTablesSize = f.maxStacks, f.unwindSize
	if p.FileMode != heapscope.RealTime {
		p.File = f.output
		if p.File == "" {
			p.File = fmt.Sprintf("heapscope.%s.%d.hst", filepath.Base(program), pid)
			if p.FileMode == heapscope.NewFile {
				p.File = fmt.Sprintf("heapscope.%s.%d.%%d.hst", filepath.Base(program), pid)
			}
		}
	} else if f.output != "" {
		return p, usagef("-o: realtime mode writes no file")
	}
	// Every flag has a value: 0 is one, never "the default".
	if err := p.ValidateGiven(); err != nil {
		return p, f.flagError(err)
	}
	return p, nil
}

func (f *sessionFlags) sessionName(program string, pid int) string {
	if f.name.set {
		return f.name.s
	}
	return fmt.Sprintf("heapscope-%s-%d", filepath.Base(program), pid)
}

// choices lists the names of values as "a, b or c", as their types write
// and parse them: --help names what the flag's type accepts.
func choices[T fmt.Stringer](values ...T) string {
	var names []string
	for _, v := range values {
		names = append(names, v.String())
	}
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// parsePIDs parses "1,2,3" (repeated flags accumulate).
type pidList []int

func (p pidList) String() string {
	var s []string
	for _, pid := range p {
		s = append(s, strconv.Itoa(pid))
	}
	return strings.Join(s, ",")
}

func (p *pidList) Set(v string) error {
	for _, f := range strings.Split(v, ",") {
		pid, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || pid <= 0 {
			return fmt.Errorf("bad pid %q", f)
		}
		*p = append(*p, pid)
	}
	return nil
}

// startError is how run, attach and top report a session that did not
// start.
func (f *sessionFlags) startError(err error) error {
	switch {
	case errors.Is(err, heapscope.ErrInvalidFlags):
		return f.flagError(err)
	case errors.Is(err, tracefile.ErrUnsafePath):
		return fmt.Errorf("%w (--overwrite replaces it)", err)
	}
	return err
}
