package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/report"
	"github.com/heapscope/heapscope/tracefile"
)

// writeSynthTrace writes a trace file of a small synthetic program through the
// real writer: process 10, a module at 0x400000 (this test binary, so that
// frames have a module), 1000 malloc+free pairs a millisecond apart from
// stack 1, and 5 leaked blocks of 100 bytes from stack 2 at 0.5 s.
func writeSynthTrace(t *testing.T, path string, chunk int) {
	t.Helper()
	const start = int64(1e9)
	w, err := tracefile.Create(path, tracefile.Header{Session: "synthetic", Provider: "preload", MonoStart: start,
		WallStart: time.Unix(1700000000, 0), Clock: "CLOCK_MONOTONIC"}, tracefile.Options{ChunkSize: chunk})
	if err != nil {
		t.Fatal(err)
	}
	exe, _ := os.Executable()
	rmust(t, w.Process(event.Process{PID: 10, PPID: 1, Time: start, Exe: exe, Cmdline: []string{"prog"}}))
	rmust(t, w.Module(event.Module{PID: 10, Time: start, Start: 0x400000, End: 0x500000, Path: exe}))
	rmust(t, w.Stack(event.Stack{PID: 10, ID: 1, Frames: []uint64{0x401000, 0x402000}}))
	rmust(t, w.Stack(event.Stack{PID: 10, ID: 2, Frames: []uint64{0x403000, 0x402000}}))
	var evs []event.Event
	for i := 0; i < 1000; i++ {
		tm := start + int64(i)*1e6
		addr := uint64(0x10000 + i*16)
		evs = append(evs,
			event.Event{Time: tm, PID: 10, TID: 10, Kind: event.KindAlloc, Func: event.FuncMalloc, Stack: 1, Addr: addr, Size: 32},
			event.Event{Time: tm + 1000, PID: 10, TID: 10, Kind: event.KindFree, Func: event.FuncFree, Addr: addr})
		if i == 500 {
			for j := 0; j < 5; j++ {
				evs = append(evs, event.Event{Time: tm + 2000, PID: 10, TID: 10, Kind: event.KindAlloc, Func: event.FuncMalloc,
					Stack: 2, Addr: uint64(0x900000 + j*128), Size: 100})
			}
		}
	}
	rmust(t, w.Events(evs))
	rmust(t, w.Exit(event.Exit{PID: 10, Time: start + 1001e6, Status: 0}))
	rmust(t, w.Stats(event.Stats{Time: start + 1001e6, Delivered: uint64(len(evs)), Lost: [event.NumLostReasons]uint64{event.LostBufferFull: 3}}))
	rmust(t, w.Close())
}

