package query

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/heapscope/heapscope/analyze"
	"github.com/heapscope/heapscope/internal/testutil"
	"github.com/heapscope/heapscope/internal/tracetest"
	"github.com/heapscope/heapscope/report"
	"github.com/heapscope/heapscope/suppress"
)

// The index of some processes (report's --pid and --exe) is the report of
// those processes: a shim that forks and execs report_known, indexed with
// the workload selected, gives report.Load's report of the same selection,
// whole and through a window of the whole trace; a selection of nothing is
// ErrNoProcess.
func TestBuildProcesses(t *testing.T) {
	known := testutil.MustBuild(t, "report_known", testutil.Options{})
	shim := testutil.MustBuild(t, "report_shim", testutil.Options{})
	path := filepath.Join(t.TempDir(), "shim.hst")
	tracetest.Record(t, path, shim, known)

	sel := analyze.Processes{Exe: filepath.Base(known)}
	x, err := Build(path, Options{Processes: sel})
	if err != nil {
		t.Fatal(err)
	}
	all := build(t, path)
	if n := len(all.Report.Profile.Processes); n != 2 {
		t.Fatalf("the shim's trace has %d processes, want 2", n)
	}
	rep, err := report.Load(path, report.LoadOptions{Processes: sel})
	if err != nil {
		t.Fatal(err)
	}
	want := roundTrip(t, comparable(rep.Document(0)))
	if got := roundTrip(t, comparable(x.Report.Document(0))); got != want {
		t.Errorf("index's report of %s:\n%s\nreport:\n%s", sel, got, want)
	}
	if got := roundTrip(t, comparable(x.WindowReport(x.Window(Filter{})).Document(0))); got != want {
		t.Errorf("index's window of %s:\n%s\nreport:\n%s", sel, got, want)
	}
	if n := len(x.Report.Profile.Processes); n != 1 {
		t.Errorf("the selection has %d processes, want 1", n)
	}
	if _, err := Build(path, Options{Processes: analyze.Processes{Exe: "no-such-program"}}); !errors.Is(err, report.ErrNoProcess) {
		t.Errorf("a selection of nothing: %v, want ErrNoProcess", err)
	}
}

// Suppressions apply to the index's reports as to report's: the runtime's
// leaks of report_runtime are suppressed by the default rules, in the whole
// trace's report and in a window's.
func TestBuildSuppressions(t *testing.T) {
	bin := testutil.MustBuild(t, "report_runtime", testutil.Options{CXX: true})
	path := filepath.Join(t.TempDir(), "runtime.hst")
	tracetest.Record(t, path, bin)

	rules := suppress.Defaults()
	x, err := Build(path, Options{Suppressions: rules})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := report.Load(path, report.LoadOptions{Suppressions: rules})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Suppressed) == 0 {
		t.Fatal("report_runtime: the report suppressed nothing")
	}
	want := roundTrip(t, comparable(rep.Document(0)))
	if got := roundTrip(t, comparable(x.Report.Document(0))); got != want {
		t.Errorf("index's report:\n%s\nreport:\n%s", got, want)
	}
	if got := roundTrip(t, comparable(x.WindowReport(x.Window(Filter{})).Document(0))); got != want {
		t.Errorf("index's window:\n%s\nreport:\n%s", got, want)
	}
	// The flame graphs and the functions of the leaks leave the
	// suppressed sites out: their total is the report's leaks.
	leaked, _ := rep.Leaked()
	sb, _, _ := rep.SuppressedTotal()
	res := x.Window(Filter{})
	for _, inv := range []bool{false, true} {
		if fl := x.Flame(res, CostLeaks, inv, 0, 0); fl.Total != leaked || fl.Suppressed != sb {
			t.Errorf("flame graph of the leaks (inverted %v): total %d, suppressed %d; report: leaked %d, suppressed %d", inv, fl.Total, fl.Suppressed, leaked, sb)
		}
	}
	if fl := x.Flame(res, CostBytes, false, 0, 0); fl.Suppressed != 0 || fl.Total != rep.Profile.Summary.Bytes {
		t.Errorf("flame graph of the bytes: total %d, suppressed %d; want %d, 0", fl.Total, fl.Suppressed, rep.Profile.Summary.Bytes)
	}
	var self uint64
	for _, f := range x.Functions(res, CostLeaks, 0) {
		self += f.Self
	}
	if self != leaked {
		t.Errorf("functions of the leaks: selves %d, want %d", self, leaked)
	}
	// Every leak cost counts them the same way: the net growth of a window
	// that ends before the process's exit (its heap then is its leaks)
	// leaves them out too, and says how much they hold; so does a diff.
	win := x.Window(Filter{To: x.End()})
	if tot, sup := x.Total(win, CostNet); tot != leaked || sup != sb {
		t.Errorf("net growth up to the exit: %d, suppressed %d; report: leaked %d, suppressed %d", tot, sup, leaked, sb)
	}
	if fl := x.Flame(win, CostNet, false, 0, 0); fl.Total != leaked || fl.Suppressed != sb {
		t.Errorf("flame graph of the net growth: total %d, suppressed %d; want %d, %d", fl.Total, fl.Suppressed, leaked, sb)
	}
	if tot, sup := x.Total(res, CostLeaks); tot != leaked || sup != sb {
		t.Errorf("total of the leaks %d, suppressed %d; want %d, %d", tot, sup, leaked, sb)
	}
	var diffed uint64
	for _, d := range Diff(x, res, x, x.Window(Filter{From: x.Start(), To: x.Start() + 1}), CostLeaks) {
		diffed += d.Value
	}
	if diffed != leaked {
		t.Errorf("diff of the leaks: %d, want the report's %d", diffed, leaked)
	}
	// Without rules nothing is suppressed.
	all := build(t, path)
	if n := len(all.Report.Suppressed); n != 0 {
		t.Errorf("no rules: %d suppressions", n)
	}
	if fl := all.Flame(all.Window(Filter{}), CostLeaks, false, 0, 0); fl.Total != leaked+sb || fl.Suppressed != 0 {
		t.Errorf("no rules: flame graph of the leaks: total %d, suppressed %d; want %d, 0", fl.Total, fl.Suppressed, leaked+sb)
	}
}
