package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/heapscope/heapscope/internal/testutil"
	"github.com/heapscope/heapscope/report"
)

// traceAndReport runs argv under `heapscope run` with flags, then returns
// its JSON report.
func traceAndReport(t *testing.T, name string, env []string, flags []string, argv ...string) *report.JSON {
	t.Helper()
	dir := t.TempDir()
	trace := filepath.Join(dir, name+".hst")
	args := append(append([]string{"run", "-q", "-o", trace}, flags...), "--")
	cmd := cli(t, append(args, argv...)...)
	cmd.Env = append(cmd.Env, env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("heapscope run %v: %v\n%s", flags, err, out)
	}
	js := filepath.Join(dir, name+".json")
	// what the runtime keeps by design can be a program's only leaks (it is
	// sqlite3's), and its stacks are compared too: no built-in suppressions
	if code, errs := runCLI(t, "report", "--format", "json", "--no-default-suppressions", "-o", js, trace); code != 0 {
		t.Fatalf("report: exit %d: %s", code, errs)
	}
	return readReportJSON(t, js)
}

func functions(st []report.JSONFrame) []string {
	var out []string
	for _, f := range st {
		out = append(out, f.Function+" in "+filepath.Base(f.Module))
	}
	return out
}

// reaches says whether a stack has a frame in one of the modules.
func reaches(st []report.JSONFrame, modules []string) bool {
	for _, f := range st {
		for _, m := range modules {
			if strings.Contains(filepath.Base(f.Module), m) {
				return true
			}
		}
	}
	return false
}

func topAllocation(d *report.JSON) []report.JSONFrame {
	s := slices.Clone(d.Allocations)
	slices.SortStableFunc(s, func(a, b report.JSONSite) int {
		switch {
		case a.Bytes > b.Bytes:
			return -1
		case a.Bytes < b.Bytes:
			return 1
		}
		return 0
	})
	if len(s) == 0 {
		return nil
	}
	return s[0].Stack
}

func topLeak(d *report.JSON) []report.JSONFrame {
	if len(d.Leaks) == 0 {
		return nil
	}
	best := d.Leaks[0]
	for _, l := range d.Leaks {
		if l.Bytes > best.Bytes {
			best = l
		}
	}
	return best.Stack
}

// checkDefaultMatchesDWARF traces argv with no unwinding flag and with
// --unwind dwarf: the top leak and the top allocation site (by bytes) of the
// default reach the program's own modules, and are the same stacks as
// libunwind's. With --unwind fp they are not (so the program tests
// something: Debian builds these without frame pointers).
func checkDefaultMatchesDWARF(t *testing.T, name string, env []string, own []string, argv ...string) (def, dw, fp *report.JSON) {
	def = traceAndReport(t, name+"-default", env, nil, argv...)
	dw = traceAndReport(t, name+"-dwarf", env, []string{"--unwind", "dwarf"}, argv...)
	fp = traceAndReport(t, name+"-fp", env, []string{"--unwind", "fp"}, argv...)
	type pick struct {
		what string
		get  func(*report.JSON) []report.JSONFrame
	}
	picks := []pick{{"top allocation site", topAllocation}, {"top leak", topLeak}}
	for _, p := range picks {
		d, w, f := p.get(def), p.get(dw), p.get(fp)
		if !reaches(d, own) {
			t.Errorf("%s: default: %s does not reach %v:\n  %s", name, p.what, own, strings.Join(functions(d), "\n  "))
		}
		if !slices.Equal(functions(d), functions(w)) {
			t.Errorf("%s: %s differs from --unwind dwarf's:\n default:\n  %s\n dwarf:\n  %s", name, p.what,
				strings.Join(functions(d), "\n  "), strings.Join(functions(w), "\n  "))
		}
		if slices.Equal(functions(f), functions(d)) {
			t.Errorf("%s: --unwind fp found the same %s: the program tests nothing", name, p.what)
		}
		fn := functions(d)
		t.Logf("%s: %s, default (%d frames):\n  %s", name, p.what, len(fn), strings.Join(fn[:min(len(fn), 12)], "\n  "))
	}
	return def, dw, fp
}

// cutWarning returns the report's warning about stacks cut short, or "".
func cutWarning(d *report.JSON) string {
	for _, w := range d.Warnings {
		if strings.Contains(w, "stacks cut") {
			return w
		}
	}
	return ""
}

func TestDefaultUnwindSqlite3(t *testing.T) {
	sqlite := "/usr/bin/sqlite3"
	if _, err := os.Stat(sqlite); err != nil {
		t.Fatalf("Debian's sqlite3 is needed: %v", err)
	}
	def, _, fp := checkDefaultMatchesDWARF(t, "sqlite3", nil, []string{"sqlite3"}, sqlite, ":memory:",
		"create table t(a integer, b text); insert into t select value, hex(randomblob(16)) from generate_series(1,20000); create index ti on t(b); select count(*) from t;")
	checkCutWarnings(t, def, fp)
}

// checkCutWarnings: the default's stacks are whole (a stripped program's
// nameless _start included), fp's are cut and the report says so.
func checkCutWarnings(t *testing.T, def, fp *report.JSON) {
	t.Helper()
	if w := cutWarning(def); w != "" {
		t.Errorf("default: %q", w)
	}
	if w := cutWarning(fp); !strings.Contains(w, "stacks cut short") {
		t.Errorf("--unwind fp: no cut-stack warning (warnings %q)", fp.Warnings)
	}
}

func TestDefaultUnwindPython(t *testing.T) {
	py := "/usr/bin/python3.11"
	if _, err := os.Stat(py); err != nil {
		t.Fatalf("Debian's python3.11 is needed: %v", err)
	}
	script := "import json\nkeep=[]\ndef grow(n):\n    return [{'k': i, 's': str(i)*5} for i in range(n)]\nfor r in range(5):\n    d = grow(20000)\nkeep.append(grow(30000))\nprint(len(json.dumps(keep)))\n"
	def, _, fp := checkDefaultMatchesDWARF(t, "python3", []string{"PYTHONMALLOC=malloc", "PYTHONHASHSEED=0"}, []string{"python3.11"}, py, "-c", script)
	checkCutWarnings(t, def, fp)
}

func TestDefaultUnwindCXX(t *testing.T) {
	bin := testutil.MustBuild(t, "unwind_cxx", testutil.Options{CXX: true, NoFramePointers: true, Opt: "2"})
	def, _, fp := checkDefaultMatchesDWARF(t, "cxx", nil, []string{filepath.Base(bin)}, bin)
	// the report says when stacks end early, naming the module and the fix
	w := cutWarning(fp)
	if !strings.Contains(w, "libstdc++.so.6") || !strings.Contains(w, "--unwind tables") {
		t.Errorf("--unwind fp: cut-stack warning %q, want it to name libstdc++.so.6 and suggest --unwind tables", w)
	}
	// the default's only short stack is libstdc++'s emergency pool,
	// allocated before tracing was set up
	if w := cutWarning(def); strings.Contains(w, filepath.Base(bin)) {
		t.Errorf("default: cut-stack warning names the program: %q", w)
	}
	deep := traceAndReport(t, "cxx-deep", nil, []string{"--max-frames", "4"}, bin)
	if w := cutWarning(deep); !strings.Contains(w, "depth limit") || !strings.Contains(w, "--max-frames") {
		t.Errorf("--max-frames 4: cut-stack warning %q, want the depth limit and --max-frames", w)
	}
}
