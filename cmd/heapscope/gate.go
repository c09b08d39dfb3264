package main

import (
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/heapscope/heapscope"
	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/report"
)

// DefaultFailStatus is heapscope's exit status when a gate condition holds
// (--fail-status changes it): LeakSanitizer's, which C and C++ developers
// know as "leaks found".
const DefaultFailStatus = 23

// gateFlags are the CI gate's flags of run and report.
type gateFlags struct {
	failOn      []string
	maxLeaked   heapscope.Size
	maxPeak     heapscope.Size
	growthLimit heapscope.Size
	junit       string
	status      int
	set         bool // a gate flag was given
}

// failOnFlag parses --fail-on, repeatable, comma-separated.
type failOnFlag struct{ g *gateFlags }

func (f failOnFlag) String() string {
	if f.g == nil {
		return ""
	}
	return strings.Join(f.g.failOn, ",")
}

func (f failOnFlag) Set(s string) error {
	c, err := report.ParseFailOn(s)
	if err != nil {
		return err
	}
	f.g.failOn = append(f.g.failOn, c...)
	f.g.set = true
	return nil
}

// gateSize is a size flag that marks the gate set.
type gateSize struct {
	v   *heapscope.Size
	set *bool
}

func (f gateSize) String() string {
	if f.v == nil {
		return "0"
	}
	return f.v.String()
}

func (f gateSize) Set(s string) error {
	if err := f.v.UnmarshalText([]byte(s)); err != nil {
		return err
	}
	if *f.v < 0 {
		return fmt.Errorf("negative size %s", s)
	}
	*f.set = true
	return nil
}

const gateHelp = `
A CI gate: --fail-on CONDITION[,CONDITION...] checks the trace when the
report is done, prints one line ("heapscope: FAIL ..." or "heapscope:
PASS (...)") and, when a condition holds, exits with status 23 (--fail-status
N; the program's own status is passed on otherwise). The conditions:
  leaks      definitely and indirectly lost bytes (a leak check's) exceed
             --max-leaked (default 0)
  definite   definitely lost bytes exceed --max-leaked
  possible   definitely, indirectly and possibly lost bytes exceed --max-leaked
  growth     live bytes keep growing after the warm-up: the least-squares
             slope between the first quarter and the last twentieth of the
             run, projected over the time after the warm-up, exceeds
             --growth-limit (default 1MiB)
  any        all of them
--max-peak SIZE fails when the heap's peak exceeds SIZE. A trace without a
leak check (--no-leak-check, or an attach never checked) counts every block
live at the end as lost, and says so. Suppressions apply first. --junit FILE
writes a JUnit XML file: a test case per condition, the top sites in the
failure's text.`

func (g *gateFlags) register(fs *flag.FlagSet) {
	g.status = DefaultFailStatus
	fs.Var(failOnFlag{g}, "fail-on", "gate `CONDITIONS`: leaks, definite, possible, growth or any (comma-separated, repeatable)")
	fs.Var(gateSize{&g.maxLeaked, &g.set}, "max-leaked", "gate: the lost bytes allowed, `SIZE` (e.g. 4KiB; default 0)")
	fs.Var(gateSize{&g.maxPeak, &g.set}, "max-peak", "gate: fail when the heap's peak exceeds `SIZE`")
	fs.Var(gateSize{&g.growthLimit, &g.set}, "growth-limit", "gate: the growth after the warm-up allowed, `SIZE` (default 1MiB)")
	fs.StringVar(&g.junit, "junit", "", "gate: write a JUnit XML `FILE` (a test case per condition)")
	fs.IntVar(&g.status, "fail-status", DefaultFailStatus, "gate: the exit `STATUS` when a condition holds, 1 to 255")
}

// active reports whether a gate was asked for.
func (g *gateFlags) active() bool { return g.set || g.junit != "" || len(g.failOn) > 0 }

func (g *gateFlags) validate() error {
	if g.status < 1 || g.status > 255 {
		return usagef("--fail-status %d: must be 1 to 255", g.status)
	}
	if g.junit != "" && len(g.failOn) == 0 && g.maxPeak == 0 {
		return usagef("--junit needs --fail-on or --max-peak: the conditions it reports")
	}
	if g.set && len(g.failOn) == 0 && g.maxPeak == 0 {
		return usagef("--max-leaked and --growth-limit need --fail-on")
	}
	return nil
}

// check runs the gate on rep: it prints the verdict line to w, writes the
// JUnit file, and returns the exit status (0 when every condition
// passed). suite names the test suite: the program, or the trace file;
// program is the program's own status (-1: none, a trace read back).
func (g *gateFlags) check(w io.Writer, rep *report.Report, suite string, program int) (int, error) {
	checks := rep.Gate(report.GateOptions{FailOn: g.failOn, MaxLeaked: uint64(g.maxLeaked), MaxPeak: uint64(g.maxPeak), GrowthLimit: uint64(g.growthLimit)})
	line := report.Verdict(checks)
	if program > 0 && report.Failed(checks) {
		line += fmt.Sprintf(" (the program itself exited with status %d)", program)
	}
	fmt.Fprintln(w, line)
	if g.junit != "" {
		out := line
		if program >= 0 {
			out += fmt.Sprintf("\nprogram exit status %d", program)
		}
		err := writeOutput(output{path: g.junit}, func(jw io.Writer) error {
			return report.WriteJUnit(jw, suite, checks, rep.Duration(), rep.Trace.WallStart, out)
		})
		if err != nil {
			return 0, fmt.Errorf("--junit: %w", err)
		}
	}
	if report.Failed(checks) {
		return g.status, nil
	}
	return 0, nil
}

// suiteName is a program's name as a JUnit suite: its base name.
func suiteName(path string) string {
	return strings.TrimSuffix(filepath.Base(path), ".hst")
}

// gateReport loads run's trace for its gate (and summary): the default
// suppressions, and --suppressions' files.
func gateReport(files []string, sup []string) (*report.Report, error) {
	if len(files) != 1 {
		return nil, fmt.Errorf("the gate needs one trace file, the session wrote %d (--log-mode newfile?)", len(files))
	}
	lf := loadFlags{suppressions: sup}
	lf.progress = startProgress("reading", files[0])
	defer lf.progress.finish()
	return lf.load(files[0])
}

// heapscopeReport is a report, named so for run's gate.
type heapscopeReport = report.Report

// leakFlags are run's leak check and gate flags.
type leakFlags struct {
	noCheck      bool
	rules        event.Rules
	gate         gateFlags
	suppressions stringList
}

func (l *leakFlags) register(fs *flag.FlagSet) {
	fs.BoolVar(&l.noCheck, "no-leak-check", false, "do not check the program for leaks at its exit (nor trace it with ptrace for that)")
	fs.TextVar(&l.rules, "leak-rules", event.RulesMemcheck, "whose classification the leak check follows, `RULES`: memcheck (possibly lost for interior pointers; one block of a lost cycle definitely lost) or lsan")
	fs.Var(&l.suppressions, "suppressions", "gate and summary: a `FILE` of leak:PATTERN lines (LeakSanitizer's format) whose leaks are suppressed (repeatable)")
	l.gate.register(fs)
}

// apply sets props' leak check and validates the gate's flags.
func (l *leakFlags) apply(props *heapscope.Properties) error {
	if err := l.gate.validate(); err != nil {
		return err
	}
	props.LeakRules = l.rules
	if l.noCheck {
		props.LeakCheck = heapscope.LeakCheckOff
	}
	return nil
}
