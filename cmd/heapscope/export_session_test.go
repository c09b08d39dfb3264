package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/heapscope/heapscope"
	"github.com/heapscope/heapscope/buildid"
	"github.com/heapscope/heapscope/export"
	"github.com/heapscope/heapscope/internal/collector"
	"github.com/heapscope/heapscope/internal/ebpf"
	"github.com/heapscope/heapscope/internal/testutil"
)

// roundsWorkload is export_rounds, driven a round at a time.
type roundsWorkload struct {
	t     *testing.T
	in    io.WriteCloser
	out   *bufio.Reader
	cmd   *exec.Cmd
	lines chan string
}

// startRounds starts cmd (export_rounds, or heapscope running it) and waits
// for its "ready".
func startRounds(t *testing.T, cmd *exec.Cmd) *roundsWorkload {
	t.Helper()
	in, err := cmd.StdinPipe()
	rmust(t, err)
	out, err := cmd.StdoutPipe()
	rmust(t, err)
	rmust(t, cmd.Start())
	w := &roundsWorkload{t: t, in: in, out: bufio.NewReader(out), cmd: cmd, lines: make(chan string, 16)}
	t.Cleanup(func() {
		w.in.Close()
		cmd.Process.Kill()
	})
	go func() {
		defer close(w.lines)
		for {
			line, err := w.out.ReadString('\n')
			if err != nil {
				return
			}
			w.lines <- strings.TrimSpace(line)
		}
	}()
	w.expect("ready")
	return w
}

func (w *roundsWorkload) expect(want string) {
	w.t.Helper()
	select {
	case line := <-w.lines:
		if line != want {
			w.t.Fatalf("export_rounds said %q, want %q", line, want)
		}
	case <-time.After(60 * time.Second):
		w.t.Fatalf("export_rounds did not say %q in 60 s", want)
	}
}

// round runs round r.
func (w *roundsWorkload) round(r int) {
	w.t.Helper()
	_, err := io.WriteString(w.in, "\n")
	rmust(w.t, err)
	w.expect(fmt.Sprintf("round %d done", r))
}

// finish lets the workload exit.
func (w *roundsWorkload) finish() {
	io.WriteString(w.in, "\n")
	w.in.Close()
}

// The totals of one round of export_rounds, by sample type and function.
var roundTotals = map[string]map[string]int64{
	"alloc_objects": {"leak_site": 2, "churn_site": 100, "grow_site": 2},
	"alloc_space":   {"leak_site": 2000, "churn_site": 6400, "grow_site": 5100},
	"inuse_objects": {"leak_site": 2, "churn_site": 0, "grow_site": 0},
	"inuse_space":   {"leak_site": 2000, "churn_site": 0, "grow_site": 0},
}

// funcTotals sums, by sample type and function, the allocations of the
// messages and the live heap of the last one, for process pid; the
// functions are those of roundTotals.
func funcTotals(t *testing.T, ms []pprofile.Profiles, pid int) map[string]map[string]int64 {
	t.Helper()
	out := map[string]map[string]int64{}
	for typ := range roundTotals {
		out[typ] = map[string]int64{}
	}
	for i, m := range ms {
		tot, err := collector.Totals(m)
		rmust(t, err)
		for typ, byFn := range tot[int64(pid)] {
			inuse := strings.HasPrefix(typ, "inuse_")
			if inuse && i != len(ms)-1 {
				continue
			}
			for fn, v := range byFn {
				if _, ok := roundTotals[typ][fn]; ok {
					out[typ][fn] += v
				}
			}
		}
	}
	return out
}

// rounds returns the cumulative totals of n rounds, live as at the end of
// the last.
func rounds(n int64) map[string]map[string]int64 {
	out := map[string]map[string]int64{}
	for typ, byFn := range roundTotals {
		out[typ] = map[string]int64{}
		for fn, v := range byFn {
			if v != 0 { // a function with nothing is not in a profile
				out[typ][fn] = v * n
			}
		}
	}
	return out
}

// waitTotals waits until the collector's messages add up to want for pid,
// and returns them.
func waitTotals(t *testing.T, c *collector.Collector, pid int, want map[string]map[string]int64, from int) []pprofile.Profiles {
	t.Helper()
	var got map[string]map[string]int64
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		ms, err := c.Messages()
		rmust(t, err)
		if len(ms) <= from {
			continue
		}
		got = funcTotals(t, ms[from:], pid)
		if reflect.DeepEqual(got, want) {
			return ms
		}
	}
	t.Fatalf("the collector's totals for pid %d: %v, want %v", pid, got, want)
	return nil
}