func rmust(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// runCLI runs the command line in-process; output goes to a file with -o.
func runCLI(t *testing.T, args ...string) (code int, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = mainArgs(args, &out, &errb)
	return code, errb.String()
}

func readReportJSON(t *testing.T, path string) *report.JSON {
	t.Helper()
	b, err := os.ReadFile(path)
	rmust(t, err)
	var d report.JSON
	rmust(t, json.Unmarshal(b, &d))
	return &d
}

func TestReportJSONAndWindow(t *testing.T) {
	trace := synthTrace(t)
	d := reportJSON(t, trace)
	s := d.Summary
	if s.Allocations != 1005 || s.Frees != 1000 || s.LeakedBytes != 500 || s.LeakedBlocks != 5 ||
		s.TemporaryAllocations != 1000 || s.PeakBytes != 532 || s.PeakTimeNs != 501e6 || s.PeakBlocks != 6 || s.BytesAllocated != 32500 {
		t.Errorf("summary %+v", s)
	}
	if d.Trace.Session != "synthetic" || d.Trace.Provider != "preload" || d.Trace.Events != 2005 || d.Trace.LostEvents != 3 ||
		d.Trace.DurationNs != 1001e6 || len(d.Trace.PIDs) != 1 {
		t.Errorf("trace %+v", d.Trace)
	}
	if len(d.Leaks) != 1 || d.Leaks[0].Bytes != 500 || len(d.Leaks[0].Stack) == 0 {
		t.Errorf("leaks %+v", d.Leaks)
	}

	// A window over the second half: the leaks happen in it, the first
	// 500 pairs do not.
	out := filepath.Join(t.TempDir(), "r.json")
	if code, errs := runCLI(t, "report", trace, "--format", "json", "--from", "500ms", "--to", "2s", "-o", out); code != 0 { // flags after the file, as the README writes them
		t.Fatalf("exit %d: %s", code, errs)
	}
	d = readReportJSON(t, out)
	if d.Summary.Allocations != 505 || d.Summary.LeakedBlocks != 5 || d.Window == nil || d.Window.FromNs != 500e6 {
		t.Errorf("window 500ms-2s: summary %+v window %+v", d.Summary, d.Window)
	}
	// A window before the leaks: none.
	d = reportJSON(t, "--to", "400ms", trace)
	if d.Summary.Allocations != 400 || d.Summary.LeakedBlocks != 0 || len(d.Leaks) != 0 {
		t.Errorf("window to 400ms: summary %+v", d.Summary)
	}
	if code, _ := runCLI(t, "report", "--from", "2s", "--to", "1s", trace); code != 2 {
		t.Errorf("--to before --from: exit %d, want 2", code)
	}
}

func TestReportText(t *testing.T) {
	b, _ := os.ReadFile(cliFile(t, "r.txt", "report", "--top", "1", synthTrace(t)))
	for _, want := range []string{"SUMMARY", "peak heap              532 B in 6 blocks at 501.000ms", "leaked                 500 B in 5 blocks",
		"lost events            3 (3 buffer_full)", "LEAKS", "PEAK CONSUMERS", "MOST ALLOCATION CALLS: top 1 of 2 sites",
		"MOST TEMPORARY ALLOCATIONS", "ALLOCATION SIZES"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("text lacks %q:\n%s", want, b)
		}
	}
}

func TestExport(t *testing.T) {
	trace := synthTrace(t)
	pb := cliFile(t, "heap.pb.gz", "export", "--format", "pprof", trace)
	f, err := os.Open(pb)
	rmust(t, err)
	p, err := profile.Parse(f)
	f.Close()
	rmust(t, err)
	rmust(t, p.CheckValid())
	var alloc, inuse int64
	for _, s := range p.Sample {
		alloc += s.Value[1]
		inuse += s.Value[3]
	}
	if alloc != 32500 || inuse != 500 || len(p.Mapping) != 1 {
		t.Errorf("alloc_space %d inuse_space %d, %d mappings", alloc, inuse, len(p.Mapping))
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("need the go command for go tool pprof: %v", err)
	}
	if out, err := exec.Command(goTool, "tool", "pprof", "-top", pb).CombinedOutput(); err != nil || !strings.Contains(string(out), "inuse_space") {
		t.Errorf("go tool pprof -top: %v\n%s", err, out)
	}

	b, _ := os.ReadFile(cliFile(t, "c.txt", "export", "--format", "collapsed", "--metric", "inuse_objects", trace))
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 1 || !strings.HasSuffix(lines[0], " 5") || !strings.Contains(lines[0], ";") {
		t.Errorf("collapsed inuse_objects: %q", b)
	}
	if code, _ := runCLI(t, "export", "--format", "collapsed", "--metric", "cpu", trace); code != 2 {
		t.Errorf("bad metric: exit %d, want 2", code)
	}
}

