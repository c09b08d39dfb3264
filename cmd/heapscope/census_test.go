package main

import (
	"bufio"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/heapscope/heapscope/census"
	"github.com/heapscope/heapscope/internal/ebpf"
	"github.com/heapscope/heapscope/internal/testutil"
)

// TestAttachKilledMidCensus kills heapscope attach while its census has the
// process stopped, at several moments: every thread runs again, and the
// heap is whole.
func TestAttachKilledMidCensus(t *testing.T) {
	testutil.SkipWithoutEBPF(t, ebpf.Available())
	t.Cleanup(testutil.Cleanup)
	bin := testutil.MustBuild(t, "census_bench", testutil.Options{})
	w := exec.Command(bin, "300000", "mixed", "2")
	stdin, stdout := testutil.StartPiped(t, w)
	defer stdin.Close()
	if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || strings.TrimSpace(line) != "ready" {
		t.Fatalf("census_bench said %q (%v)", line, err)
	}
	pid := w.Process.Pid
	killed := 0
	for i, delay := range []time.Duration{0, 5 * time.Millisecond, 20 * time.Millisecond, 60 * time.Millisecond} {
		a := cli(t, "attach", "-q", "-p", strconv.Itoa(pid), "-o", filepath.Join(t.TempDir(), fmt.Sprintf("k%d.hst", i)))
		if err := a.Start(); err != nil {
			t.Fatal(err)
		}
		// Wait for the census's stop, then kill heapscope inside it.
		deadline := time.Now().Add(30 * time.Second)
		for testutil.StoppedThreads(t, pid) == 0 && time.Now().Before(deadline) {
			time.Sleep(200 * time.Microsecond)
		}
		time.Sleep(delay)
		inStop := testutil.StoppedThreads(t, pid) > 0
		a.Process.Kill()
		a.Wait()
		if inStop {
			killed++
		}
		deadline = time.Now().Add(10 * time.Second)
		for testutil.StoppedThreads(t, pid) > 0 {
			if time.Now().After(deadline) {
				t.Fatalf("kill %d (%v into the stop): %d threads of the program still stopped", i, delay, testutil.StoppedThreads(t, pid))
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	if killed == 0 {
		t.Error("heapscope was never killed while the process was stopped: the test did not test")
	}
	t.Logf("%d of 4 kills while the process was stopped", killed)
	c, err := census.TakeProcess(pid, census.ProcessOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Problems) > 0 {
		t.Errorf("after the kills: %v", c.Problems)
	}
}

// TestAttachWarnsJemalloc: attach traces redis-server (jemalloc) and says in
// one line that it has no census.
func TestAttachWarnsJemalloc(t *testing.T) {
	testutil.SkipWithoutEBPF(t, ebpf.Available())
	redis := testutil.StartRedis(t)
	trace := filepath.Join(t.TempDir(), "redis.hst")
	a := cli(t, "attach", "-q", "--duration", "500ms", "-p", strconv.Itoa(redis.Process.Pid), "-o", trace)
	b, err := a.CombinedOutput()
	if err != nil {
		t.Fatalf("attach: %v\n%s", err, b)
	}
	var warnings []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, "census") {
			warnings = append(warnings, l)
		}
	}
	if len(warnings) != 1 || !strings.Contains(warnings[0], "no census") || !strings.Contains(warnings[0], "jemalloc") {
		t.Errorf("attach to redis-server said %q; want one line saying there is no census, naming jemalloc", b)
	}
}

// TestInfoAndSnapshotPID: `info PID` explains a running process's RSS, and
// `snapshot PID` writes a trace that info and report read.
func TestInfoAndSnapshotPID(t *testing.T) {
	bin := testutil.MustBuild(t, "census_known", testutil.Options{CXX: true})
	w := exec.Command(bin)
	stdin, stdout := testutil.StartPiped(t, w)
	defer stdin.Close()
	testutil.ReadUntil(t, bufio.NewReader(stdout), "census_known", func(l string) bool { return strings.TrimSpace(l) == "ready" })
	pid := strconv.Itoa(w.Process.Pid)
	b, err := cli(t, "info", pid).CombinedOutput()
	if err != nil {
		t.Fatalf("info %s: %v\n%s", pid, err, b)
	}
	for _, want := range []string{"glibc malloc, 5 arena(s)", "RSS ", "heap in use", "mmapped chunks", "file-backed, clean or shared",
		"smaps_rollup says", "what the blocks are", "Circle", "strings ("} {
		if !strings.Contains(string(b), want) {
			t.Errorf("info %s lacks %q:\n%s", pid, want, b)
		}
	}
	snap := filepath.Join(t.TempDir(), "known.hst")
	if b, err := cli(t, "snapshot", "-o", snap, pid).CombinedOutput(); err != nil || !strings.Contains(string(b), "census of pid "+pid) {
		t.Fatalf("snapshot: %v\n%s", err, b)
	}
	b, err = cli(t, "info", snap).CombinedOutput()
	if err != nil || !strings.Contains(string(b), "censuses         1") && !strings.Contains(string(b), "censuses") {
		t.Errorf("info of the snapshot: %v\n%s", err, b)
	}
	b, err = cli(t, "report", snap).CombinedOutput()
	if err != nil || !strings.Contains(string(b), "BEFORE THE TRACE") || !strings.Contains(string(b), "[allocated before the trace]") {
		t.Errorf("report of the snapshot: %v\n%s", err, b)
	}
	if b, err := cli(t, "info", "999999999").CombinedOutput(); err == nil || strings.Count(strings.TrimSpace(string(b)), "\n") > 0 {
		t.Errorf("info of no process: %v, said %q; want one line of error", err, b)
	}
}
