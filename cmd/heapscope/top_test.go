package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/heapscope/heapscope/internal/ebpf"
	"github.com/heapscope/heapscope/internal/registry"
	"github.com/heapscope/heapscope/internal/testutil"
	"github.com/heapscope/heapscope/internal/topframe"
)

// tmuxPane runs a command in a detached tmux session of its own (its own
// server socket), in a real pseudo-terminal of 120x40.
type tmuxPane struct {
	t      *testing.T
	socket string
}

// tmuxPanes numbers the panes of this test process.
var tmuxPanes atomic.Int64

func newTmuxPane(t *testing.T, shellCmd string) *tmuxPane {
	t.Helper()
	testutil.Tool(t, "tmux")
	// A server of its own per pane: one test's kill-server at its cleanup
	// must not race the next test's new server on a shared socket.
	p := &tmuxPane{t: t, socket: fmt.Sprintf("heapscope-test-%d-%d", os.Getpid(), tmuxPanes.Add(1))}
	p.tmux("-f", "/dev/null", "new-session", "-d", "-s", "top", "-x", "120", "-y", "40", shellCmd)
	t.Cleanup(func() { exec.Command("tmux", "-L", p.socket, "kill-server").Run() })
	return p
}

func (p *tmuxPane) tmux(args ...string) string {
	p.t.Helper()
	out, err := exec.Command("tmux", append([]string{"-L", p.socket}, args...)...).CombinedOutput()
	if err != nil {
		p.t.Fatalf("tmux %q: %v: %s", args, err, out)
	}
	return string(out)
}

func (p *tmuxPane) screen() string { return p.tmux("capture-pane", "-p", "-t", "top") }

func (p *tmuxPane) keys(k ...string) { p.tmux(append([]string{"send-keys", "-t", "top"}, k...)...) }

// waitFor returns the first screen for which ok holds, or fails after 20s.
func (p *tmuxPane) waitFor(what string, ok func(string) bool) string {
	p.t.Helper()
	return p.waitWithin(20*time.Second, what, ok)
}

// waitWithin is waitFor with its own deadline, for work whose length
// depends on the machine's load (a whole index built under CI's tests).
func (p *tmuxPane) waitWithin(d time.Duration, what string, ok func(string) bool) string {
	p.t.Helper()
	var s string
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if s = p.screen(); ok(s) {
			return s
		}
	}
	p.t.Fatalf("the screen never showed %s:\n%s", what, s)
	return ""
}

// siteRow is a row of top's site table.
// (The LOST column, unsigned, comes after LIVE once a leak check ran: at
// the end of a program top launched, checked at its exit.)
var siteRow = regexp.MustCompile(`(?m)^[> ]\s*(\S+ [KMG]?i?B)\s+(?:[\d.]+ [KMG]?i?B\s+)?([+–-]\S*(?: [KMG]?i?B)?)\s+([\d,]+)\s+([\d,]+)\s+(\S+)`)

// firstSite returns the growth column and the function of the first row.
func firstSite(screen string) (growth, fn string) {
	m := siteRow.FindStringSubmatch(screen)
	if m == nil {
		return "", ""
	}
	return m[2], m[5]
}

