package main

import (
	"errors"
	"flag"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/heapscope/heapscope"
	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/tracefile"
)

// sessionFlags are the flags run and attach share: the session's name, its
// output and its properties.
type sessionFlags struct {
	name          string
	output        string
	stacks        string
	events        string
	mode          string
	logMode       string
	bufferSize    int
	buffers       int
	minBuffers    int
	maxSize       int64
	flushInterval time.Duration
	maxFrames     int
	timeRes       time.Duration
	overwrite     bool
	quiet         bool
}

func (f *sessionFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.name, "name", "", "session name, unique on the machine (default heapscope-PROGRAM-PID)")
	fs.StringVar(&f.output, "o", "", "trace file (default heapscope.PROGRAM.PID.hst; needs %d with --log-mode newfile)")
	fs.StringVar(&f.stacks, "stacks", "alloc,realloc", "event kinds that carry a call stack: alloc,realloc,free or none")
	fs.StringVar(&f.events, "events", "heap", "allocation families traced: malloc,calloc,realloc,free,aligned,cxx,mmap, heap (all but mmap) or all")
	fs.StringVar(&f.mode, "mode", "stream", "stream (every event) or aggregate (live set and per-stack totals kept in the kernel; ebpf only)")
	fs.StringVar(&f.logMode, "log-mode", "sequential", "sequential, circular, newfile or realtime (no file)")
	fs.IntVar(&f.bufferSize, "buffer-size", 0, "buffer size in KB, 4 to 1024 (default 64)")
	fs.IntVar(&f.buffers, "buffers", 0, "maximum number of buffers (default 64)")
	fs.IntVar(&f.minBuffers, "min-buffers", 0, "minimum number of buffers (default 4)")
	fs.Int64Var(&f.maxSize, "max-size", 0, "maximum trace file size in MB (0: unlimited; needed by circular and newfile)")
	fs.DurationVar(&f.flushInterval, "flush-interval", 0, "longest time an event waits before it reaches the file (default 1s)")
	fs.IntVar(&f.maxFrames, "max-frames", 0, "deepest stack recorded, at most 127 (default 127)")
	fs.DurationVar(&f.timeRes, "time-resolution", 0, "precision of event times in the file; 1ns keeps exact times (default 10µs)")
	fs.BoolVar(&f.overwrite, "overwrite", false, "replace an existing output that is a symbolic link (the link, never its target) or another user's file;\nwithout it they are refused. Trace files are made new, mode 0600, once the session has started")
	fs.BoolVar(&f.quiet, "q", false, "print no summary at the end")
}

// properties builds the session's properties; program names the default
// output file.
func (f *sessionFlags) properties(program string, pid int) (heapscope.Properties, event.KindSet, error) {
	var p heapscope.Properties
	stacks, err := parseStacks(f.stacks)
	if err != nil {
		return p, 0, usagef("--stacks: %v", err)
	}
	if p.EnableFlags, err = event.ParseFamily(f.events); err != nil {
		return p, 0, usagef("--events: %v", err)
	}
	if p.Mode, err = heapscope.ParseCaptureMode(f.mode); err != nil {
		return p, 0, usagef("--mode: %v", err)
	}
	if p.LogFileMode, err = heapscope.ParseLogFileMode(f.logMode); err != nil {
		return p, 0, usagef("--log-mode: %v", err)
	}
	p.BufferSize, p.MaximumBuffers, p.MinimumBuffers = f.bufferSize, f.buffers, f.minBuffers
	p.MaximumFileSize, p.FlushTimer, p.MaxFrames = f.maxSize, f.flushInterval, f.maxFrames
	p.TimeResolution = f.timeRes
	p.Overwrite = f.overwrite
	if p.LogFileMode != heapscope.RealTime {
		p.LogFileName = f.output
		if p.LogFileName == "" {
			p.LogFileName = fmt.Sprintf("heapscope.%s.%d.hst", filepath.Base(program), pid)
			if p.LogFileMode == heapscope.NewFile {
				p.LogFileName = fmt.Sprintf("heapscope.%s.%d.%%d.hst", filepath.Base(program), pid)
			}
		}
	} else if f.output != "" {
		return p, 0, usagef("-o: realtime mode writes no file")
	}
	return p, stacks, nil
}

func (f *sessionFlags) sessionName(program string, pid int) string {
	if f.name != "" {
		return f.name
	}
	return fmt.Sprintf("heapscope-%s-%d", filepath.Base(program), pid)
}

// parseStacks parses "alloc,realloc,free" or "none".
func parseStacks(s string) (event.KindSet, error) {
	if s == "none" || s == "" {
		return 0, nil
	}
	var set event.KindSet
	for _, name := range strings.Split(s, ",") {
		k, err := event.ParseKind(strings.TrimSpace(name))
		if err != nil {
			return 0, err
		}
		set |= event.KindsOf(k)
	}
	return set, nil
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
		return usageError{err.Error()}
	case errors.Is(err, tracefile.ErrUnsafePath):
		return fmt.Errorf("%w (--overwrite replaces it)", err)
	}
	return err
}
