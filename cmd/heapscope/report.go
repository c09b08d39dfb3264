package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strings"
	"time"

	"github.com/heapscope/heapscope/analyze"
	"github.com/heapscope/heapscope/internal/safefile"
	"github.com/heapscope/heapscope/report"
	"github.com/heapscope/heapscope/suppress"
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
report what tracing only that window would have seen.

--pid and --exe report only some processes, as if they had been traced
alone: a shim's or a build's child, say. With several processes, the report
lists each with its own totals first and marks each site with its processes.

Leaks are suppressed, not listed, when a rule matches their stack: the rules
of --suppressions FILE (LeakSanitizer's leak:PATTERN lines, # comments; a
PATTERN matches a function, module or source file of any frame) and the
built-in rules for what the C and C++ runtimes keep for the life of a process
by design (libstdc++'s emergency exception pool, stdio buffers, the dynamic
loader's and NSS's caches, time zone and locale data). The report gives their
total and what each rule took; --no-default-suppressions turns the built-in
rules off.

--base FILE2 compares the trace with another, as 'heapscope diff FILE2 FILE'
does (stacks matched by symbolized frames): the text report is followed by the
diff's text; the JSON report gets a member "diff" holding the diff's JSON
document (report/DIFF.md). --from, --to, --pid and --exe select the same of
both traces.

--format html writes one self-contained page (no network; it opens from disk)
with the summary, the timeline, flame graphs, the functions and sites lists of
the whole trace, from the report's pass alone: 'heapscope serve' explores
windows, their classes and the histograms.