func TestReportBadInput(t *testing.T) {
	dir := t.TempDir()
	oneLine := func(name, errs string) {
		t.Helper()
		if strings.Count(strings.TrimSpace(errs), "\n") != 0 || !strings.HasPrefix(errs, "heapscope ") {
			t.Errorf("%s: want one line, got %q", name, errs)
		}
	}
	code, errs := runCLI(t, "report", filepath.Join(dir, "missing.hst"))
	if code != 1 {
		t.Errorf("missing file: exit %d", code)
	}
	oneLine("missing file", errs)

	junk := filepath.Join(dir, "junk.hst")
	rmust(t, os.WriteFile(junk, bytes.Repeat([]byte("not a trace\n"), 100), 0o644))
	code, errs = runCLI(t, "report", junk)
	if code != 1 {
		t.Errorf("corrupt file: exit %d", code)
	}
	oneLine("corrupt file", errs)
	code, errs = runCLI(t, "export", "-o", filepath.Join(dir, "x.pb.gz"), junk)
	if code != 1 {
		t.Errorf("export of a corrupt file: exit %d", code)
	}
	oneLine("export of a corrupt file", errs)
	if _, err := os.Stat(filepath.Join(dir, "x.pb.gz")); err == nil {
		t.Error("export of a corrupt file left an output file")
	}

	if code, _ := runCLI(t, "report"); code != 2 {
		t.Errorf("no file: exit %d, want 2", code)
	}
	if code, _ := runCLI(t, "report", "--format", "xml", junk); code != 2 {
		t.Errorf("bad format: exit %d, want 2", code)
	}
}

func TestReportTruncated(t *testing.T) {
	dir := t.TempDir()
	full := filepath.Join(dir, "full.hst")
	// Random sizes and addresses, in small chunks: a file of many chunks.
	const pairs = 20000
	w, err := tracefile.Create(full, tracefile.Header{Session: "cut", Provider: "preload", MonoStart: 1e9}, tracefile.Options{ChunkSize: 4096})
	rmust(t, err)
	rmust(t, w.Process(event.Process{PID: 10, Time: 1e9}))
	rmust(t, w.Stack(event.Stack{PID: 10, ID: 1, Frames: []uint64{0x401000}}))
	x := uint64(88172645463325252)
	for i := 0; i < pairs; i++ {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		tm := int64(1e9) + int64(i)*1000 + int64(x%500)
		addr := 0x10000 + (x>>8)%(1<<30)*16
		rmust(t, w.Events([]event.Event{
			{Time: tm, PID: 10, TID: 10 + uint32(x%3), Kind: event.KindAlloc, Stack: 1, Addr: addr, Size: x % 4096},
			{Time: tm + 1, PID: 10, TID: 10, Kind: event.KindFree, Addr: addr},
		}))
	}
	rmust(t, w.Stats(event.Stats{Time: 2e9, Delivered: 2 * pairs}))
	rmust(t, w.Close())
	b, err := os.ReadFile(full)
	rmust(t, err)

	// Cut it at a tenth, two tenths, ...: each cut reports what is left
	// with the reader's warning, or (cut inside the header) fails in one
	// line; some cut keeps part of the events.
	out := filepath.Join(dir, "r.json")
	partial := false
	for k := 1; k <= 9; k++ {
		cut := filepath.Join(dir, fmt.Sprintf("cut%d.hst", k))
		rmust(t, os.WriteFile(cut, b[:len(b)*k/10], 0o644))
		// The reader's warnings also go to standard error (not captured here).
		code, errs := runCLI(t, "report", "--format", "json", "-o", out, cut)
		if code != 0 {
			if code != 1 || strings.Count(strings.TrimSpace(errs), "\n") != 0 {
				t.Errorf("cut at %d/10: exit %d: %q", k, code, errs)
			}
			continue
		}
		d := readReportJSON(t, out)
		if len(d.Warnings) == 0 {
			t.Errorf("cut at %d/10: no warning in the report", k)
		}
		if d.Trace.Events > 0 && d.Trace.Events < 2*pairs {
			partial = true
		}
	}
	if !partial {
		t.Error("no cut kept part of the events")
	}
}
