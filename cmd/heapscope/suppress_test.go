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

// runtimeTrace traces report_runtime with `heapscope run` and returns the
// trace's path.
func runtimeTrace(t *testing.T, dir string) string {
	t.Helper()
	bin := testutil.MustBuild(t, "report_runtime", testutil.Options{CXX: true})
	trace := filepath.Join(dir, "runtime.hst")
	if code, stderr := exitCode(t, cli(t, "run", "-q", "-o", trace, "--", bin)); code != 0 {
		t.Fatalf("run: exit %d: %s", code, stderr)
	}
	return trace
}

func reportJSON(t *testing.T, args ...string) *report.JSON {
	t.Helper()
	out := filepath.Join(t.TempDir(), "r.json")
	if code, stderr := runCLI(t, append([]string{"report", "--format", "json", "-o", out}, args...)...); code != 0 {
		t.Fatalf("report %q: exit %d: %s", args, code, stderr)
	}
	return readReportJSON(t, out)
}

// leakFunctions is the first function of the program's own module in each
// leak's stack, or "" for a leak whose stack never reaches it.
func leakFunctions(d *report.JSON, module string) []string {
	var out []string
	for _, l := range d.Leaks {
		fn := ""
		for _, f := range l.Stack {
			if f.Module == module {
				fn = f.Function
				break
			}
		}
		out = append(out, fn)
	}
	return out
}

// TestDefaultSuppressions: the C++ workload's report lists its own leaks
// first, and what the runtimes keep by design (libstdc++'s emergency
// exception pool first of all) only in the suppressed total.
func TestDefaultSuppressions(t *testing.T) {
	dir := t.TempDir()
	trace := runtimeTrace(t, dir)
	bin := testutil.MustBuild(t, "report_runtime", testutil.Options{CXX: true})

	d := reportJSON(t, trace)
	fns := leakFunctions(d, bin)
	// (The string's buffer is made in libstdc++, whose frames a
	// frame-pointer walk may not get through: its stack may stop there.)
	if len(fns) < 2 || fns[0] != "own_leak()" || !slices.Contains(fns, "own_string_leak()") {
		t.Errorf("the leaks start with %q; want own_leak(), and own_string_leak() among them", fns)
	}
	var pool *report.JSONSuppressed
	var sb, sk uint64
	for i, s := range d.Suppressed {
		sb, sk = sb+s.Bytes, sk+s.Blocks
		if s.Rule == "default:libstdc++-pool" {
			pool = &d.Suppressed[i]
		}
		if s.Source != "default" || s.Description == "" {
			t.Errorf("a default rule without its source or description: %+v", s)
		}
	}
	// The pool is one block of about 70 KiB (72,704 bytes in GCC 5 to 12).
	if pool == nil || pool.Blocks != 1 || pool.Bytes < 32<<10 {
		t.Fatalf("libstdc++'s pool is not suppressed as one block: %+v", d.Suppressed)
	}
	for _, l := range d.Leaks {
		if l.Bytes >= pool.Bytes {
			t.Errorf("a leak of %d bytes, as large as the pool, is still listed: %+v", l.Bytes, l.Stack)
		}
	}
	if d.Summary.SuppressedBytes != sb || d.Summary.SuppressedBlocks != sk {
		t.Errorf("summary suppressed %d in %d, the rules %d in %d", d.Summary.SuppressedBytes, d.Summary.SuppressedBlocks, sb, sk)
	}
	var lb uint64
	for _, l := range d.Leaks {
		lb += l.Bytes
	}
	if d.Summary.LeakedBytes != lb {
		t.Errorf("summary leaked %d, the leak list %d", d.Summary.LeakedBytes, lb)
	}

	// Off: the pool is the largest leak, and nothing is suppressed.
	all := reportJSON(t, "--no-default-suppressions", trace)
	if len(all.Suppressed) != 0 || all.Summary.SuppressedBytes != 0 {
		t.Errorf("--no-default-suppressions suppressed %+v", all.Suppressed)
	}
	if len(all.Leaks) == 0 || all.Leaks[0].Bytes != pool.Bytes {
		t.Errorf("--no-default-suppressions: the first leak is not the pool's %d bytes: %+v", pool.Bytes, all.Leaks)
	}
	if all.Summary.LeakedBytes != d.Summary.LeakedBytes+d.Summary.SuppressedBytes {
		t.Errorf("leaked %d without suppressions, %d + %d suppressed with them", all.Summary.LeakedBytes, d.Summary.LeakedBytes, d.Summary.SuppressedBytes)
	}

	// The text says so.
	out := filepath.Join(dir, "r.txt")
	if code, stderr := runCLI(t, "report", "-o", out, trace); code != 0 {
		t.Fatalf("report: %d %s", code, stderr)
	}
	text, _ := os.ReadFile(out)
	leaks := string(text[strings.Index(string(text), "LEAKS"):])
	if !strings.Contains(string(text), "suppressed ") || !strings.Contains(string(text), "rules (") ||
		!strings.Contains(leaks[:strings.Index(leaks, "\n  ")+200], "own_leak") || !strings.Contains(string(text), "exception pool") {
		t.Errorf("text report:\n%s", text)
	}
}

