package main

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/heapscope/heapscope/internal/testutil"
	"github.com/heapscope/heapscope/query"
	"github.com/heapscope/heapscope/report"
)

// traceRun traces args with `heapscope run` into dir/name.
func traceRun(t *testing.T, dir, name string, args ...string) string {
	t.Helper()
	trace := filepath.Join(dir, name)
	// No leak check: these reports are of every block live at the end.
	cmd := cli(t, append([]string{"run", "-q", "--no-leak-check", "-o", trace, "--"}, args...)...)
	if code, stderr := exitCode(t, cmd); code != 0 {
		t.Fatalf("run %q: exit %d: %s", args, code, stderr)
	}
	return trace
}

// sameTotals compares the heap totals of two reports.
func sameTotals(t *testing.T, what string, got, want *report.JSON) {
	t.Helper()
	g, w := got.Summary, want.Summary
	g.PeakTimeNs, w.PeakTimeNs = 0, 0
	if g != w {
		t.Errorf("%s:\n got  %+v\n want %+v", what, g, w)
	}
	if len(got.Processes) != 1 {
		t.Errorf("%s: %d processes, want 1", what, len(got.Processes))
	}
}

// TestReportPerProcess: a shim that forks and execs the workload, traced
// with run, gives two processes; `report --pid` of the inner one (and
// `--exe`) is the report of the workload traced alone.
func TestReportPerProcess(t *testing.T) {
	dir := t.TempDir()
	known := testutil.MustBuild(t, "report_known", testutil.Options{})
	shim := testutil.MustBuild(t, "report_shim", testutil.Options{})
	alone := reportJSON(t, traceRun(t, dir, "alone.hst", known))
	trace := traceRun(t, dir, "shim.hst", shim, known)

	all := reportJSON(t, trace)
	if len(all.Processes) != 2 {
		t.Fatalf("the shim's trace has processes %+v, want the shim and the workload", all.Processes)
	}
	inner := uint32(0)
	for _, p := range all.Processes {
		if p.Exe == known {
			inner = p.PID
		}
	}
	if inner == 0 {
		t.Fatalf("no process ran report_known: %+v", all.Processes)
	}
	pid := strconv.FormatUint(uint64(inner), 10)
	sameTotals(t, "report --pid "+pid, reportJSON(t, "--pid", pid, trace), alone)
	exe := filepath.Base(known) // report_known-HASH
	sameTotals(t, "report --exe "+exe, reportJSON(t, "--exe", exe, trace), alone)

	// Each process's own totals add up to the whole, and the inner's are
	// the workload's.
	var calls, leaked uint64
	for _, p := range all.Processes {
		calls += p.Allocations + p.Reallocations
		leaked += p.LeakedBytes
		if p.PID == inner && (p.Allocations != alone.Summary.Allocations || p.LeakedBytes != alone.Summary.LeakedBytes) {
			t.Errorf("the inner process's totals %+v; alone: %+v", p, alone.Summary)
		}
	}
	if calls != all.Summary.Allocations+all.Summary.Reallocations || leaked != all.Summary.LeakedBytes {
		t.Errorf("processes' totals: %d calls, %d leaked; the summary's %+v", calls, leaked, all.Summary)
	}

	// The text lists the processes with their totals first, and marks
	// each site with its process.
	out := filepath.Join(dir, "r.txt")
	if code, stderr := runCLI(t, "report", "-o", out, trace); code != 0 {
		t.Fatalf("report: %d %s", code, stderr)
	}
	b, _ := os.ReadFile(out)
	text := string(b)
	head := text[:strings.Index(text, "SUMMARY")]
	if n := len(regexp.MustCompile(`(?m)^process \d+: .*\n    [\d,]+ calls, .* allocated, .* leaked in .*, .* live at the peak\n`).FindAllString(head, -1)); n != 2 {
		t.Errorf("the text does not list 2 processes with their totals:\n%s", head)
	}
	if !strings.Contains(text, "leaked in 3 blocks from pid "+pid+":") {
		t.Errorf("the leak sites are not marked with their process:\n%s", text)
	}

	// --pid of a process the trace lacks.
	if code, stderr := runCLI(t, "report", "--pid", "1", trace); code != 1 || !strings.Contains(stderr, "no process of pid 1") || !strings.Contains(stderr, "("+exe+")") {
		t.Errorf("--pid 1: exit %d, %q", code, stderr)
	}
}

