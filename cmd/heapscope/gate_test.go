package main

import (
	"encoding/xml"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/heapscope/heapscope/internal/testutil"
)

// junitDoc is what a CI system reads of a JUnit file.
type junitDoc struct {
	Tests    int `xml:"tests,attr"`
	Failures int `xml:"failures,attr"`
	Suites   []struct {
		Name  string `xml:"name,attr"`
		Cases []struct {
			Name    string `xml:"name,attr"`
			Failure *struct {
				Message string `xml:"message,attr"`
				Text    string `xml:",chardata"`
			} `xml:"failure"`
		} `xml:"testcase"`
	} `xml:"testsuite"`
}

func readJUnit(t *testing.T, path string) junitDoc {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var d junitDoc
	if err := xml.Unmarshal(b, &d); err != nil {
		t.Fatalf("%v:\n%s", err, b)
	}
	return d
}

// TestGate: a program with a planted leak fails the gate with status 23
// and a JUnit file whose failure names the leaking site; the same program
// fixed passes, with the program's own status passed on; the same gate on
// report, for the trace already written, agrees; a growing heap fails
// growth.
func TestGate(t *testing.T) {
	bin := testutil.MustBuild(t, "gate_leak", testutil.Options{})
	dir := t.TempDir()
	run := func(junit string, args ...string) (int, string) {
		t.Helper()
		trace := filepath.Join(dir, "g.hst")
		cmd := cli(t, append([]string{"run", "--overwrite", "-o", trace, "--fail-on", "leaks", "--junit", junit, "--", bin}, args...)...)
		return exitCode(t, cmd)
	}

	junit := filepath.Join(dir, "leak.xml")
	code, stderr := run(junit)
	if code != 23 {
		t.Fatalf("a leaking program: status %d, want 23\n%s", code, stderr)
	}
	if !strings.Contains(stderr, "heapscope: FAIL leaks: 16.0 KiB lost (definitely and indirectly) in 64 blocks") {
		t.Errorf("no verdict line:\n%s", stderr)
	}
	d := readJUnit(t, junit)
	if d.Tests != 1 || d.Failures != 1 || len(d.Suites) != 1 || !strings.HasPrefix(d.Suites[0].Name, "gate_leak") || len(d.Suites[0].Cases) != 1 {
		t.Fatalf("junit: %+v", d)
	}
	if f := d.Suites[0].Cases[0].Failure; f == nil || !strings.Contains(f.Text, "build") || !strings.Contains(f.Message, "16.0 KiB lost") {
		t.Errorf("the failure: %+v", f)
	}
	// The trace holds the check: report's gate says the same.
	rj := filepath.Join(dir, "report.xml")
	code, stderr = exitCode(t, cli(t, "report", "-o", filepath.Join(dir, "r.txt"), "--overwrite", "--fail-on", "leaks,definite", "--junit", rj, filepath.Join(dir, "g.hst")))
	if code != 23 || !strings.Contains(stderr, "FAIL leaks") || !strings.Contains(stderr, "definite: 256 B definitely lost in 1 block") {
		t.Errorf("report's gate: status %d\n%s", code, stderr)
	}
	if d := readJUnit(t, rj); d.Tests != 2 || d.Failures != 2 {
		t.Errorf("report's junit: %+v", d)
	}
	// Allowed: passes.
	code, stderr = exitCode(t, cli(t, "report", "-o", filepath.Join(dir, "r.txt"), "--overwrite", "--fail-on", "leaks", "--max-leaked", "16KiB", filepath.Join(dir, "g.hst")))
	if code != 0 || !strings.Contains(stderr, "heapscope: PASS (leaks)") {
		t.Errorf("--max-leaked 16KiB: status %d\n%s", code, stderr)
	}

	// Fixed: passes, and its own status comes through.
	junit = filepath.Join(dir, "fixed.xml")
	code, stderr = run(junit, "fixed", "status", "3")
	if code != 3 || !strings.Contains(stderr, "heapscope: PASS (leaks)") {
		t.Errorf("the fixed program: status %d, want its own 3\n%s", code, stderr)
	}
	if d := readJUnit(t, junit); d.Tests != 1 || d.Failures != 0 {
		t.Errorf("junit of the fixed program: %+v", d)
	}
	code, _ = run(filepath.Join(dir, "ok.xml"), "fixed")
	if code != 0 {
		t.Errorf("the fixed program exiting 0: status %d", code)
	}

	// Growth, and the peak.
	code, stderr = exitCode(t, cli(t, "run", "--overwrite", "-o", filepath.Join(dir, "grow.hst"), "--fail-on", "growth", "--max-peak", "1MiB", "--", bin, "fixed", "grow"))
	if code != 23 || !strings.Contains(stderr, "growth: live bytes after the warm-up grow") || !strings.Contains(stderr, "peak: peak") {
		t.Errorf("a growing heap: status %d\n%s", code, stderr)
	}
	code, stderr = exitCode(t, cli(t, "run", "--overwrite", "-o", filepath.Join(dir, "flat.hst"), "--fail-on", "growth", "--fail-status", "99", "--", bin, "fixed"))
	if code != 0 {
		t.Errorf("a flat heap: status %d\n%s", code, stderr)
	}
}

// TestGateFlags: the gate's flags are checked.
func TestGateFlags(t *testing.T) {
	for _, args := range [][]string{
		{"run", "--fail-on", "nothing", "--", "true"},
		{"run", "--max-leaked", "1KiB", "--", "true"},
		{"run", "--fail-on", "leaks", "--fail-status", "0", "--", "true"},
		{"report", "--junit", "x.xml", "t.hst"},
	} {
		if code, stderr := exitCode(t, cli(t, args...)); code != 2 {
			t.Errorf("%v: status %d, want 2\n%s", args, code, stderr)
		}
	}
}