// span is one message's interval.
type span struct{ start, end time.Time }

func spanOf(t *testing.T, m pprofile.Profiles) span {
	t.Helper()
	if m.ResourceProfiles().Len() == 0 {
		t.Fatal("a message without a resource")
	}
	p := m.ResourceProfiles().At(0).ScopeProfiles().At(0).Profiles().At(0)
	s := p.Time().AsTime()
	return span{s, s.Add(time.Duration(p.DurationNano()))}
}

// missingIntervals counts the intervals of about d between the messages'
// intervals (which follow one another when none is missing).
func missingIntervals(t *testing.T, ms []pprofile.Profiles, d time.Duration) int {
	t.Helper()
	var spans []span
	for _, m := range ms {
		spans = append(spans, spanOf(t, m))
	}
	sort.Slice(spans, func(i, j int) bool { return spans[i].start.Before(spans[j].start) })
	n := 0
	for i := 1; i < len(spans); i++ {
		gap := spans[i].start.Sub(spans[i-1].end)
		// Durations are of the monotonic clock, times of the wall
		// clock's: they meet within a few µs.
		if gap < -time.Millisecond {
			t.Fatalf("intervals %d and %d overlap: %v, %v", i-1, i, spans[i-1], spans[i])
		}
		n += int(math.Round(float64(gap) / float64(d)))
	}
	return n
}

// sessionStatus asks the session name for its status (heapscope query).
func sessionStatus(t *testing.T, name string) heapscope.Status {
	t.Helper()
	q := cli(t, "query", "--json", name)
	out, err := q.Output()
	if err != nil {
		t.Fatalf("query %s: %v", name, err)
	}
	var st heapscope.Status
	rmust(t, json.Unmarshal(out, &st))
	return st
}

var exportLine = regexp.MustCompile(`exports to (\S+): (\d+) sent, (\d+) retried, (\d+) dropped`)

// TestExportAttach attaches to export_rounds with --export over OTLP/HTTP,
// to a real collector: per interval, the functions' allocations and leaks
// are the workload's, with the process's and host's attributes. The
// collector is then killed for longer than the exports' queue holds and
// started again: the session goes on, the exports resume, and the
// intervals missing from the collector's file are the drops counted.
func TestExportAttach(t *testing.T) {
	testutil.SkipWithoutEBPF(t, ebpf.Available())
	t.Cleanup(testutil.Cleanup)
	c := collector.Start(t)
	bin := testutil.MustBuild(t, "export_rounds", testutil.Options{})
	w, h, errb, name := attachRounds(t, c, bin)
	pid := w.cmd.Process.Pid
	ms := twoRounds(t, c, w, bin)

	// Kill the collector right after an export reached its file (the
	// next is a second away), and keep it down for longer than the
	// sender's queue (8) and the export it retries hold.
	n := len(ms)
	for ; len(ms) == n; time.Sleep(20 * time.Millisecond) {
		var err error
		ms, err = c.Messages()
		rmust(t, err)
	}
	c.Kill()
	w.round(3)
	time.Sleep(13 * time.Second)
	if st := sessionStatus(t, name); len(st.Exports) != 1 || st.Exports[0].Dropped == 0 || st.Exports[0].Retried == 0 {
		t.Errorf("with the collector down: %+v", st.Exports)
	}
	c.Restart()
	t4 := time.Now()
	w.round(4)
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		ms, err := c.Messages()
		rmust(t, err)
		var after []pprofile.Profiles
		for _, m := range ms {
			if spanOf(t, m).end.After(t4) {
				after = append(after, m)
			}
		}
		// Round 4's intervals: one round's allocations, and the leaks
		// of four.
		want := rounds(1)
		for typ := range want {
			if strings.HasPrefix(typ, "inuse_") {
				want[typ] = rounds(4)[typ]
			}
		}
		got := funcTotals(t, after, pid)
		if reflect.DeepEqual(got, want) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the restart: %v, want %v", got, want)
		}
	}

	w.finish()
	if err := h.Wait(); err != nil {
		t.Fatalf("attach: %v: %s", err, errb.String())
	}
	m := exportLine.FindStringSubmatch(errb.String())
	if m == nil || m[1] != "otlp=http://"+c.HTTP {
		t.Fatalf("no exports line in the summary:\n%s", errb.String())
	}
	sent, _ := strconv.Atoi(m[2])
	retried, _ := strconv.Atoi(m[3])
	dropped, _ := strconv.Atoi(m[4])
	// The file exporter flushes every 100 ms.
	ms, _ = c.WaitMessages(context.Background(), sent, 10*time.Second)
	missing := missingIntervals(t, ms, time.Second)
	t.Logf("%d messages in the file, %d intervals missing; %d sent, %d retried, %d dropped", len(ms), missing, sent, retried, dropped)
	if len(ms) != sent || dropped == 0 || retried == 0 || missing != dropped {
		t.Errorf("%d messages in the file, %d intervals missing; the summary says %d sent, %d retried, %d dropped",
			len(ms), missing, sent, retried, dropped)
	}
	// The last interval ends with the process: its leaks.
	if got := funcTotals(t, ms[len(ms)-1:], pid); got["inuse_space"]["leak_site"] != 8000 || got["inuse_objects"]["leak_site"] != 8 {
		t.Errorf("the last interval's live heap: %v", got)
	}
}