func parseSize(t *testing.T, s string) float64 {
	t.Helper()
	f := strings.Fields(strings.TrimPrefix(s, "+"))
	if len(f) != 2 {
		t.Fatalf("size %q", s)
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		t.Fatal(err)
	}
	mul := map[string]float64{"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}[f[1]]
	return v * mul
}

// TestTopInTerminal launches top_grow, whose heap grows by 200,000 bytes a
// second through grow_heap, under `heapscope top` in a tmux pane: the
// screen shows grow_heap first with that growth, the keys change the
// order, the process and thread shown, pause and expand the stack, and q
// quits with the terminal's modes as they were.
func TestTopInTerminal(t *testing.T) {
	t.Cleanup(testutil.Cleanup)
	bin := testutil.MustBuild(t, "top_grow", testutil.Options{})
	hs := cliBinary(t)
	dir := t.TempDir()
	trace := filepath.Join(dir, "top.hst")
	done := filepath.Join(dir, "done")
	const rate = 200000
	shell := fmt.Sprintf("before=$(stty -g); %s=%s %s top --interval 1s -o %s -- %s 120 %d; rc=$?; "+
		"after=$(stty -g); if [ \"$before\" = \"$after\" ]; then echo RESTORED rc=$rc; else echo NOT RESTORED rc=$rc; fi > %s; sleep 60",
		registry.DirEnv, registryDir(t), hs, trace, bin, rate, done)
	p := newTmuxPane(t, shell)

	// Two frames at least: the second has a growth.
	s := p.waitFor("grow_heap first with a growth", func(s string) bool {
		g, fn := firstSite(s)
		return fn == "grow_heap" && strings.HasPrefix(g, "+")
	})
	if !strings.Contains(s, "sorted by live") {
		t.Errorf("the default order is not live:\n%s", s)
	}
	// Several frames: each growth within 10% of the truth.
	for i := 0; i < 3; i++ {
		g, fn := firstSite(s)
		if fn != "grow_heap" {
			t.Fatalf("first site %q, want grow_heap:\n%s", fn, s)
		}
		if got := parseSize(t, g); got < rate*0.9 || got > rate*1.1 {
			t.Errorf("grow_heap's growth %s (%.0f B/s), want %d B/s ±10%%:\n%s", g, got, rate, s)
		}
		prev := s
		s = p.waitFor("a new frame", func(s string) bool { return s != prev && siteRow.MatchString(s) })
	}

	for _, c := range []struct{ key, order, first string }{
		{"c", "calls", "churn_site"},
		{"g", "growth", "grow_heap"},
		{"t", "temporaries", "churn_site"},
		{"l", "live", "grow_heap"},
		{"s", "growth", "grow_heap"}, // s cycles: live → growth
		{"s", "calls", "churn_site"},
	} {
		p.keys(c.key)
		p.waitFor(fmt.Sprintf("sorted by %s, %s first, after %q", c.order, c.first, c.key), func(s string) bool {
			_, fn := firstSite(s)
			return strings.Contains(s, "sorted by "+c.order+" ") && fn == c.first
		})
	}
	p.keys("l")
	// p cycles the process shown: the one traced, then all again.
	p.keys("p")
	p.waitFor("pid N shown, grow_heap first", func(s string) bool {
		_, fn := firstSite(s)
		return regexp.MustCompile(`— pid \d+, all threads —`).MatchString(s) && fn == "grow_heap"
	})
	// h cycles the threads of that process: its one thread (the main
	// thread, whose id is the pid), then all again.
	p.keys("h")
	p.waitFor("thread N of pid N shown, grow_heap first", func(s string) bool {
		_, fn := firstSite(s)
		m := regexp.MustCompile(`— pid (\d+), thread (\d+) —`).FindStringSubmatch(s)
		return m != nil && m[1] == m[2] && fn == "grow_heap"
	})
	p.keys("h")
	p.waitFor("all threads again", func(s string) bool { return regexp.MustCompile(`— pid \d+, all threads —`).MatchString(s) })
	p.keys("p")
	p.waitFor("all processes again", func(s string) bool { return strings.Contains(s, "— all processes —") })
	p.keys("Enter")
	p.waitFor("grow_heap's stack expanded", func(s string) bool {
		return regexp.MustCompile(`(?m)^\s{40,}main\s+\S*top_grow\.c:\d+`).MatchString(s)
	})
	p.keys("Space")
	p.waitFor("paused", func(s string) bool { return strings.Contains(s, "paused") })
	p.keys("Space")
	p.keys("q")
	msg := waitLine(done, 20*time.Second)
	if msg != "RESTORED rc=0\n" {
		t.Fatalf("after q: %q (want the terminal's modes restored and exit 0):\n%s", msg, p.screen())
	}
	// (The message wraps at the pane's width.)
	if s := p.screen(); strings.Contains(s, "sorted by") || !strings.Contains(strings.ReplaceAll(s, "\n", ""), "stopped; trace in "+trace) {
		t.Errorf("after q the screen still shows top, or not where the trace is:\n%s", s)
	}
	// The session top started is stopped, its trace complete.
	if tr := readTrace(t, trace); tr.allocs[1000] == 0 {
		t.Errorf("the trace has no allocation of grow_heap's 1000 bytes: %v", tr.allocs)
	}
}

// TestTopPythonStack: top -- launches with the session flags' defaults, as
// run does (unwind tables): the stack of the site growing in Debian's
// python3.11, built without frame pointers, has many frames in the expanded
// view, not the one a frame-pointer walk gives.
func TestTopPythonStack(t *testing.T) {
	t.Cleanup(testutil.Cleanup)
	const python = "/usr/bin/python3.11"
	if _, err := os.Stat(python); err != nil {
		testutil.SkipWithout(t, err)
	}
	hs := cliBinary(t)
	dir := t.TempDir()
	script := filepath.Join(dir, "grow.py")
	rmust(t, os.WriteFile(script, []byte("import time\nd = []\nwhile True:\n    d.append('x' * 1000 + str(len(d)))\n    time.sleep(0.0005)\n"), 0o644))
	shell := fmt.Sprintf("PYTHONMALLOC=malloc %s=%s %s top --interval 1s -o %s -- %s %s; sleep 60",
		registry.DirEnv, registryDir(t), hs, filepath.Join(dir, "py.hst"), python, script)
	p := newTmuxPane(t, shell)
	p.waitFor("a growing site", func(s string) bool {
		g, _ := firstSite(s)
		return strings.HasPrefix(g, "+")
	})
	p.keys("g")
	p.waitFor("sorted by growth", func(s string) bool { return strings.Contains(s, "sorted by growth ") })
	p.keys("Enter")
	frame := regexp.MustCompile(`(?m)^ {52}\S`)
	s := p.waitFor("the growing site's stack, expanded, of many frames", func(s string) bool { return len(frame.FindAllString(s, -1)) >= 6 })
	if strings.Contains(s, "unwind=fp") {
		t.Errorf("top walked frame pointers:\n%s", s)
	}
	p.keys("q")
}

// TestTopPlain: without a terminal, top prints a table every interval and
// ends with the program; a name or pid that does not exist is a one-line
// error.
func TestTopPlain(t *testing.T) {
	t.Cleanup(testutil.Cleanup)
	bin := testutil.MustBuild(t, "top_grow", testutil.Options{})
	trace := filepath.Join(t.TempDir(), "plain.hst")
	cmd := cli(t, "top", "--interval", "500ms", "-o", trace, "--", bin, "3")
	var out bytes.Buffer
	cmd.Stdout = &out
	code, errs := exitCode(t, cmd)
	if code != 0 {
		t.Fatalf("top: exit %d: %s", code, errs)
	}
	frames := strings.Split(strings.TrimSpace(out.String()), "\n\n")
	if len(frames) < 3 {
		t.Fatalf("%d frames in 3 seconds at 500ms:\n%s", len(frames), out.String())
	}
	last := frames[len(frames)-1]
	if _, fn := firstSite(last); fn != "grow_heap" || !strings.Contains(last, "(ended)") {
		t.Errorf("last frame:\n%s", last)
	}
	// 3 seconds at 200,000 B/s: about 600 blocks of 1000 bytes live at the
	// end (599 when the program's last check came a little early), as
	// many as the trace holds.
	m := regexp.MustCompile(`(?m)\s+(59\d|60\d)\s+0\s+grow_heap`).FindStringSubmatch(last)
	if m == nil {
		t.Errorf("grow_heap made about 600 calls:\n%s", last)
	} else if n := readTrace(t, trace).allocs[1000]; m[1] != strconv.Itoa(n) {
		t.Errorf("the last frame says grow_heap made %s calls, the trace %d:\n%s", m[1], n, last)
	}

	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"top", "no-such-session"}, 1, `session "no-such-session": no such session`},
		{[]string{"top", "-p", "1073741824", "-o", filepath.Join(t.TempDir(), "x.hst")}, 1, "pid 1073741824: no such process"},
		{[]string{"top"}, 2, "give a session NAME"},
		{[]string{"top", "--interval", "1ms", "x"}, 2, "--interval"},
	} {
		code, stderr := exitCode(t, cli(t, c.args...))
		if code != c.code || !strings.Contains(stderr, c.want) || strings.Count(strings.TrimSpace(stderr), "\n") > 0 {
			t.Errorf("%q: exit %d (want %d), stderr %q (want one line with %q)", c.args, code, c.code, stderr, c.want)
		}
	}
}

