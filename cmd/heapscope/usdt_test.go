package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/heapscope/heapscope/export"
	"github.com/heapscope/heapscope/internal/collector"
	"github.com/heapscope/heapscope/internal/ebpf"
	"github.com/heapscope/heapscope/internal/testutil"
	"github.com/heapscope/heapscope/report"
)

// siteTotals sums a trace's estimates by the first frame of each stack
// (inlined frames included) that is one of names: bytes allocated and live.
func siteTotals(t *testing.T, trace string, names ...string) (bytes, live map[string]uint64) {
	t.Helper()
	rep, err := report.Load(trace, report.LoadOptions{})
	rmust(t, err)
	bytes, live = map[string]uint64{}, map[string]uint64{}
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	for _, st := range rep.Profile.Stacks {
	frames:
		for _, a := range st.Frames {
			for _, f := range rep.Resolver().Frames(st.PID, a) {
				if want[f.Function] {
					bytes[f.Function] += st.Bytes
					live[f.Function] += st.LiveBytes
					break frames
				}
			}
		}
	}
	return bytes, live
}

// TestAttachUSDT: heapscope attach --source usdt traces usdt_sampler
// through its otel_memory probes into a trace whose report estimates, per
// call site, exactly what the program's sampler weighed: allocated bytes
// its weights, live bytes its live weights.
func TestAttachUSDT(t *testing.T) {
	testutil.SkipWithoutEBPF(t, ebpf.Available())
	t.Cleanup(testutil.Cleanup)
	bin := testutil.MustBuild(t, "usdt_sampler", testutil.Options{})
	cmd := exec.Command(bin, "65536", "2", "wait")
	in, err := cmd.StdinPipe()
	rmust(t, err)
	out, err := cmd.StdoutPipe()
	rmust(t, err)
	rmust(t, cmd.Start())
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	r := bufio.NewReader(out)
	if line, _ := r.ReadString('\n'); line != "ready\n" {
		t.Fatalf("usdt_sampler said %q", line)
	}
	trace := filepath.Join(t.TempDir(), "u.hst")
	h := cli(t, "attach", "-q", "--source", "usdt", "--sample", "64KiB", "-o", trace, "-p", strconv.Itoa(cmd.Process.Pid))
	var errb syncBuffer
	h.Stderr = &errb
	rmust(t, h.Start())
	t.Cleanup(func() { h.Process.Kill(); h.Wait() })
	waitStderr(t, &errb, "tracing pid")
	io.WriteString(in, "\n")
	weights, liveWeights := map[string]uint64{}, map[string]uint64{}
	for {
		line, err := r.ReadString('\n')
		rmust(t, err)
		f := strings.Fields(line)
		if len(f) == 18 && f[0] == "site" {
			weights[f[1]], _ = strconv.ParseUint(f[13], 10, 64)
			liveWeights[f[1]], _ = strconv.ParseUint(f[17], 10, 64)
		}
		if f[0] == "semaphores" {
			if f[1] == "0" || f[2] == "0" {
				t.Errorf("semaphores %s %s while attached", f[1], f[2])
			}
			break
		}
	}
	time.Sleep(1500 * time.Millisecond) // flushed
	io.WriteString(in, "\n")
	if err := h.Wait(); err != nil {
		t.Fatalf("attach: %v: %s", err, errb.String())
	}
	bytes, live := siteTotals(t, trace, "leak_small", "leak_big", "churn", "grow")
	for site, w := range weights {
		if bytes[site] != w || live[site] != liveWeights[site] {
			t.Errorf("%s: the report estimates %d bytes, %d live; the sampler weighed %d, %d live", site, bytes[site], live[site], w, liveWeights[site])
		}
	}
	if weights["churn"] == 0 {
		t.Errorf("nothing weighed: %v", weights)
	}
}

func waitStderr(t *testing.T, b *syncBuffer, want string) {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); !strings.Contains(b.String(), want); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no %q: %s", want, b.String())
		}
	}
}

