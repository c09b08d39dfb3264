package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/heapscope/heapscope/internal/testutil"
)

func TestProgressLine(t *testing.T) {
	t0 := time.Now()
	p := &progress{w: io.Discard, label: "x.hst", total: 100 << 20, start: t0}
	p.read.Store(25 << 20)
	if got, want := p.line(t0.Add(5*time.Second)), "reading x.hst: 25.0 MiB of 100.0 MiB (25%), 5.0 MiB/s, 15s left"; got != want {
		t.Errorf("line %q, want %q", got, want)
	}
	// Definitions read again by each worker: never past 100%.
	p.read.Store(120 << 20)
	if got, want := p.line(t0.Add(5*time.Second)), "reading x.hst: 100.0 MiB of 100.0 MiB (100%), analysing"; got != want {
		t.Errorf("line %q, want %q", got, want)
	}
	var nilp *progress
	nilp.add(1)
	nilp.finish()
	if nilp.counter() != nil {
		t.Error("a nil meter counts")
	}
}

// TestReportProgress reads a large trace (80M malloc+free pairs of churn,
// about 180 MB) with `heapscope report`: on a terminal (a tmux pane) it shows
// progress, and Ctrl-C stops it at once, leaving no output file; with
// standard error not a terminal it prints nothing.
func TestReportProgress(t *testing.T) {
	t.Cleanup(testutil.Cleanup)
	dir := t.TempDir()
	big := bigChurnTrace(t, dir)

	// Not a terminal: nothing on standard error.
	if code, errs := exitCode(t, cli(t, "report", "-o", filepath.Join(dir, "quiet.txt"), big)); code != 0 || errs != "" {
		t.Errorf("report with stderr not a terminal: exit %d, stderr %q; want 0 and nothing", code, errs)
	}

	out, done := filepath.Join(dir, "rep.txt"), filepath.Join(dir, "done")
	// The trap keeps the shell, not heapscope, from dying of the Ctrl-C.
	p := newTmuxPane(t, fmt.Sprintf("trap true INT; %s report -o %s %s; echo rc=$? > %s; sleep 60", cliBinary(t), out, big, done))
	// Under load the read may be done before a capture catches it: the
	// meter then says it is analysing.
	meter := regexp.MustCompile(`reading big\.hst: [\d.]+ [KMG]?i?B of [\d.]+ MiB \(\d+%\), ([\d.]+ [KMG]?i?B/s, \d+s left|analysing)`)
	p.waitFor("the progress meter", func(s string) bool { return meter.MatchString(s) })
	p.keys("C-c")
	rc := waitLine(done, 10*time.Second)
	if rc != "rc=130\n" {
		t.Errorf("after Ctrl-C: %q, want rc=130", rc)
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("the interrupted report left %s (%v)", out, err)
	}
	if s := p.screen(); meter.MatchString(s) {
		t.Errorf("the meter's line was left on the screen:\n%s", s)
	}
}

// TestServeProgress serves a large trace (80M malloc+free pairs of churn)
// in a terminal without an index file: the URL comes once the report's pass
// is read, a meter shows the windowed index built behind it, its line is
// gone once the index is there, and Ctrl-C stops serve cleanly.
func TestServeProgress(t *testing.T) {
	t.Cleanup(testutil.Cleanup)
	dir := t.TempDir()
	big := bigChurnTrace(t, dir)
	url, done := filepath.Join(dir, "url"), filepath.Join(dir, "done")
	p := newTmuxPane(t, fmt.Sprintf("trap true INT; %s serve --no-index-cache %s > %s; echo rc=$? > %s; sleep 60",
		cliBinary(t), big, url, done))
	indexing := regexp.MustCompile(`indexing big\.hst: [\d.]+ [KMG]?i?B of [\d.]+ MiB \(\d+%\)`)
	p.waitFor("the index's meter", func(s string) bool { return indexing.MatchString(s) })
	if b, _ := os.ReadFile(url); !strings.HasPrefix(string(b), "http://127.0.0.1:") {
		t.Errorf("no URL while the index is built: %q", b)
	}
	// 177 MiB: about 25 s at the 7 MiB/s CI's
	// other tests once left it.
	p.waitWithin(2*time.Minute, "the index built and its meter gone", func(s string) bool { return !indexing.MatchString(s) })
	p.keys("C-c")
	rc := waitLine(done, 10*time.Second)
	if rc != "rc=0\n" {
		t.Errorf("after Ctrl-C: %q, want rc=0\n%s", rc, p.screen())
	}
}

// bigChurnTrace records 80M malloc+free pairs of churn (about 180 MB) into
// dir/big.hst: work long enough for a progress meter (it shows after a
// second; `report` reads 20M pairs in about 0.6 s on a quiet 2-vCPU machine).
func bigChurnTrace(t *testing.T, dir string) string {
	t.Helper()
	churn := testutil.MustBuild(t, "churn", testutil.Options{})
	big := filepath.Join(dir, "big.hst")
	if code, errs := exitCode(t, cli(t, "run", "-q", "-o", big, "--", churn, "80000000", "1")); code != 0 {
		t.Fatalf("run churn: exit %d: %s", code, errs)
	}
	return big
}

// waitLine returns the file's text once it is a whole line (a shell's
// report of how the command in a pane ended), or what it holds after d.
func waitLine(path string, d time.Duration) string {
	var b []byte
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if b, _ = os.ReadFile(path); strings.HasSuffix(string(b), "\n") {
			break
		}
	}
	return string(b)
}