// TestSuppressionFile: a LeakSanitizer suppression file names a function
// whose leaks are then suppressed, with its file and line; export honours
// it too.
func TestSuppressionFile(t *testing.T) {
	dir := t.TempDir()
	trace := runtimeTrace(t, dir)
	supp := filepath.Join(dir, "lsan.supp")
	rmust(t, os.WriteFile(supp, []byte("# LeakSanitizer format\nleak:own_leak\n"), 0o644))
	base := reportJSON(t, trace)
	d := reportJSON(t, "--suppressions", supp, trace)
	var rule *report.JSONSuppressed
	for i, s := range d.Suppressed {
		if s.Rule == "leak:own_leak" {
			rule = &d.Suppressed[i]
		}
	}
	if rule == nil || rule.Bytes != 5000 || rule.Blocks != 1 || rule.Source != supp+":2" {
		t.Fatalf("leak:own_leak suppressed %+v; want 5000 bytes in 1 block from %s:2", rule, supp)
	}
	if d.Summary.LeakedBytes != base.Summary.LeakedBytes-5000 {
		t.Errorf("leaked %d with the file, %d without", d.Summary.LeakedBytes, base.Summary.LeakedBytes)
	}
	for _, l := range d.Leaks {
		for _, f := range l.Stack {
			if f.Function == "own_leak()" {
				t.Errorf("own_leak is still a leak")
			}
		}
	}
	// export: the suppressed leak is not in use.
	col := filepath.Join(dir, "c.txt")
	if code, stderr := runCLI(t, "export", "--format", "collapsed", "--metric", "inuse_space", "--suppressions", supp, "-o", col, trace); code != 0 {
		t.Fatalf("export: %d %s", code, stderr)
	}
	b, _ := os.ReadFile(col)
	if strings.Contains(string(b), "own_leak") || !strings.Contains(string(b), "own_string_leak") {
		t.Errorf("collapsed inuse_space with leak:own_leak suppressed:\n%s", b)
	}
	// A bad file is an error naming the line.
	bad := filepath.Join(dir, "bad.supp")
	rmust(t, os.WriteFile(bad, []byte("race:x\n"), 0o644))
	if code, stderr := runCLI(t, "report", "--suppressions", bad, trace); code != 1 || !strings.Contains(stderr, bad+":1") {
		t.Errorf("bad suppression file: exit %d, %q", code, stderr)
	}
}

// TestDiffCountsSuppressionsAsReport: `heapscope diff` counts leaks as
// `report` does: the leaks a rule suppresses are not leaked but
// suppressed, in its totals and per site, and it names the rules.
func TestDiffCountsSuppressionsAsReport(t *testing.T) {
	dir := t.TempDir()
	trace := runtimeTrace(t, dir)
	base := traceRun(t, dir, "known.hst", testutil.MustBuild(t, "report_known", testutil.Options{}))
	d, _ := diffJSON(t, base, trace)
	for _, side := range []struct {
		what string
		j    report.DiffJSONTrace
		file string
	}{{"base", d.Base, base}, {"new", d.New, trace}} {
		r := reportJSON(t, side.file)
		tot := side.j.Totals
		if tot.LeakedBytes != r.Summary.LeakedBytes || tot.LeakedBlocks != r.Summary.LeakedBlocks ||
			tot.SuppressedBytes != r.Summary.SuppressedBytes || tot.SuppressedBlocks != r.Summary.SuppressedBlocks {
			t.Errorf("%s: diff totals %+v; report leaked %d in %d, suppressed %d in %d", side.what, tot,
				r.Summary.LeakedBytes, r.Summary.LeakedBlocks, r.Summary.SuppressedBytes, r.Summary.SuppressedBlocks)
		}
		if len(side.j.Suppressed) != len(r.Suppressed) {
			t.Errorf("%s: diff names rules %+v, report %+v", side.what, side.j.Suppressed, r.Suppressed)
		}
	}
	if d.New.Totals.SuppressedBytes == 0 {
		t.Fatal("report_runtime: nothing suppressed")
	}
	var siteSup uint64
	for _, s := range d.Sites {
		siteSup += s.New.SuppressedBytes
		if s.New.SuppressedBytes > 0 && s.New.LeakedBytes > 0 {
			t.Errorf("a site both leaked and suppressed: %+v", s.New)
		}
	}
	if siteSup != d.New.Totals.SuppressedBytes {
		t.Errorf("sites' suppressed bytes %d, totals %d", siteSup, d.New.Totals.SuppressedBytes)
	}
	out := filepath.Join(dir, "d.txt")
	if code, stderr := runCLI(t, "diff", "-o", out, base, trace); code != 0 {
		t.Fatalf("diff: %d %s", code, stderr)
	}
	txt, _ := os.ReadFile(out)
	if !strings.Contains(string(txt), "suppressed bytes") || !strings.Contains(string(txt), "suppressed (not counted as leaked) by default:libstdc++-pool") {
		t.Errorf("diff text:\n%s", txt)
	}
}
