package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/heapscope/heapscope/internal/ebpf"
	"github.com/heapscope/heapscope/internal/testutil"
	"github.com/heapscope/heapscope/report"
)

// diffTraces records two runs of diff_leak, leaking 3 and then 6 blocks of
// 1000 bytes at grow_leak, and returns their paths.
func diffTraces(t *testing.T) (base, new string) {
	t.Helper()
	bin := testutil.MustBuild(t, "diff_leak", testutil.Options{})
	dir := t.TempDir()
	base, new = filepath.Join(dir, "base.hst"), filepath.Join(dir, "new.hst")
	recordPreload(t, base, bin, "3")
	recordPreload(t, new, bin, "6")
	return base, new
}

func TestDiffTwoRuns(t *testing.T) {
	t.Cleanup(testutil.Cleanup)
	base, new := diffTraces(t)
	dir := filepath.Dir(base)

	d, b := diffJSON(t, base, new)
	want := report.Delta{LeakedBytes: 3000, LeakedBlocks: 3, Bytes: 3000, Calls: 3}
	if d.Change != want {
		t.Errorf("total change %+v, want %+v", d.Change, want)
	}
	if len(d.Sites) != 1 {
		t.Fatalf("%d changed sites, want only grow_leak: %s", len(d.Sites), b)
	}
	s := d.Sites[0]
	if len(s.Stack) == 0 || s.Stack[0].Function != "grow_leak" {
		t.Fatalf("first changed site %+v, want grow_leak", s.Stack)
	}
	if s.Change != want || s.Base.LeakedBytes != 3000 || s.New.LeakedBytes != 6000 {
		t.Errorf("grow_leak: %+v", s)
	}
	// fixed_leak, churn_site and peak_site are there, unchanged.
	if d.Unchanged < 3 {
		t.Errorf("%d unchanged sites, want at least 3", d.Unchanged)
	}

	// The text: totals first, then grow_leak as the first site.
	txt := filepath.Join(dir, "diff.txt")
	if code, errs := runCLI(t, "diff", "-o", txt, base, new); code != 0 {
		t.Fatalf("diff: exit %d: %s", code, errs)
	}
	b, err := os.ReadFile(txt)
	rmust(t, err)
	text := string(b)
	ti, si := strings.Index(text, "TOTALS"), strings.Index(text, "SITES BY LARGEST CHANGE: 1 site changed")
	if ti < 0 || si < ti {
		t.Fatalf("text diff lacks its totals or its sites:\n%s", text)
	}
	sites := strings.Split(text[si:], "\n")
	if len(sites) < 3 || !strings.Contains(sites[1], "leaked +2.9 KiB (2.9 KiB → 5.9 KiB)") || !strings.Contains(sites[2], "grow_leak") {
		t.Errorf("first site of the text diff:\n%s", text[si:])
	}
	if !regexp.MustCompile(`leaked bytes +3\.9 KiB +6\.8 KiB +\+2\.9 KiB`).MatchString(text) {
		t.Errorf("totals:\n%s", text)
	}

	// The pprof profile of the difference, read by go tool pprof.
	prof := filepath.Join(dir, "diff.pb.gz")
	if code, errs := runCLI(t, "export", "--base", base, "-o", prof, new); code != 0 {
		t.Fatalf("export --base: exit %d: %s", code, errs)
	}
	top, err := exec.Command("go", "tool", "pprof", "-top", "-sample_index=inuse_space", "-unit=B", prof).CombinedOutput()
	if err != nil {
		t.Fatalf("go tool pprof: %v\n%s", err, top)
	}
	// "      3000B   100%   100%      3000B   100%  grow_leak"
	if !regexp.MustCompile(`(?m)^\s+3000B\s+100%\s+100%\s+3000B\s+100%\s+grow_leak$`).Match(top) {
		t.Errorf("pprof -top of the diff:\n%s", top)
	}
	calls, err := exec.Command("go", "tool", "pprof", "-top", "-sample_index=alloc_objects", prof).CombinedOutput()
	if err != nil || !regexp.MustCompile(`(?m)^\s+3\s+100%\s+100%\s+3\s+100%\s+grow_leak$`).Match(calls) {
		t.Errorf("pprof -top alloc_objects of the diff: %v\n%s", err, calls)
	}

	// Swapped, the change is negative: pprof -base semantics.
	if code, errs := runCLI(t, "export", "--base", new, "-o", prof, base); code != 0 {
		t.Fatalf("export --base: exit %d: %s", code, errs)
	}
	neg, err := exec.Command("go", "tool", "pprof", "-top", "-sample_index=inuse_space", "-unit=B", prof).CombinedOutput()
	if err != nil || !regexp.MustCompile(`(?m)^\s+-3000B\s.*grow_leak$`).Match(neg) {
		t.Errorf("pprof -top of the reversed diff: %v\n%s", err, neg)
	}
}

