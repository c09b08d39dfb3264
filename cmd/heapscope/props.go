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
	"github.com/heapscope/heapscope/tracefile"
)

// sessionFlags are the flags run and attach share: the session's name, its
// output and its properties.
type sessionFlags struct {
	name          setString
	output        string
	stacks        event.KindSet
	events        string
	mode          event.CaptureMode
	logMode       event.LogFileMode
	bufferSize    int
	buffers       int
	maxSize       int64
	flushInterval time.Duration
	maxFrames     int
	timeRes       time.Duration
	overwrite     bool
	quiet         bool
	sample        heapscope.Size
	maxStacks     int
	unwindSize    heapscope.Size
}

func (f *sessionFlags) register(fs *flag.FlagSet) {
	fs.Var(&f.name, "name", fmt.Sprintf("session `NAME`, unique on the machine, 1 to %d characters (default heapscope-PROGRAM-PID)", heapscope.MaxNameLen))
	fs.StringVar(&f.output, "o", "", "trace file (default heapscope.PROGRAM.PID.hst; needs %d with --log-mode newfile)")
	fs.TextVar(&f.stacks, "stacks", event.KindSet(0), "`KINDS` that carry a call stack: "+choices(event.KindAlloc, event.KindRealloc, event.KindFree, event.KindMmap, event.KindMunmap)+
		"\nas a list, all or none (default: every kind traced that makes memory: alloc,realloc, and mmap when --events has it)")
	fs.StringVar(&f.events, "events", "heap", "allocation families traced: malloc,calloc,realloc,free,aligned,cxx,mmap, heap (all but mmap) or all")
	fs.TextVar(&f.mode, "mode", heapscope.Stream, "`MODE`: "+choices(heapscope.Stream, heapscope.Aggregate)+": every event, or the live set and per-stack totals kept in the kernel (ebpf only)")
	fs.TextVar(&f.logMode, "log-mode", heapscope.Sequential, "how the trace is written, `MODE`: "+choices(heapscope.Sequential, heapscope.Circular, heapscope.NewFile, heapscope.RealTime)+" (no file)")
	fs.IntVar(&f.bufferSize, "buffer-size", int(heapscope.DefaultBufferSize/heapscope.KiB), fmt.Sprintf("buffer size in KB, %d to %d", heapscope.MinBufferSize/heapscope.KiB, heapscope.MaxBufferSize/heapscope.KiB))
	fs.IntVar(&f.buffers, "buffers", heapscope.DefaultBuffers, "number of buffers, at least 1 (buffers × buffer size at most 4 GiB)")
	fs.Int64Var(&f.maxSize, "max-size", 0, "maximum trace file size in MB (0: unlimited; needed by circular and newfile)")
	fs.DurationVar(&f.flushInterval, "flush-interval", heapscope.DefaultFlushInterval, "longest time an event waits before it reaches the file, more than 0")
	fs.IntVar(&f.maxFrames, "max-frames", heapscope.MaxFrames, fmt.Sprintf("deepest stack recorded, 1 to %d", heapscope.MaxFrames))
	fs.DurationVar(&f.timeRes, "time-resolution", tracefile.DefaultTimeResolution, "precision of event times in the file, 1ns to 1s; 1ns keeps exact times")
	fs.BoolVar(&f.overwrite, "overwrite", false, "replace an existing output that is a symbolic link (the link, never its target) or another user's file;\nwithout it they are refused. Trace files are made new, mode 0600, once the session has started")
	fs.BoolVar(&f.quiet, "q", false, "print no summary at the end")
	fs.TextVar(&f.sample, "sample", heapscope.Size(0), "record one allocation per `SIZE` bytes allocated on average (e.g. 512KiB, 1MiB, 65536) and\nestimate the rest; 0 records every event. Not with --events mmap")
	fs.IntVar(&f.maxStacks, "max-stacks", heapscope.DefaultMaxStacks, fmt.Sprintf("ebpf: distinct stacks the kernel side remembers, 1 to %d (a few dozen bytes each, taken as they come);\nan event whose stack finds no room is recorded without it, and counted", heapscope.MaxMaxStacks))
	fs.TextVar(&f.unwindSize, "unwind-tables-size", heapscope.Size(heapscope.DefaultUnwindTablesSize), "ebpf: most kernel `SIZE` for unwind tables, up to 1GiB, taken 2MiB at a time as mapped files need it and\ngiven back when no traced process maps them; one user's processes take at most half.\nStacks through a file whose table finds no room are cut, and counted")
}