When the trace holds a leak check (heapscope run checks its program at exit;
heapscope leaks checks a running session), LEAKS are the blocks definitely
and indirectly lost, POSSIBLY LOST and STILL REACHABLE follow with their
totals, as Memcheck's summary gives them; without one, LEAKS are every block
still live at the end.
` + gateHelp,
		setup: func(fs *flag.FlagSet) func([]string) error {
			var lf loadFlags
			lf.register(fs)
			format := fs.String("format", "text", "text, json or html")
			top := fs.Int("top", 0, "sites per section (text: default 10; json: default all)")
			fullNames := fs.Bool("full-names", false, "text: print C++ names whole (by default the arguments of templates are elided: std::vector<…>::push_back)")
			var out output
			out.register(fs, "-")
			base := fs.String("base", "", "compare with this trace (`FILE2`), as 'heapscope diff FILE2 FILE' does")
			var gate gateFlags
			gate.register(fs)
			return func(args []string) error {
				if len(args) != 1 {
					return usagef("want one trace file")
				}
				if err := gate.validate(); err != nil {
					return err
				}
				if gate.active() && (*base != "" || *format == "html") {
					return usagef("the gate (--fail-on, --max-peak, --junit) checks a text or json report without --base")
				}
				if *base != "" && *format == "html" {
					return usagef("--base: text or json (for a page comparing two traces: heapscope serve FILE --base FILE2)")
				}
				if *format != "text" && *format != "json" && *format != "html" {
					return usagef("--format: want text, json or html, not %q", *format)
				}
				if *format == "html" {
					return writeHTMLReport(&lf, args[0], out)
				}
				if *top < 0 {
					return usagef("--top must not be negative")
				}
				if *base != "" {
					return writeReportWithBase(&lf, *base, args[0], *format, *top, *fullNames, out)
				}
				rep, err := lf.load(args[0])
				if err != nil {
					return err
				}
				err = writeOutput(out, func(w io.Writer) error {
					if *format == "json" {
						return rep.WriteJSON(w, *top)
					}
					return rep.WriteText(w, report.TextOptions{Top: *top, FullNames: *fullNames})
				})
				if err != nil || !gate.active() {
					return err
				}
				status, err := gate.check(os.Stderr, rep, suiteName(args[0]), -1)
				if err != nil {
					return err
				}
				if status != 0 {
					return exitError{status}
				}
				return nil
			}
		},
	})
}

// loadFlags are the flags of the commands that read a trace into a report.
type loadFlags struct {
	procFlags
	from, to     durationFlag
	debugDirs    stringList
	sysroot      string
	suppressions stringList
	noDefaults   bool
	// progress, when set, counts the reads of every load (diff's two);
	// else each load shows its own.
	progress *progress
}

func (f *loadFlags) register(fs *flag.FlagSet) {
	f.procFlags.register(fs)
	fs.Var(&f.suppressions, "suppressions", "a `FILE` of leak:PATTERN lines (LeakSanitizer's format): leaks whose stack has a function, module or source file matching a PATTERN are shown as suppressed (repeatable)")
	fs.BoolVar(&f.noDefaults, "no-default-suppressions", false, "list as leaks what the C and C++ runtimes keep for the life of a process by design (libstdc++'s exception pool, stdio buffers, the loader's and NSS's caches)")
	fs.Var(&f.from, "from", "start of the time window, from the start of the trace (e.g. 1.5s)")
	fs.Var(&f.to, "to", "end of the time window, from the start of the trace")
	fs.Var(&f.debugDirs, "debug-dir", "a further directory of separate debug files (repeatable)")
	fs.StringVar(&f.sysroot, "sysroot", "", "prefix for the trace's module paths: symbolize a trace from another machine")
}

// procFlags select processes of a trace: report, export and info.
type procFlags struct {
	pids pidList
	exe  string
}

func (f *procFlags) register(fs *flag.FlagSet) {
	fs.Var(&f.pids, "pid", "only the processes `PID[,PID...]` (repeatable): every program each ran")
	fs.StringVar(&f.exe, "exe", "", "only the programs named `NAME` (the base name of the executable or of argv[0]); with --pid, those too")
}

func (f *procFlags) processes() analyze.Processes {
	var sel analyze.Processes
	for _, pid := range f.pids {
		sel.PIDs = append(sel.PIDs, uint32(pid))
	}
	sel.Exe = f.exe
	return sel
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
	rules, err := f.rules()
	if err != nil {
		return nil, err
	}
	prog := f.progress
	if prog == nil {
		prog = startProgress("reading", path)
	}
	rep, err := report.Load(path, report.LoadOptions{
		From:         f.from.d,
		To:           f.to.d,
		Symbolize:    symbolize.Options{DebugDirs: f.debugDirs, Sysroot: f.sysroot},
		Suppressions: rules,
		Processes:    f.processes(),
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

// rules returns the suppression rules: the files', then the defaults.
func (f *loadFlags) rules() ([]*suppress.Rule, error) {
	var rules []*suppress.Rule
	for _, p := range f.suppressions {
		rs, err := suppress.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("--suppressions: %w", err)
		}
		rules = append(rules, rs...)
	}
	if !f.noDefaults {
		rules = append(rules, suppress.Defaults()...)
	}
	return rules, nil
}

// output is the -o and --overwrite flags of a command that writes a file.
type output struct {
	path      string
	overwrite bool
}

func (o *output) register(fs *flag.FlagSet, def string) {
	fs.StringVar(&o.path, "o", def, "write to this file instead of standard output ('-')")
	fs.BoolVar(&o.overwrite, "overwrite", false, "replace an -o file that is a symbolic link (the link, never its target) or another user's file;\nwithout it they are refused. The file is made new, mode 0600, and named once whole")
}

// writeOutput runs write on standard output ("-" or "") or into a new file
// that takes o's path only once whole (safefile.Write): an error, Ctrl-C or
// a kill midway leaves what the path held before.
func writeOutput(o output, write func(io.Writer) error) error {
	if o.path == "-" || o.path == "" {
		return write(os.Stdout)
	}
	err := safefile.Write(o.path, o.overwrite, write)
	if errors.Is(err, safefile.ErrUnsafePath) {
		return fmt.Errorf("%w (--overwrite replaces it)", err)
	}
	return err
}
