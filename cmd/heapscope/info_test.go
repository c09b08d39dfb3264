package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/heapscope/heapscope/analyze"
	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/tracefile"
)

// writeInfoTrace writes a small trace: two processes, one exited, events of
// three kinds, a snapshot, and stats with losses.
func writeInfoTrace(t *testing.T, path string) {
	t.Helper()
	w, err := tracefile.Create(path, tracefile.Header{
		Session: "demo", Provider: "preload", Hostname: "box", Kernel: "6.18.0", Clock: "CLOCK_MONOTONIC",
		WallStart: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), MonoStart: 1e9,
		Properties: []tracefile.Property{{Key: "BufferSize", Value: "64"}},
	}, tracefile.Options{TimeResolution: 1})
	if err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(w.Process(event.Process{PID: 41, PPID: 1, Time: 1e9, Exe: "/usr/bin/python3.11", Cmdline: []string{"python3", "-c", "pass"}}))
	must(w.Process(event.Process{PID: 42, PPID: 41, Time: 1.5e9, Exe: "/bin/true", Cmdline: []string{"/bin/true"}}))
	must(w.Process(event.Process{PID: 43, PPID: 41, Time: 1.6e9, Exe: "/bin/cat", Cmdline: []string{"cat"}}))
	must(w.Process(event.Process{PID: 44, PPID: 41, Time: 1.7e9, Exe: "/bin/dash", Cmdline: []string{"sh", "shim"}}))
	must(w.Exit(event.Exit{PID: 44, Time: 1.8e9, Status: -1}))
	must(w.Process(event.Process{PID: 44, PPID: 41, Time: 1.8e9, Exe: "/usr/bin/sleep", Cmdline: []string{"sleep", "9"}}))
	must(w.Module(event.Module{PID: 41, Start: 0x400000, End: 0x500000, Path: "/usr/bin/python3.11"}))
	must(w.Stack(event.Stack{PID: 41, ID: 1, Frames: []uint64{0x401000}}))
	var evs []event.Event
	for i := 0; i < 1500; i++ {
		evs = append(evs, event.Event{Time: 2e9 + int64(i)*1e6, PID: 41, TID: 41, Kind: event.KindAlloc, Func: event.FuncMalloc, Stack: 1, Addr: 0x1000 + uint64(i)*32, Size: 24})
	}
	for i := 0; i < 1000; i++ {
		evs = append(evs, event.Event{Time: 4e9 + int64(i)*1e6, PID: 41, TID: 41, Kind: event.KindFree, Func: event.FuncFree, Addr: 0x1000 + uint64(i)*32})
	}
	evs = append(evs, event.Event{Time: 5e9, PID: 41, TID: 41, Kind: event.KindRealloc, Func: event.FuncRealloc, Addr: 0x9000, OldAddr: 0x1000 + 1499*32, Size: 100})
	must(w.Events(evs))
	must(w.Exit(event.Exit{PID: 42, Time: 5.5e9, Status: 137, Signal: 9}))
	must(w.Exit(event.Exit{PID: 43, Time: 5.6e9, Status: -1}))
	must(w.Snapshot(event.Snapshot{PID: 41, Time: 6e9}))
	must(w.Stats(event.Stats{Time: 6e9, Delivered: 2510, Lost: [event.NumLostReasons]uint64{event.LostRingFull: 7, event.LostOther: 3}, Unmatched: 2}))
	must(w.Close())
}

func TestInfo(t *testing.T) {
	path := filepath.Join(t.TempDir(), "demo.hst")
	writeInfoTrace(t, path)
	var out bytes.Buffer
	if err := info(&out, path, analyze.Processes{}); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	for _, want := range []string{
		`session\s+demo`,
		`provider\s+preload`,
		`host\s+box, kernel 6.18.0`,
		`started\s+2026-01-02 03:04:05.000000 UTC \(CLOCK_MONOTONIC 1.000000s\)`,
		`mode\s+sequential\n`,
		`format\s+version 1, times to 1ns`,
		`properties\s+BufferSize=64`,
		`processes\s+5\n`,
		`pid 41 \(ppid 1\) python3 -c pass \[/usr/bin/python3.11\], traced from \+0.000000s, still running when the trace ends\n`,
		`pid 42 \(ppid 41\) /bin/true, traced from \+0.500000s, killed by signal 9 \+4.500000s\n`,
		`pid 43 \(ppid 41\) cat \[/bin/cat\], traced from \+0.600000s, ended \+4.600000s, status unknown \(not heapscope's child\)\n`,
		`pid 44 \(ppid 41\) sh shim \[/bin/dash\], traced from \+0.700000s, replaced by exec \+0.800000s\n`,
		`pid 44 \(ppid 41\) sleep 9 \[/usr/bin/sleep\], traced from \+0.800000s, still running when the trace ends\n`,
		`modules\s+1\n`,
		`stacks\s+1\n`,
		`events\s+2,501\n`,
		`\s+alloc\s+1,500\n`,
		`\s+realloc\s+1\n`,
		`\s+free\s+1,000\n`,
		`time span\s+4s, from \+1.000000s to \+5.000000s`,
		`snapshots\s+1\n`,
		`delivered\s+2,510 events`,
		`lost\s+10 events \(ring_full 7, other 3\)`,
		`2 frees of blocks allocated before tracing`,
		// Events were lost: never "warnings none", and each loss named
		// with what would have kept it.
		`warnings\s+7 events lost \(ring_full\): .*--buffers`,
		`\s+3 events lost \(other\)`,
	} {
		if !regexp.MustCompile(want).MatchString(got) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "warnings    none") {
		t.Errorf("info says 'warnings none' of a trace that lost events:\n%s", got)
	}
}