// TestTopJoin joins a session by name from another process: top shows its
// growing site, and leaves the session running when it quits.
func TestTopJoin(t *testing.T) {
	t.Cleanup(testutil.Cleanup)
	name := runGrowing(t, "TopJoin")

	top := cli(t, "top", "--interval", "500ms", name)
	var out testutil.SyncBuffer
	top.Stdout = &out
	checkTopGrowth(t, top, &out, 20*time.Second)
	// top joined the session: it runs on.
	if code, errs := exitCode(t, cli(t, "query", name)); code != 0 {
		t.Errorf("the session ended with top: query: %d %s", code, errs)
	}
	exitCode(t, cli(t, "stop", name))
}

// runGrowing runs top_grow 60 in a session named prefix-PID, and returns
// the session's name once the workload started; the test's end kills it.
func runGrowing(t *testing.T, prefix string) string {
	t.Helper()
	bin := testutil.MustBuild(t, "top_grow", testutil.Options{})
	name := fmt.Sprintf("%s-%d", prefix, os.Getpid())
	startGrowing(t, cli(t, "run", "-q", "--name", name, "-o", filepath.Join(t.TempDir(), "run.hst"), "--", bin, "60"))
	return name
}

// growing starts top_grow 60 and returns it once it started; the test's
// end kills it.
func growing(t *testing.T) *exec.Cmd {
	t.Helper()
	w := exec.Command(testutil.MustBuild(t, "top_grow", testutil.Options{}), "60")
	startGrowing(t, w)
	return w
}