func TestDiffBadInput(t *testing.T) {
	t.Cleanup(testutil.Cleanup)
	base, new := diffTraces(t)
	dir := filepath.Dir(base)
	notTrace := filepath.Join(dir, "not.hst")
	rmust(t, os.WriteFile(notTrace, []byte("this is not a trace, only some text long enough to be read as a header\n"), 0o600))
	for _, args := range [][]string{
		{"diff", base, notTrace},
		{"diff", notTrace, new},
		{"diff", base, filepath.Join(dir, "missing.hst")},
	} {
		code, errs := runCLI(t, args...)
		if code == 0 || strings.Count(strings.TrimSpace(errs), "\n") > 0 || !strings.Contains(errs, filepath.Base(args[len(args)-1])) && !strings.Contains(errs, "not.hst") {
			t.Errorf("%q: exit %d, stderr %q; want non-zero and one line naming the file", args, code, errs)
		}
	}
	if code, errs := runCLI(t, "diff", base); code != 2 || !strings.Contains(errs, "BASE NEW") {
		t.Errorf("diff with one file: exit %d, %q", code, errs)
	}
	if code, errs := runCLI(t, "export", "--base", base, "--format", "collapsed", new); code != 2 || !strings.Contains(errs, "pprof") {
		t.Errorf("export --base --format collapsed: exit %d, %q", code, errs)
	}

	// A truncated trace: a warning, and the diff of what it holds.
	data, err := os.ReadFile(new)
	rmust(t, err)
	cut := filepath.Join(dir, "cut.hst")
	rmust(t, os.WriteFile(cut, data[:len(data)*2/3], 0o600))
	// (The built command: the warnings go to the process's standard error.)
	code, errs := exitCode(t, cli(t, "diff", base, cut))
	if code != 0 || !strings.Contains(errs, "warning") || !strings.Contains(errs, "cut.hst") {
		t.Errorf("diff with a truncated trace: exit %d, stderr %q; want 0 and a warning", code, errs)
	}
}

// TestDiffAcrossProviders diffs a preload trace with an eBPF trace of the
// same workload: the stacks line up, and only grow_leak changed.
func TestDiffAcrossProviders(t *testing.T) {
	testutil.SkipWithoutEBPF(t, ebpf.Available())
	t.Cleanup(testutil.Cleanup)
	bin := testutil.MustBuild(t, "diff_leak", testutil.Options{})
	dir := t.TempDir()
	base, new := filepath.Join(dir, "preload.hst"), filepath.Join(dir, "ebpf.hst")
	// Each provider's default unwinding: the interposer's walk and the eBPF
	// provider's tables (libc's loaded before its code runs, though it is
	// mapped after the launch's attach) give the same stacks, to _start.
	if code, errs := exitCode(t, cli(t, "run", "-q", "-o", base, "--", bin, "3")); code != 0 {
		t.Fatalf("run: exit %d: %s", code, errs)
	}
	if code, errs := exitCode(t, cli(t, "run", "-q", "--provider", "ebpf", "-o", new, "--", bin, "6")); code != 0 {
		t.Fatalf("run --provider ebpf: exit %d: %s", code, errs)
	}
	d, b := diffJSON(t, base, new)
	if len(d.Sites) != 1 || len(d.Sites[0].Stack) == 0 || d.Sites[0].Stack[0].Function != "grow_leak" ||
		d.Sites[0].Change.LeakedBytes != 3000 || d.Base.Provider != "preload" || d.New.Provider != "ebpf" {
		t.Errorf("diff of a preload and an eBPF trace:\n%s", b)
	}
	if len(d.Sites) == 1 && d.Sites[0].Stack[len(d.Sites[0].Stack)-1].Function != "_start" {
		t.Errorf("the changed site's stack does not reach _start:\n%s", b)
	}
}