// validate checks each flag against its range, so that a value is never
// quietly replaced by a default: 0 is an error, not "the default".
func (f *sessionFlags) validate() error {
	switch {
	case f.name.set && f.name.s == "":
		return usagef("--name: must be 1 to %d characters, not empty", heapscope.MaxNameLen)
	case f.name.set && utf8.RuneCountInString(f.name.s) > heapscope.MaxNameLen:
		return usagef("--name: must be 1 to %d characters, not %d", heapscope.MaxNameLen, utf8.RuneCountInString(f.name.s))
	case f.bufferSize < int(heapscope.MinBufferSize/heapscope.KiB) || f.bufferSize > int(heapscope.MaxBufferSize/heapscope.KiB):
		return usagef("--buffer-size %d: must be %d to %d (KB)", f.bufferSize, heapscope.MinBufferSize/heapscope.KiB, heapscope.MaxBufferSize/heapscope.KiB)
	}
	maxBuffers := int(heapscope.MaxBufferBytes / (heapscope.Size(f.bufferSize) * heapscope.KiB))
	switch {
	case f.buffers < 1 || f.buffers > maxBuffers:
		return usagef("--buffers %d: must be 1 to %d (with --buffer-size %d)", f.buffers, maxBuffers, f.bufferSize)
	case f.maxSize < 0:
		return usagef("--max-size %d: must be 0 (unlimited) or more", f.maxSize)
	case f.flushInterval <= 0:
		return usagef("--flush-interval %v: must be more than 0", f.flushInterval)
	case f.maxFrames < 1 || f.maxFrames > heapscope.MaxFrames:
		return usagef("--max-frames %d: must be 1 to %d", f.maxFrames, heapscope.MaxFrames)
	case f.timeRes < time.Nanosecond || f.timeRes > time.Second:
		return usagef("--time-resolution %v: must be 1ns to 1s", f.timeRes)
	case f.maxStacks < 1 || f.maxStacks > heapscope.MaxMaxStacks:
		return usagef("--max-stacks %d: must be 1 to %d", f.maxStacks, heapscope.MaxMaxStacks)
	case f.unwindSize < 2*heapscope.MiB || f.unwindSize > heapscope.MaxUnwindTablesSize:
		return usagef("--unwind-tables-size %v: must be 2MiB to %v", f.unwindSize, heapscope.Size(heapscope.MaxUnwindTablesSize))
	}
	return nil
}

// flagNames says which flag sets each field of heapscope.Properties, so
// that an error of Properties.Validate names what the user typed.
var flagNames = strings.NewReplacer(
	"MaxFileSize", "--max-size",
	"FileMode", "--log-mode",
	"File", "-o",
	"Buffers", "--buffers",
	"BufferSize", "--buffer-size",
	"FlushInterval", "--flush-interval",
	"StackEvents", "--stacks",
	"MaxFrames", "--max-frames",
	"TimeResolution", "--time-resolution",
	"Families", "--events",
	"OnFull", "--on-full",
	"Sample:", "--sample:",
	"MaxStacks", "--max-stacks",
	"UnwindTablesSize", "--unwind-tables-size",
	"with the ebpf provider", "with --provider ebpf",
)

// flagError rewrites an error of Properties.Validate in terms of flags.
func flagError(err error) error {
	return usageError{flagNames.Replace(err.Error())}
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

// properties builds the session's properties; program names the default
// output file.
func (f *sessionFlags) properties(program string, pid int) (heapscope.Properties, error) {
	var p heapscope.Properties
	if err := f.validate(); err != nil {
		return p, err
	}
	var err error
	if p.Families, err = event.ParseFamily(f.events); err != nil {
		return p, usagef("--events: %v", err)
	}
	p.StackEvents, p.Mode, p.FileMode = f.stacks, f.mode, f.logMode
	p.BufferSize, p.Buffers = heapscope.Size(f.bufferSize)*heapscope.KiB, f.buffers
	p.MaxFileSize, p.FlushInterval, p.MaxFrames = heapscope.Size(f.maxSize)*heapscope.MiB, f.flushInterval, f.maxFrames
	p.TimeResolution = f.timeRes
	p.Overwrite = f.overwrite
	p.Sample = f.sample
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

// startError is how run and attach report a session that did not start.
func startError(err error) error {
	switch {
	case errors.Is(err, heapscope.ErrInvalidFlags):
		return flagError(err)
	case errors.Is(err, tracefile.ErrUnsafePath):
		return fmt.Errorf("%w (--overwrite replaces it)", err)
	}
	return err
}