// startGrowing starts cmd (top_grow, or a run of it) and returns once the
// workload said "started"; the test's end kills it.
func startGrowing(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	stdout, err := cmd.StdoutPipe()
	rmust(t, err)
	rmust(t, cmd.Start())
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	if line, _ := bufio.NewReader(stdout).ReadString('\n'); line != "started\n" {
		t.Fatalf("workload said %q", line)
	}
}

// TestTopAttach attaches to a running process with eBPF: top shows its
// growing site, and stops the session it started on SIGINT.
func TestTopAttach(t *testing.T) {
	testutil.SkipWithoutEBPF(t, ebpf.Available())
	t.Cleanup(testutil.Cleanup)
	w := growing(t)
	trace := filepath.Join(t.TempDir(), "attach.hst")
	top := cli(t, "top", "--interval", "500ms", "-o", trace, "-p", strconv.Itoa(w.Process.Pid))
	var out testutil.SyncBuffer
	var errb bytes.Buffer
	top.Stdout, top.Stderr = &out, &errb
	checkTopGrowth(t, top, &out, 30*time.Second)
	if !strings.Contains(errb.String(), "stopped; trace in "+trace) {
		t.Errorf("top did not stop its session: %q", errb.String())
	}
}

// TestTopJoinInTerminal joins a session by name in a tmux pane: space
// pauses (the screen stays as it was over several intervals while the heap
// grows), space resumes, and Ctrl-C quits with the terminal restored and
// the session left running.
func TestTopJoinInTerminal(t *testing.T) {
	t.Cleanup(testutil.Cleanup)
	name := runGrowing(t, "TopJoinTTY")
	done := filepath.Join(t.TempDir(), "done")
	shell := fmt.Sprintf("before=$(stty -g); %s=%s %s top --interval 300ms %s; rc=$?; "+
		"after=$(stty -g); if [ \"$before\" = \"$after\" ]; then echo RESTORED rc=$rc; else echo NOT RESTORED rc=$rc; fi > %s; sleep 60",
		registry.DirEnv, registryDir(t), cliBinary(t), name, done)
	p := newTmuxPane(t, shell)
	liveLine := regexp.MustCompile(`(?m)^live .*$`)
	p.waitFor("grow_heap first, joined", func(s string) bool {
		_, fn := firstSite(s)
		return fn == "grow_heap" && strings.Contains(s, "(joined)")
	})
	p.keys("Space")
	p.waitFor("paused", func(s string) bool { return strings.Contains(s, "paused") })
	time.Sleep(time.Second) // a frame asked for before the key may still come
	s := p.screen()
	// grow_heap allocates every 5 ms: any frame taken would change the
	// live line. Ten intervals paused show none.
	for i := 0; i < 10; i++ {
		time.Sleep(300 * time.Millisecond)
		if now := p.screen(); liveLine.FindString(now) != liveLine.FindString(s) {
			t.Fatalf("the screen changed while paused:\n%s\nthen:\n%s", s, now)
		}
	}
	p.keys("Space")
	p.waitFor("a new frame after resuming", func(now string) bool {
		return !strings.Contains(now, "paused") && liveLine.FindString(now) != liveLine.FindString(s)
	})
	p.keys("C-c")
	msg := waitLine(done, 20*time.Second)
	if msg != "RESTORED rc=0\n" {
		t.Fatalf("after Ctrl-C: %q (want the terminal's modes restored and exit 0):\n%s", msg, p.screen())
	}
	if code, errs := exitCode(t, cli(t, "query", name)); code != 0 {
		t.Errorf("the joined session ended with top: query: %d %s", code, errs)
	}
	exitCode(t, cli(t, "stop", name))
}

