package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"syscall"
	"testing"
	"time"

	"github.com/heapscope/heapscope/internal/testutil"
	"github.com/heapscope/heapscope/report"
)

// diffJSON runs `heapscope diff --format json` of base and new, and returns
// the diff and its text (for messages).
func diffJSON(t *testing.T, base, new string) (*report.DiffJSON, []byte) {
	t.Helper()
	out := filepath.Join(t.TempDir(), "diff.json")
	if code, errs := runCLI(t, "diff", "--format", "json", "-o", out, base, new); code != 0 {
		t.Fatalf("diff: exit %d: %s", code, errs)
	}
	b, err := os.ReadFile(out)
	rmust(t, err)
	var d report.DiffJSON
	rmust(t, json.Unmarshal(b, &d))
	return &d, b
}

// topGrowth is a line of top's site table for grow_heap, with its growth
// per second.
var topGrowth = regexp.MustCompile(`(?m)^\s+\S+ [KMG]?i?B\s+\+(\S+ [KMG]?i?B)\s+[\d,]+\s+0\s+grow_heap`)

// checkTopGrowth starts top, whose output goes to out, until it has shown
// grow_heap's growth three times or for within, ends it with Ctrl-C, and
// checks that the growth shown is the workload's 200000 B/s ±10%.
func checkTopGrowth(t *testing.T, top *exec.Cmd, out *testutil.SyncBuffer, within time.Duration) {
	t.Helper()
	rmust(t, top.Start())
	var gs [][]string
	for deadline := time.Now().Add(within); len(gs) < 3 && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		gs = topGrowth.FindAllStringSubmatch(out.String(), -1)
	}
	top.Process.Signal(syscall.SIGINT)
	if err := top.Wait(); err != nil {
		t.Fatalf("%v: %v: %v\n%s", top.Args, err, top.Stderr, out.String())
	}
	if len(gs) < 3 {
		t.Fatalf("%v never showed grow_heap growing three times:\n%s", top.Args, out.String())
	}
	for _, g := range gs[1:] { // the first interval is from top's start, not a whole one
		if v := parseSize(t, g[1]); v < 200000*0.9 || v > 200000*1.1 {
			t.Errorf("growth %s, want 200000 B/s ±10%%", g[1])
		}
	}
}

// synthTrace writes writeSynthTrace's trace in a new folder and returns its
// path.
func synthTrace(t *testing.T) string {
	t.Helper()
	trace := filepath.Join(t.TempDir(), "t.hst")
	writeSynthTrace(t, trace, 0)
	return trace
}

// cliFile runs the heapscope command args with "-o" a new file called name,
// which it returns; a non-zero exit fails the test.
func cliFile(t *testing.T, name string, args ...string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), name)
	if code, errs := runCLI(t, append([]string{args[0], "-o", out}, args[1:]...)...); code != 0 {
		t.Fatalf("%q: exit %d: %s", args, code, errs)
	}
	return out
}
