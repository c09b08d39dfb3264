package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strings"
	"time"

	"github.com/heapscope/heapscope/report"
	"github.com/heapscope/heapscope/symbolize"
)

func init() {
	register(&command{
		name:    "report",
		args:    "[flags] FILE",
		summary: "report leaks, the peak, allocation sites and temporaries of a trace",
		help: `
The text report starts with a summary (duration, allocation calls, bytes, the
peak and when it was reached, leaks, temporaries, lost events, unmatched
frees), then lists the top sites by leaked bytes, by bytes live at the peak, by
allocation calls and by temporary allocations, and the histogram of allocation
sizes. --format json writes all of it, every site unless --top is given; its
schema is in report/JSON.md.

--from and --to take durations from the start of the trace (1.5s, 200ms) and
report what tracing only that window would have seen.`,
		setup: func(fs *flag.FlagSet) func([]string) error {
			var lf loadFlags
			lf.register(fs)
			format := fs.String("format", "text", "text or json")
			top := fs.Int("top", 0, "sites per section (text: default 10; json: default all)")
			out := fs.String("o", "-", "write to this file instead of standard output")
			return func(args []string) error {
				if len(args) != 1 {
					return usagef("want one trace file")
				}
				if *format != "text" && *format != "json" {
					return usagef("--format: want text or json, not %q", *format)
				}
				if *top < 0 {
					return usagef("--top must not be negative")
				}
				rep, err := lf.load(args[0])
				if err != nil {
					return err
				}
				return writeOutput(*out, func(w io.Writer) error {
					if *format == "json" {
						return rep.WriteJSON(w, *top)
					}
					return rep.WriteText(w, report.TextOptions{Top: *top})
				})
			}
		},
	})
}

// loadFlags are the flags of the commands that read a trace into a report.
type loadFlags struct {
	from, to  durationFlag
	debugDirs stringList
	sysroot   string
	// progress, when set, counts the reads of every load (diff's two);
	// else each load shows its own.
	progress *progress
}

func (f *loadFlags) register(fs *flag.FlagSet) {
	fs.Var(&f.from, "from", "start of the time window, from the start of the trace (e.g. 1.5s)")
	fs.Var(&f.to, "to", "end of the time window, from the start of the trace")
	fs.Var(&f.debugDirs, "debug-dir", "a further directory of separate debug files (repeatable)")
	fs.StringVar(&f.sysroot, "sysroot", "", "prefix for the trace's module paths: symbolize a trace from another machine")
}

// durationFlag is a non-negative duration; set records that it was given.
type durationFlag struct {
	d   time.Duration
	set bool
}

func (d *durationFlag) String() string {
	if !d.set {
		return ""
	}
	return d.d.String()
}

func (d *durationFlag) Set(s string) error {
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	if v < 0 {
		return fmt.Errorf("negative duration %s", s)
	}
	d.d, d.set = v, true
	return nil
}

type stringList []string

func (l *stringList) String() string { return strings.Join(*l, ",") }
func (l *stringList) Set(s string) error {
	*l = append(*l, s)
	return nil
}

// load reads the trace at path into a report. The reader's warnings (a
// truncated file) are printed to standard error, and kept in the report.
func (f *loadFlags) load(path string) (*report.Report, error) {
	if f.to.set && f.to.d <= f.from.d {
		return nil, usagef("--to (%s) must be after --from (%s)", f.to.d, f.from.d)
	}
	// The heap of a report is mostly long-lived (the live blocks, the
	// stacks, the decoder's buffers), and little garbage is made per event:
	// collecting at 25% growth instead of 100% takes a quarter off the peak
	// memory for no measurable time (python trace: max RSS 47 -> 35 MiB).
	// GOGC in the environment still wins.
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(25)
	}
	prog := f.progress
	if prog == nil {
		prog = startProgress(path)
	}
	rep, err := report.Load(path, report.LoadOptions{
		From:         f.from.d,
		To:           f.to.d,
		Symbolize:    symbolize.Options{DebugDirs: f.debugDirs, Sysroot: f.sysroot},
		ReadProgress: prog.counter(),
	})
	if f.progress == nil {
		prog.finish() // before the warnings are printed
	}
	if err != nil {
		return nil, err
	}
	if f.progress != nil && len(rep.Trace.Warnings) > 0 {
		f.progress.clearLine() // a shared meter goes on after the warnings
	}
	for _, w := range rep.Trace.Warnings {
		fmt.Fprintf(os.Stderr, "heapscope: warning: %s: %s\n", path, w)
	}
	return rep, nil
}

// writeOutput runs write on standard output ("-") or on the file path,
// which it creates; a failed write removes the partial file.
func writeOutput(path string, write func(io.Writer) error) error {
	if path == "-" || path == "" {
		return write(os.Stdout)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	err = write(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
		return err
	}
	return nil
}