// TestTopAttachAggregate: with eBPF in aggregate mode the totals are the
// kernel's, read at each flush: grow_heap grows at its rate, and
// temporaries are shown as unknown.
func TestTopAttachAggregate(t *testing.T) {
	testutil.SkipWithoutEBPF(t, ebpf.Available())
	t.Cleanup(testutil.Cleanup)
	w := growing(t)
	top := cli(t, "top", "--interval", "500ms", "--mode", "aggregate", "-o", filepath.Join(t.TempDir(), "agg.hst"), "-p", strconv.Itoa(w.Process.Pid))
	var out testutil.SyncBuffer
	var errb bytes.Buffer
	top.Stdout, top.Stderr = &out, &errb
	rmust(t, top.Start())
	growth := regexp.MustCompile(`(?m)^\s+\S+ [KMG]?i?B\s+\+(\S+ [KMG]?i?B)\s+[\d,]+\s+–\s+grow_heap`)
	var gs [][]string
	for deadline := time.Now().Add(30 * time.Second); len(gs) < 4 && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		gs = growth.FindAllStringSubmatch(out.String(), -1)
	}
	top.Process.Signal(syscall.SIGINT)
	if err := top.Wait(); err != nil {
		t.Fatalf("top: %v: %s\n%s", err, errb.String(), out.String())
	}
	if len(gs) < 4 {
		t.Fatalf("top -p --mode aggregate never showed grow_heap growing, with temporaries unknown, four times:\n%s", out.String())
	}
	for _, g := range gs[1:] {
		if v := parseSize(t, g[1]); v < 200000*0.9 || v > 200000*1.1 {
			t.Errorf("growth %s, want 200000 B/s ±10%%", g[1])
		}
	}
}