// TestEmitUSDTAttach: a program run with `heapscope run --sample
// --emit-usdt` is read through its otel_memory probes by `heapscope attach
// --source usdt` (as the OpenTelemetry profiler would read it): the
// attached session's estimates per function are the run's own, within a
// byte per sample (the probes' weights are the run's estimates, rounded).
func TestEmitUSDTAttach(t *testing.T) {
	testutil.SkipWithoutEBPF(t, ebpf.Available())
	t.Cleanup(testutil.Cleanup)
	bin := testutil.MustBuild(t, "export_rounds", testutil.Options{})
	dir := t.TempDir()
	runTrace, attTrace := filepath.Join(dir, "run.hst"), filepath.Join(dir, "att.hst")
	run := cli(t, "run", "-q", "--sample", "1KiB", "--emit-usdt", "-o", runTrace, "--", bin, "3")
	w := startRounds(t, run)
	pid := 0
	// The program is heapscope's child.
	for deadline := time.Now().Add(30 * time.Second); pid == 0 && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if b, err := exec.Command("pgrep", "-P", strconv.Itoa(run.Process.Pid)).Output(); err == nil {
			pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		}
	}
	if pid == 0 {
		t.Fatal("no child of heapscope run")
	}
	h := cli(t, "attach", "-q", "--source", "usdt", "--sample", "1KiB", "-o", attTrace, "-p", strconv.Itoa(pid))
	var errb syncBuffer
	h.Stderr = &errb
	rmust(t, h.Start())
	t.Cleanup(func() { h.Process.Kill(); h.Wait() })
	waitStderr(t, &errb, "tracing pid")
	for r := 1; r <= 3; r++ {
		w.round(r)
	}
	time.Sleep(1500 * time.Millisecond) // flushed
	rmust(t, cli(t, "stop", fmt.Sprintf("heapscope-attach-%d", h.Process.Pid)).Run())
	if err := h.Wait(); err != nil {
		t.Fatalf("attach: %v: %s", err, errb.String())
	}
	w.finish()
	if err := run.Wait(); err != nil {
		t.Fatalf("run: %v", err)
	}
	sum := func(trace string) map[string]map[string]int64 {
		out := filepath.Join(dir, filepath.Base(trace)+".pb")
		if code, errs := runCLI(t, "export", "--format", "otlp", trace, "-o", out); code != 0 {
			t.Fatalf("export: exit %d: %s", code, errs)
		}
		tot, err := collector.Totals(readOTLP(t, out))
		rmust(t, err)
		return tot[int64(pid)]
	}
	a, b := sum(runTrace), sum(attTrace)
	for _, fn := range []string{"leak_site", "churn_site", "grow_site"} {
		for _, typ := range []string{"alloc_space", "inuse_space"} {
			x, y := a[typ][fn], b[typ][fn]
			// A byte of rounding per sample: a sample stands for at
			// least 1 KiB here.
			if d := x - y; d < -x/1000-1 || d > x/1000+1 {
				t.Errorf("%s of %s: the run estimates %d, the attached session %d", typ, fn, x, y)
			}
		}
	}
	if a["alloc_space"]["churn_site"] == 0 {
		t.Errorf("nothing sampled: %v", a)
	}
	t.Logf("run %v; attached %v", a["alloc_space"], b["alloc_space"])
}

// TestExportAttachUSDT: attach --source usdt --export sends usdt_sampler's
// heap, read through its otel_memory probes, to a real collector: per call
// site, the intervals' allocated bytes add up to the weights the program's
// sampler fired, exactly, and the last interval's live bytes (at the
// process's end) to its live weights.
func TestExportAttachUSDT(t *testing.T) {
	testutil.SkipWithoutEBPF(t, ebpf.Available())
	t.Cleanup(testutil.Cleanup)
	c := collector.Start(t)
	bin := testutil.MustBuild(t, "usdt_sampler", testutil.Options{})
	cmd := exec.Command(bin, "65536", "2", "wait")
	in, err := cmd.StdinPipe()
	rmust(t, err)
	out, err := cmd.StdoutPipe()
	rmust(t, err)
	rmust(t, cmd.Start())
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	r := bufio.NewReader(out)
	if line, _ := r.ReadString('\n'); line != "ready\n" {
		t.Fatalf("usdt_sampler said %q", line)
	}
	h := cli(t, "attach", "--source", "usdt", "--sample", "64KiB", "--log-mode", "realtime", "--no-census",
		"--export", "otlp=http://"+c.HTTP, "--export-interval", "1s", "-p", strconv.Itoa(cmd.Process.Pid))
	var errb syncBuffer
	h.Stderr = &errb
	rmust(t, h.Start())
	t.Cleanup(func() { h.Process.Kill(); h.Wait() })
	waitStderr(t, &errb, "tracing pid")
	io.WriteString(in, "\n")
	weights, liveWeights := map[string]int64{}, map[string]int64{}
	for {
		line, err := r.ReadString('\n')
		rmust(t, err)
		f := strings.Fields(line)
		if len(f) == 18 && f[0] == "site" {
			w, _ := strconv.ParseInt(f[13], 10, 64)
			lw, _ := strconv.ParseInt(f[17], 10, 64)
			if w != 0 {
				weights[f[1]] = w
			}
			if lw != 0 {
				liveWeights[f[1]] = lw
			}
		}
		if f[0] == "semaphores" {
			break
		}
	}
	time.Sleep(2500 * time.Millisecond) // an interval or two with the events
	io.WriteString(in, "\n")
	if err := h.Wait(); err != nil {
		t.Fatalf("attach: %v: %s", err, errb.String())
	}
	m := exportLine.FindStringSubmatch(errb.String())
	if m == nil || m[4] != "0" {
		t.Fatalf("summary:\n%s", errb.String())
	}
	sent, _ := strconv.Atoi(m[2])
	ms, err := c.WaitMessages(context.Background(), sent, 10*time.Second)
	rmust(t, err)
	pid := int64(cmd.Process.Pid)
	alloc, live := map[string]int64{}, map[string]int64{}
	for i, msg := range ms {
		tot, err := collector.TotalsIn(msg, "leak_small", "leak_big", "churn", "grow")
		rmust(t, err)
		for fn, v := range tot[pid]["alloc_space"] {
			alloc[fn] += v
		}
		if i == len(ms)-1 {
			for fn, v := range tot[pid]["inuse_space"] {
				live[fn] += v
			}
		}
	}
	if !reflect.DeepEqual(alloc, weights) || !reflect.DeepEqual(live, liveWeights) || weights["churn"] == 0 {
		t.Errorf("%d intervals: allocated %v, live at the end %v; the sampler weighed %v, live %v", len(ms), alloc, live, weights, liveWeights)
	}
	t.Logf("%d intervals: allocated %v, live at the end %v", len(ms), alloc, live)
	a := profileAttrs(t, ms[len(ms)-1])
	if a[export.AttrEstimated] != true || a[export.AttrSampleRate] != int64(65536) {
		t.Errorf("profile attributes %v", a)
	}
}