// TestInfoNeverSaysStatusMinusOne: an unknown status is said in words.
func TestInfoNeverSaysStatusMinusOne(t *testing.T) {
	path := filepath.Join(t.TempDir(), "demo.hst")
	writeInfoTrace(t, path)
	var out bytes.Buffer
	rmust(t, info(&out, path, analyze.Processes{}))
	if strings.Contains(out.String(), "-1") {
		t.Errorf("info prints a status -1:\n%s", out.String())
	}
}

// TestInfoProcesses: --pid and --exe select processes; one that is not in
// the trace is an error naming those that are.
func TestInfoProcesses(t *testing.T) {
	path := filepath.Join(t.TempDir(), "demo.hst")
	writeInfoTrace(t, path)
	var out bytes.Buffer
	rmust(t, info(&out, path, analyze.Processes{PIDs: []uint32{42}}))
	if got := out.String(); !regexp.MustCompile(`processes\s+1\n`).MatchString(got) || !strings.Contains(got, "pid 42 ") ||
		strings.Contains(got, "pid 41 ") || !regexp.MustCompile(`events\s+0\n`).MatchString(got) {
		t.Errorf("--pid 42:\n%s", got)
	}
	out.Reset()
	rmust(t, info(&out, path, analyze.Processes{Exe: "python3.11"}))
	if got := out.String(); !strings.Contains(got, "pid 41 ") || !regexp.MustCompile(`events\s+2,501\n`).MatchString(got) {
		t.Errorf("--exe python3.11:\n%s", got)
	}
	// The program a PID ran after an exec, not the one before.
	out.Reset()
	rmust(t, info(&out, path, analyze.Processes{Exe: "sleep"}))
	if got := out.String(); !strings.Contains(got, "sleep 9") || strings.Contains(got, "shim") {
		t.Errorf("--exe sleep:\n%s", got)
	}
	var errb bytes.Buffer
	if code := mainArgs([]string{"info", "--pid", "7", path}, &out, &errb); code != 1 ||
		!strings.Contains(errb.String(), "no process of pid 7") || !strings.Contains(errb.String(), "41 (python3.11)") {
		t.Errorf("--pid 7: exit %d, %q", code, errb.String())
	}
}

func TestInfoCutFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "demo.hst")
	writeInfoTrace(t, path)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// Cut inside the last chunk (before the index): a warning, no error.
	if err := os.WriteFile(path, b[:len(b)*3/4], 0o644); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := info(&out, path, analyze.Processes{}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "file cut at byte") {
		t.Errorf("a cut file:\n%s", out.String())
	}
}

func TestInfoErrors(t *testing.T) {
	dir := t.TempDir()
	notTrace := filepath.Join(dir, "notes.txt")
	if err := os.WriteFile(notTrace, []byte("these are not the bytes you are looking for\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"info", filepath.Join(dir, "missing.hst")}, 1, "no such file"},
		{[]string{"info", notTrace}, 1, "not a heapscope trace file"},
		{[]string{"info"}, 2, "takes one trace file"},
		{[]string{"info", "a", "b"}, 2, "takes one trace file"},
	} {
		var out, errb bytes.Buffer
		code := mainArgs(c.args, &out, &errb)
		if code != c.code {
			t.Errorf("%q: exit %d, want %d", c.args, code, c.code)
		}
		msg := errb.String()
		if !strings.Contains(msg, c.msg) || strings.Count(strings.TrimSpace(msg), "\n") != 0 {
			t.Errorf("%q: stderr %q, want one line with %q", c.args, msg, c.msg)
		}
	}
}

// TestInfoStacksAndTitles: info lists a process whose Process record came
// again with its pid and time once, with the later command line (a title
// it wrote over its argv), and names the stacks lost and cut, each with
// the flag that would have kept them.
func TestInfoStacksAndTitles(t *testing.T) {
	path := filepath.Join(t.TempDir(), "t.hst")
	w, err := tracefile.Create(path, tracefile.Header{Session: "t", Provider: "ebpf", MonoStart: 1e9}, tracefile.Options{TimeResolution: 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, err := range []error{
		w.Process(event.Process{PID: 7, PPID: 1, Time: 1e9, Exe: "/usr/sbin/nginx", Cmdline: []string{"nginx: master process /usr/sbin/nginx"}}),
		w.Process(event.Process{PID: 7, PPID: 1, Time: 1e9, Exe: "/usr/sbin/nginx", Cmdline: []string{"nginx: worker process"}}),
		w.Stats(event.Stats{Time: 2e9, Delivered: 100, StacksLost: 3, StacksCut: 12, StacksCutDepth: 2, StacksCutNoTable: 9}),
		w.Close(),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	var out bytes.Buffer
	if err := info(&out, path, analyze.Processes{}); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	for _, want := range []string{
		`processes\s+1\n\s+pid 7 \(ppid 1\) 'nginx: worker process' \[/usr/sbin/nginx\]`,
		`3 events recorded without their stack: .*--max-stacks`,
		`12 events recorded with their stack cut short: 2 at the depth limit .*; 9 after a frame no unwind table covered .*--unwind-tables-size.*; 1 where the unwinder had no rule`,
	} {
		if !regexp.MustCompile(want).MatchString(got) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "master process") {
		t.Errorf("info lists the title the process had before:\n%s", got)
	}
}