// attachRounds starts export_rounds 4 and attaches to it, exporting to c
// every second, with further flags.
func attachRounds(t *testing.T, c *collector.Collector, bin string, flags ...string) (*roundsWorkload, *exec.Cmd, *syncBuffer, string) {
	t.Helper()
	w := startRounds(t, exec.Command(bin, "4"))
	name := fmt.Sprintf("export-attach-%d", os.Getpid())
	h := cli(t, append([]string{"attach", "--name", name, "-p", strconv.Itoa(w.cmd.Process.Pid), "--log-mode", "realtime",
		"--export", "otlp=http://" + c.HTTP, "--export-interval", "1s"}, flags...)...)
	errb := &syncBuffer{}
	h.Stderr = errb
	rmust(t, h.Start())
	t.Cleanup(func() { h.Process.Kill(); h.Wait() })
	for deadline := time.Now().Add(60 * time.Second); !strings.Contains(errb.String(), "tracing pid"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("attach did not start: %s", errb.String())
		}
	}
	return w, h, errb, name
}

// twoRounds runs two rounds, each in intervals of its own, and checks that
// the sums of the intervals' allocations and the last one's live heap are
// the workload's after each, and the attributes.
func twoRounds(t *testing.T, c *collector.Collector, w *roundsWorkload, bin string) []pprofile.Profiles {
	t.Helper()
	pid := w.cmd.Process.Pid
	var ms []pprofile.Profiles
	for r := 1; r <= 2; r++ {
		w.round(r)
		ms = waitTotals(t, c, pid, rounds(int64(r)), 0)
	}
	withAllocs := 0
	for _, m := range ms {
		tot, err := collector.Totals(m)
		rmust(t, err)
		if tot[int64(pid)]["alloc_space"]["leak_site"] == 2000 {
			withAllocs++
		}
	}
	if withAllocs != 2 {
		t.Errorf("%d intervals hold a round's allocations, want 2", withAllocs)
	}
	checkResource(t, ms[len(ms)-1], bin, pid)
	return ms
}

// TestExportAttachAggregate: the same from eBPF's aggregate mode, whose
// totals are the kernel's tables, read at each flush.
func TestExportAttachAggregate(t *testing.T) {
	testutil.SkipWithoutEBPF(t, ebpf.Available())
	t.Cleanup(testutil.Cleanup)
	c := collector.Start(t)
	bin := testutil.MustBuild(t, "export_rounds", testutil.Options{})
	w, h, errb, _ := attachRounds(t, c, bin, "--mode", "aggregate")
	twoRounds(t, c, w, bin)
	w.finish()
	if err := h.Wait(); err != nil {
		t.Fatalf("attach: %v: %s", err, errb.String())
	}
	if m := exportLine.FindStringSubmatch(errb.String()); m == nil || m[4] != "0" {
		t.Errorf("summary:\n%s", errb.String())
	}
}