// TestReportExecShim: a shell script that execs the workload keeps its
// PID: `report --exe` takes only the program it became.
func TestReportExecShim(t *testing.T) {
	dir := t.TempDir()
	known := testutil.MustBuild(t, "report_known", testutil.Options{})
	script := filepath.Join(dir, "shim.sh")
	rmust(t, os.WriteFile(script, []byte("#!/bin/sh\nx=$(echo shim)\nexec \"$@\"\n"), 0o755))
	alone := reportJSON(t, traceRun(t, dir, "alone.hst", known))
	trace := traceRun(t, dir, "shim.hst", script, known)
	exe := filepath.Base(known)
	sameTotals(t, "report --exe "+exe, reportJSON(t, "--exe", exe, trace), alone)
	all := reportJSON(t, trace)
	if all.Summary.Allocations <= alone.Summary.Allocations {
		t.Errorf("the shell allocated nothing? %+v", all.Summary)
	}
}

// TestMultiProcessPeak: in a g++ compile, cc1plus exits with megabytes
// still live before as starts. A process's blocks leave the heap when it
// exits (they stay its leaks), so the trace's peak is the largest heap the
// processes had at one time, computed here from each process's timeline
// (`report --pid P --format json`), and not cc1plus's leaks plus as's peak;
// the index serve answers from has the same peak.
func TestMultiProcessPeak(t *testing.T) {
	gxx := testutil.Tool(t, "g++")
	dir := t.TempDir()
	src := filepath.Join(dir, "x.cpp")
	// Many symbols: as holds more than cc1plus leaves behind.
	var b strings.Builder
	b.WriteString("#include <map>\n#include <string>\nint f() { std::map<std::string, int> m; m[\"x\"] = 1; return m.size(); }\n")
	for i := 0; i < 30000; i++ {
		fmt.Fprintf(&b, "int variable_with_a_long_name_%d = %d;\n", i, i)
	}
	if err := os.WriteFile(src, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	trace := traceRun(t, dir, "gxx.hst", gxx, "-O1", "-c", "-o", filepath.Join(dir, "x.o"), src)
	all := reportJSON(t, trace)
	type step struct {
		t     int64
		bytes uint64
	}
	var steps [][]step
	var times []int64
	var sumPeaks, leaked, maxLeak uint64
	for _, p := range all.Processes {
		d := reportJSON(t, trace, "--pid", strconv.Itoa(int(p.PID)))
		var s []step
		for _, pt := range d.Timeline {
			s = append(s, step{pt.TNs, pt.LiveBytes})
			times = append(times, pt.TNs)
		}
		steps = append(steps, s)
		sumPeaks += d.Summary.PeakBytes
		leaked += d.Summary.LeakedBytes
		maxLeak = max(maxLeak, d.Summary.LeakedBytes+d.Summary.SuppressedBytes)
		if last := s[len(s)-1]; p.Exited && last.bytes != 0 {
			t.Errorf("process %d (%s) exited, but its timeline ends with %d bytes in the heap", p.PID, p.Exe, last.bytes)
		}
	}
	if len(steps) < 3 {
		t.Fatalf("g++'s trace has processes %+v, want the driver, cc1plus and as", all.Processes)
	}
	// The largest sum, at one time, of what each process had in the heap
	// at its latest timeline point; nothing once it exited (the last
	// point of an exited process's timeline is its end).
	var simultaneous uint64
	for _, tm := range times {
		var sum uint64
		for k, s := range steps {
			if all.Processes[k].Exited && tm >= s[len(s)-1].t {
				continue
			}
			for i := len(s) - 1; i >= 0; i-- {
				if s[i].t <= tm {
					sum += s[i].bytes
					break
				}
			}
		}
		simultaneous = max(simultaneous, sum)
	}
	peak := all.Summary.PeakBytes
	t.Logf("peak %d bytes; largest simultaneous heap %d; per-process peaks sum to %d", peak, simultaneous, sumPeaks)
	// Each timeline point is the largest heap of its bucket (about 1/512 of
	// the trace): the sum at one point is within a few percent.
	if math.Abs(float64(peak)-float64(simultaneous)) > 0.03*float64(simultaneous) {
		t.Errorf("peak %d bytes, but the processes' heaps at one time sum to at most %d", peak, simultaneous)
	}
	if all.Summary.LeakedBytes != leaked {
		t.Errorf("leaks %d, the processes' own sum to %d: an exit must not change leaks", all.Summary.LeakedBytes, leaked)
	}
	if simultaneous+maxLeak/2 > sumPeaks {
		t.Errorf("the processes' heaps overlap (%d at once, peaks sum to %d): this compile does not try the rule", simultaneous, sumPeaks)
	}
	x, err := query.Build(trace, query.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if p, ok := x.Peak(x.Span(query.Filter{})); !ok || p.Bytes != peak {
		t.Errorf("the index's peak %+v, the report's %d bytes", p, peak)
	}
}