// TestDiffTwoBuilds diffs runs of two builds of diff_leak whose functions lie
// at other offsets (aligned to 64 bytes in one: grow_leak at 0x1210 and
// 0x1240 with this machine's gcc): the stacks match by function, file and
// line, and only grow_leak changed.
func TestDiffTwoBuilds(t *testing.T) {
	t.Cleanup(testutil.Cleanup)
	a := testutil.MustBuild(t, "diff_leak", testutil.Options{})
	b := testutil.MustBuild(t, "diff_leak", testutil.Options{Flags: []string{"-falign-functions=64"}})
	dir := t.TempDir()
	base, new := filepath.Join(dir, "a.hst"), filepath.Join(dir, "b.hst")
	recordPreload(t, base, a, "3")
	recordPreload(t, new, b, "6")
	d, data := diffJSON(t, base, new)
	if len(d.Sites) != 1 || len(d.Sites[0].Stack) == 0 || d.Sites[0].Stack[0].Function != "grow_leak" || d.Sites[0].Change.LeakedBytes != 3000 {
		t.Fatalf("diff of two builds:\n%s", data)
	}
	if s := d.Sites[0]; s.Base.Calls != 3 || s.New.Calls != 6 {
		t.Errorf("grow_leak's calls: %d in the base, %d in the new build; want 3 and 6", s.Base.Calls, s.New.Calls)
	}
}

// TestDiffSampled diffs an exact trace with a sampled one: the diff says
// which trace's counts are estimates, in text and JSON.
func TestDiffSampled(t *testing.T) {
	t.Cleanup(testutil.Cleanup)
	bin := testutil.MustBuild(t, "diff_leak", testutil.Options{})
	dir := t.TempDir()
	base, new := filepath.Join(dir, "exact.hst"), filepath.Join(dir, "sampled.hst")
	recordPreload(t, base, bin, "3")
	if code, errs := exitCode(t, cli(t, "run", "-q", "--sample", "4KiB", "-o", new, "--", bin, "6")); code != 0 {
		t.Fatalf("run --sample: exit %d: %s", code, errs)
	}
	code, errs := runCLI(t, "diff", "-o", filepath.Join(dir, "diff.txt"), base, new)
	if code != 0 {
		t.Fatalf("diff: exit %d: %s", code, errs)
	}
	b, err := os.ReadFile(filepath.Join(dir, "diff.txt"))
	rmust(t, err)
	note := "note: " + new + ": its counts are estimated (sampled every 4 KiB on average)"
	if !strings.Contains(string(b), note) || strings.Contains(string(b), base+": its counts are estimated") {
		t.Errorf("the text diff does not say that only %s is estimated (want %q):\n%s", new, note, b)
	}
	out := filepath.Join(dir, "diff.json")
	if code, errs := runCLI(t, "diff", "--format", "json", "-o", out, base, new); code != 0 {
		t.Fatalf("diff --format json: exit %d: %s", code, errs)
	}
	b, err = os.ReadFile(out)
	rmust(t, err)
	var d report.DiffJSON
	rmust(t, json.Unmarshal(b, &d))
	if len(d.New.Limitations) == 0 || d.New.Limitations[0] != "counts estimated (sampled every 4 KiB on average)" {
		t.Errorf("new's limitations %q", d.New.Limitations)
	}
	for _, l := range d.Base.Limitations {
		if strings.Contains(l, "estimated") {
			t.Errorf("base's limitations %q", d.Base.Limitations)
		}
	}
}