// checkResource checks the process's and host's attributes, and the
// profile's.
func checkResource(t *testing.T, m pprofile.Profiles, bin string, pid int) {
	t.Helper()
	var raw map[string]any
	for i := 0; i < m.ResourceProfiles().Len(); i++ {
		a := m.ResourceProfiles().At(i).Resource().Attributes().AsRaw()
		if a["process.pid"] == int64(pid) {
			raw = a
		}
	}
	host, _ := os.Hostname()
	id, err := buildid.File(bin)
	rmust(t, err)
	want := map[string]any{
		"process.pid": int64(pid), "process.parent_pid": int64(os.Getpid()), "process.executable.name": filepath.Base(bin),
		"process.executable.path": bin, "process.command_line": bin + " 4", "process.command_args": []any{bin, "4"},
		"process.executable.build_id.gnu": id, "service.name": "unknown_service:" + filepath.Base(bin),
		"host.name": host, "host.arch": runtime.GOARCH, "os.type": "linux",
	}
	for k, v := range want {
		if !reflect.DeepEqual(raw[k], v) {
			t.Errorf("resource attribute %s = %v, want %v", k, raw[k], v)
		}
	}
	if mid, err := os.ReadFile("/etc/machine-id"); err == nil && raw["host.id"] != strings.TrimSpace(string(mid)) {
		t.Errorf("host.id = %v, want %q", raw["host.id"], strings.TrimSpace(string(mid)))
	}
	a := profileAttrs(t, m)
	if a[export.AttrEstimated] != false || a[export.AttrLostEvents] != int64(0) || a[export.AttrLostFrom] != nil {
		t.Errorf("profile attributes %v", a)
	}
}

// TestExportRunSampled runs export_rounds sampled, with --export over
// gRPC, writing a trace too: the estimates the intervals carry add up to
// the trace's own, exactly (each recorded block weighs the same in the
// session's totals as in the report; --time-resolution 1ns keeps the
// times the weights' rounding hashes), and say they are estimates.
func TestExportRunSampled(t *testing.T) {
	t.Cleanup(testutil.Cleanup)
	c := collector.Start(t)
	bin := testutil.MustBuild(t, "export_rounds", testutil.Options{})
	dir := t.TempDir()
	trace := filepath.Join(dir, "t.hst")
	h := cli(t, "run", "-q", "--sample", "256B", "--time-resolution", "1ns", "-o", trace,
		"--export", "otlp=grpc://"+c.GRPC, "--export-interval", "1s", "--", bin, "3")
	var errb syncBuffer
	h.Stderr = &errb
	w := startRounds(t, h)
	for r := 1; r <= 3; r++ {
		ms, err := c.Messages()
		rmust(t, err)
		w.round(r)
		// The next round in an interval of its own.
		if _, err := c.WaitMessages(context.Background(), len(ms)+2, 60*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	w.finish()
	if err := h.Wait(); err != nil {
		t.Fatalf("run: %v: %s", err, errb.String())
	}
	ms, err := c.Messages()
	rmust(t, err)
	pid := 0
	for _, m := range ms {
		for i := 0; i < m.ResourceProfiles().Len(); i++ {
			if v, ok := m.ResourceProfiles().At(i).Resource().Attributes().Get("process.pid"); ok {
				pid = int(v.Int())
			}
		}
	}
	got := funcTotals(t, ms, pid)

	whole := filepath.Join(dir, "whole.pb")
	if code, errs := runCLI(t, "export", "--format", "otlp", trace, "-o", whole); code != 0 {
		t.Fatalf("export: exit %d: %s", code, errs)
	}
	want := funcTotals(t, []pprofile.Profiles{readOTLP(t, whole)}, pid)
	t.Logf("%d intervals; estimated %v", len(ms), got)
	if !reflect.DeepEqual(got, want) || got["alloc_space"]["churn_site"] == 0 {
		t.Errorf("the intervals add up to %v; the trace holds %v", got, want)
	}
	// Estimates of 3 rounds, from about 66 samples: within 50% of the
	// truth (4 standard deviations).
	if v := got["alloc_space"]["churn_site"]; v < 3*6400/2 || v > 3*6400*3/2 {
		t.Errorf("churn_site's bytes estimated at %d, want about %d", v, 3*6400)
	}
	a := profileAttrs(t, ms[len(ms)-1])
	if a[export.AttrEstimated] != true || a[export.AttrSampleRate] != int64(256) {
		t.Errorf("profile attributes %v", a)
	}
	if missing := missingIntervals(t, ms, time.Second); missing != 0 {
		t.Errorf("%d intervals missing", missing)
	}
}