// TestTopSampled: a sampled session's view shows estimates, and says so,
// and shows no temporaries: grow_heap's calls, 400 blocks of 1000 bytes in
// 2 s, are estimated from about 87 samples (a standard deviation of 9.5%;
// counted as they are, the samples alone, they were about 87).
func TestTopSampled(t *testing.T) {
	t.Cleanup(testutil.Cleanup)
	bin := testutil.MustBuild(t, "top_grow", testutil.Options{})
	cmd := cli(t, "top", "--sample", "4KiB", "--interval", "500ms", "-o", filepath.Join(t.TempDir(), "s.hst"), "--", bin, "2")
	var out bytes.Buffer
	cmd.Stdout = &out
	if code, errs := exitCode(t, cmd); code != 0 {
		t.Fatalf("top --sample: exit %d: %s", code, errs)
	}
	frames := strings.Split(strings.TrimSpace(out.String()), "\n\n")
	last := frames[len(frames)-1]
	m := regexp.MustCompile(`(?m)\s+([\d,]+)\s+–\s+grow_heap`).FindStringSubmatch(last)
	if !strings.Contains(last, "estimated (sampled every 4.0 KiB on average)") || m == nil {
		t.Fatalf("last frame of a sampled session:\n%s", last)
	}
	if calls, err := strconv.Atoi(strings.ReplaceAll(m[1], ",", "")); err != nil || calls < 240 || calls > 560 {
		t.Errorf("grow_heap: %s calls estimated, want 400 ±40%%:\n%s", m[1], last)
	}
}

// TestReadingWord: while a joined session reads back its trace file, top
// says how far it is, and at what rate once two frames give one.
func TestReadingWord(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	first := &topframe.Frame{Time: t0, Reading: true, ReadBytes: 10 << 20, ReadSize: 100 << 20}
	if got, want := readingWord(first, first), "reading the trace back: 10.0 MiB of 100.0 MiB (10%)"; got != want {
		t.Errorf("first frame: %q, want %q", got, want)
	}
	next := &topframe.Frame{Time: t0.Add(2 * time.Second), Reading: true, ReadBytes: 50 << 20, ReadSize: 100 << 20}
	if got, want := readingWord(next, first), "reading the trace back: 50.0 MiB of 100.0 MiB (50%), 20.0 MiB/s, 3s left"; got != want {
		t.Errorf("later frame: %q, want %q", got, want)
	}
	// A reader may read a few bytes twice (headers, the index).
	over := &topframe.Frame{Time: t0.Add(time.Second), Reading: true, ReadBytes: 101 << 20, ReadSize: 100 << 20}
	if got := readingWord(over, nil); !strings.Contains(got, "100.0 MiB of 100.0 MiB (100%)") {
		t.Errorf("past the end: %q", got)
	}
}

// TestTopViewEndsWhileReading: the full-screen view keeps asking a session
// of its own that ended while it read its trace back (it answers once that
// is done), as the plain table does; a joined one is gone, and its last
// answer stands, as in the plain table, rather than a progress whose rate
// falls and time left grows for ever.
func TestTopViewEndsWhileReading(t *testing.T) {
	for _, own := range []bool{true, false} {
		src := &topSource{name: "s", state: func() (string, bool) { return "ended", true }}
		if own {
			src.stop = func() error { return nil }
		}
		m := &topModel{src: src, interval: time.Second}
		f := &topframe.Frame{Time: time.Now(), Reading: true, ReadBytes: 10 << 20, ReadSize: 100 << 20, Ended: true}
		m.Update(frameMsg{f: f, ended: true})
		m.Update(tickMsg{m.gen})
		if m.inflight != own {
			t.Errorf("own session %v, ended while reading: asks again %v, want %v", own, m.inflight, own)
		}
	}
}
