package main

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/internal/preload"
	"github.com/heapscope/heapscope/internal/proc"
	"github.com/heapscope/heapscope/internal/testutil"
	"github.com/heapscope/heapscope/tracefile"
)

// interactive is a program driven through its standard input.
type interactive struct {
	t    *testing.T
	cmd  *exec.Cmd
	in   io.WriteCloser
	out  *bufio.Reader
	all  bytes.Buffer // everything it wrote, once it exited
	done chan struct{}
}

func startInteractive(t *testing.T, bin string, args ...string) *interactive {
	t.Helper()
	cmd := exec.Command(bin, args...)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	pr, pw := io.Pipe()
	cmd.Stdout = pw
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &interactive{t: t, cmd: cmd, in: in, done: make(chan struct{})}
	// every byte it writes is kept (for the comparison) and read by line
	tee, tw := io.Pipe()
	p.out = bufio.NewReader(tee)
	go func() {
		io.Copy(io.MultiWriter(&p.all, tw), pr)
		tw.Close()
		close(p.done)
	}()
	go func() {
		cmd.Wait()
		pw.Close()
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-p.done
	})
	return p
}

func (p *interactive) line() string {
	p.t.Helper()
	ch := make(chan string, 1)
	go func() {
		s, _ := p.out.ReadString('\n')
		ch <- s
	}()
	select {
	case s := <-ch:
		return strings.TrimSpace(s)
	case <-time.After(60 * time.Second):
		p.t.Fatal("the program does not answer")
	}
	return ""
}

func (p *interactive) say(s string) string {
	p.t.Helper()
	fmt.Fprintln(p.in, s)
	return p.line()
}

// finish closes its input and returns its exit status and output.
func (p *interactive) finish() (int, string) {
	p.t.Helper()
	p.in.Close()
	go io.Copy(io.Discard, p.out)
	select {
	case <-p.done:
	case <-time.After(120 * time.Second):
		p.t.Fatal("the program does not exit")
	}
	return p.cmd.ProcessState.ExitCode(), p.all.String()
}

// attachSession is a `heapscope attach --inject` running in the background.
type attachSession struct {
	t      *testing.T
	cmd    *exec.Cmd
	stderr *bytes.Buffer
	exited chan struct{}
}

// syncBuffer is a bytes.Buffer safe to write from one goroutine while
// another reads.
type lockedWriter struct {
	mu  chan struct{}
	buf *bytes.Buffer
}

func (w lockedWriter) Write(b []byte) (int, error) {
	w.mu <- struct{}{}
	defer func() { <-w.mu }()
	return w.buf.Write(b)
}

func startAttach(t *testing.T, args ...string) *attachSession {
	t.Helper()
	a := &attachSession{t: t, stderr: &bytes.Buffer{}, exited: make(chan struct{})}
	mu := make(chan struct{}, 1)
	a.cmd = cli(t, append([]string{"attach", "--inject"}, args...)...)
	a.cmd.Stderr = lockedWriter{mu, a.stderr}
	if err := a.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		a.cmd.Wait()
		close(a.exited)
	}()
	t.Cleanup(func() {
		a.cmd.Process.Kill()
		<-a.exited
	})
	read := func() string {
		mu <- struct{}{}
		defer func() { <-mu }()
		return a.stderr.String()
	}
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		select {
		case <-a.exited:
			t.Fatalf("attach exited: %s", read())
		default:
		}
		if strings.Contains(read(), "tracing pid") {
			return a
		}
	}
	t.Fatalf("attach did not start: %s", read())
	return nil
}

// stop ends the session with SIGINT and waits for heapscope.
func (a *attachSession) stop() {
	a.t.Helper()
	a.cmd.Process.Signal(syscall.SIGINT)
	a.wait()
}

func (a *attachSession) wait() {
	a.t.Helper()
	select {
	case <-a.exited:
	case <-time.After(60 * time.Second):
		a.t.Fatal("attach does not end")
	}
	if code := a.cmd.ProcessState.ExitCode(); code != 0 {
		a.t.Fatalf("attach: exit %d: %s", code, a.stderr.String())
	}
}

// TestAttachInjectLeaksDWARF attaches with --inject --unwind dwarf to a
// running program built without frame pointers, which then leaks known
// blocks in two functions and frees those of a third: the leaks are exact
// per function, their stacks reach main, and the program runs on.
func TestAttachInjectLeaksDWARF(t *testing.T) {
	t.Cleanup(testutil.Cleanup)
	bin := testutil.MustBuild(t, "inject_target", testutil.Options{NoFramePointers: true})
	p := startInteractive(t, bin, "1")
	p.line() // ready
	trace := filepath.Join(t.TempDir(), "t.hst")
	a := startAttach(t, "--unwind", "dwarf", "-q", "-o", trace, "-p", strconv.Itoa(p.cmd.Process.Pid))
	if l := p.say("leak 100"); l != "leaked" {
		t.Fatalf("target: %q", l)
	}
	a.stop()
	if l := p.say("burst 100"); l != "done" {
		t.Fatalf("target after the session: %q", l)
	}
	r := reportJSON(t, trace)
	got := map[string][2]uint64{} // function: bytes, blocks
	for _, l := range r.Leaks {
		fn, reachesMain := "", false
		for i, f := range l.Stack {
			if i == 0 {
				fn = f.Function
			}
			reachesMain = reachesMain || f.Function == "main"
		}
		if !reachesMain {
			t.Errorf("leak in %s: its stack does not reach main: %+v", fn, l.Stack)
		}
		g := got[fn]
		got[fn] = [2]uint64{g[0] + l.Bytes, g[1] + l.Blocks}
	}
	want := map[string][2]uint64{"leak_small": {2400, 100}, "leak_big": {400000, 100}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("leaks by function %v, want %v", got, want)
	}
}

// TestAttachInjectPrograms: Debian's python3.11, sqlite3 and a C++ program,
// attached while they wait and traced to their end, print the same and
// exit with the same status as untraced.
func TestAttachInjectPrograms(t *testing.T) {
	t.Cleanup(testutil.Cleanup)
	py := `import sys, json, collections
print("ready", flush=True)
sys.stdin.readline()
d = {str(i): [i, str(i * i), {"k": i}] for i in range(100000)}
b = [bytearray(600 + i % 400) for i in range(20000)]  # beyond pymalloc's 512 bytes: malloc's
s = json.dumps(d) + str(sum(len(x) for x in b))
c = collections.Counter(s)
print(len(s), sum(c.values()), c.most_common(3))
sys.exit(3)
`
	sql := []string{
		".print ready",
		"create table t(x text, y int);",
		"insert into t select hex(randomblob(32)), value from generate_series(1, 50000);",
		"create index i on t(x);",
		"select count(*), count(distinct substr(x, 1, 2)), sum(y) from t;",
		"select y from t order by y desc limit 3;",
	}
	cxx := testutil.MustBuild(t, "inject_cxx", testutil.Options{CXX: true})
	for _, c := range []struct {
		name  string
		bin   string
		args  []string
		input []string // first the line it answers "ready" to, then the rest
	}{
		{"python3.11", testutil.Tool(t, "/usr/bin/python3.11"), []string{"-c", py}, []string{"", "go"}},
		{"sqlite3", testutil.Tool(t, "sqlite3"), []string{":memory:"}, sql},
		{"c++", cxx, nil, []string{"", "go"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			trace := filepath.Join(t.TempDir(), "t.hst")
			run := func(traced bool) (int, string, *attachSession) {
				p := startInteractive(t, c.bin, c.args...)
				if c.input[0] != "" {
					fmt.Fprintln(p.in, c.input[0])
				}
				if l := p.line(); l != "ready" {
					t.Fatalf("%s: %q", c.name, l)
				}
				var a *attachSession
				if traced {
					a = startAttach(t, "-q", "-o", trace, "-p", strconv.Itoa(p.cmd.Process.Pid))
				}
				for _, l := range c.input[1:] {
					fmt.Fprintln(p.in, l)
				}
				code, out := p.finish()
				return code, out, a
			}
			wantCode, want, _ := run(false)
			code, out, a := run(true)
			a.wait() // the session ends with the program
			if code != wantCode || out != want {
				t.Errorf("traced: exit %d, output\n%s\nuntraced: exit %d, output\n%s", code, out, wantCode, want)
			}
			r := reportJSON(t, trace)
			t.Logf("traced: %d allocations, %d frees, %d unmatched frees", r.Summary.Allocations, r.Summary.Frees, r.Summary.UnmatchedFrees)
			if r.Summary.Allocations < 10000 {
				t.Errorf("only %d allocations traced", r.Summary.Allocations)
			}
		})
	}
}

// injectState reads the interposer's state in process pid (see
// internal/preload's InjectState*): whether a session is on, its watcher
// thread, the GOT entries redirected. ok is false when the interposer is
// not loaded.
func injectState(t *testing.T, pid int) (active, watcher, entries uint32, ok bool) {
	t.Helper()
	lib, err := preload.InjectLibrary()
	if err != nil {
		t.Fatal(err)
	}
	maps, err := proc.ReadMaps(pid)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range maps {
		base := filepath.Base(m.Path)
		if m.Offset != 0 || !(strings.HasPrefix(base, "libheapscope_preload") || strings.HasPrefix(m.Path, "/memfd:heapscope-preload")) {
			continue
		}
		f, err := os.Open(fmt.Sprintf("/proc/%d/mem", pid))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		b := make([]byte, preload.InjectStateSize)
		if _, err := f.ReadAt(b, int64(m.Start+lib.State)); err != nil {
			t.Fatal(err)
		}
		le := binary.LittleEndian
		return le.Uint32(b[preload.InjectStateActive:]), le.Uint32(b[preload.InjectStateWatcher:]), le.Uint32(b[preload.InjectStateEntries:]), true
	}
	return 0, 0, 0, false
}

// untraced waits until no thread of pid is traced or stopped by a tracer,
// and the interposer, if loaded, has no session, no watcher and no entry
// redirected.
func untraced(t *testing.T, pid int) {
	t.Helper()
	var why string
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		why = ""
		tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
		for _, task := range tasks {
			st, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/status", pid, task.Name()))
			for _, l := range strings.Split(string(st), "\n") {
				if strings.HasPrefix(l, "TracerPid:") && strings.TrimSpace(l[10:]) != "0" {
					why = "thread " + task.Name() + " is traced"
				}
				if strings.HasPrefix(l, "State:") && strings.Contains(l, "t (tracing stop)") {
					why = "thread " + task.Name() + " is in a tracing stop"
				}
			}
		}
		if why == "" {
			if a, w, e, ok := injectState(t, pid); ok && (a != 0 || w != 0 || e != 0) {
				why = fmt.Sprintf("the interposer is active %d, watcher %d, %d entries redirected", a, w, e)
			}
		}
		if why == "" {
			return
		}
	}
	t.Fatalf("pid %d: %s", pid, why)
}

// TestAttachInjectKilled kills heapscope (SIGKILL) in the middle of
// injections and of a session into a program whose threads allocate all
// the time: each time, the program runs on, no thread stays traced, and
// the interposer left in it (its collector gone) puts the GOT entries back
// and stops recording by itself; a later attach works.
func TestAttachInjectKilled(t *testing.T) {
	t.Cleanup(testutil.Cleanup)
	bin := testutil.MustBuild(t, "inject_target", testutil.Options{})
	p := startInteractive(t, bin, "4")
	p.line() // ready
	pid := p.cmd.Process.Pid
	if l := p.say("run"); l != "running" {
		t.Fatalf("target: %q", l)
	}
	check := func(what string) {
		t.Helper()
		untraced(t, pid)
		if l := p.say("pause"); !strings.HasPrefix(l, "paused") {
			t.Fatalf("%s: target: %q", what, l)
		}
		if l := p.say("run"); l != "running" {
			t.Fatalf("%s: target: %q", what, l)
		}
	}
	// (internal/inject's tests kill it at each point of an injection)
	for _, d := range []time.Duration{0, 20, 60} {
		d *= time.Millisecond
		cmd := cli(t, "attach", "--inject", "-q", "-o", filepath.Join(t.TempDir(), "k.hst"), "-p", strconv.Itoa(pid))
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(d)
		cmd.Process.Kill()
		cmd.Wait()
		_, _, e, loaded := injectState(t, pid)
		t.Logf("killed after %v: interposer loaded %v, %d entries redirected then", d, loaded, e)
		check(fmt.Sprintf("killed after %v", d))
	}
	// mid-session
	a := startAttach(t, "-q", "-o", filepath.Join(t.TempDir(), "s.hst"), "-p", strconv.Itoa(pid))
	time.Sleep(300 * time.Millisecond)
	if act, w, e, _ := injectState(t, pid); act != 1 || w == 0 || e == 0 {
		t.Errorf("while traced: active %d, watcher %d, %d entries", act, w, e)
	}
	a.cmd.Process.Kill()
	<-a.exited
	check("killed mid-session")
	// and a session after all that
	trace := filepath.Join(t.TempDir(), "t.hst")
	a = startAttach(t, "-q", "-o", trace, "-p", strconv.Itoa(pid))
	time.Sleep(100 * time.Millisecond)
	a.stop()
	check("after a last session")
	if r := reportJSON(t, trace); r.Summary.Allocations == 0 {
		t.Errorf("the last session traced nothing")
	}
}

// TestAttachInjectAgainstHeaptrack attaches `heaptrack -p` (gdb injecting
// heaptrack's interposer) to a running workload, and `heapscope attach
// --inject` to another run of the same one, and gives both the same window
// of work, from the attach to the program's exit: the calls to allocation
// functions agree, with each other and with what the program made.
func TestAttachInjectAgainstHeaptrack(t *testing.T) {
	t.Cleanup(testutil.Cleanup)
	testutil.Tool(t, "heaptrack")
	testutil.Tool(t, "gdb")
	printer := testutil.Tool(t, "heaptrack_print")
	bin := testutil.MustBuild(t, "inject_target", testutil.Options{})
	const threads, burst, leak = 2, 5000, 100
	// the window: threads*burst pairs, then leak's 3*leak mallocs and
	// its one calloc
	const want = threads*burst + 3*leak + 1
	window := func(p *interactive) {
		if l := p.say(fmt.Sprintf("burst %d", burst)); l != "done" {
			t.Fatalf("target: %q", l)
		}
		if l := p.say(fmt.Sprintf("leak %d", leak)); l != "leaked" {
			t.Fatalf("target: %q", l)
		}
		fmt.Fprintln(p.in, "quit")
		if code, _ := p.finish(); code != 0 {
			t.Fatalf("target: exit %d", code)
		}
	}
	dir := t.TempDir()

	p := startInteractive(t, bin, strconv.Itoa(threads))
	p.line() // ready
	ht := exec.Command("heaptrack", "-o", filepath.Join(dir, "ht"), "-p", strconv.Itoa(p.cmd.Process.Pid))
	ht.Dir = dir
	htOut, err := ht.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	ht.Stderr = ht.Stdout
	if err := ht.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ht.Process.Kill(); ht.Wait() })
	var said strings.Builder
	sc := bufio.NewScanner(htOut)
	for sc.Scan() {
		said.WriteString(sc.Text() + "\n")
		if strings.Contains(sc.Text(), "injection finished") {
			break
		}
	}
	go io.Copy(io.Discard, htOut)
	window(p)
	if err := ht.Wait(); err != nil {
		t.Fatalf("heaptrack -p: %v\n%s", err, said.String())
	}
	files, _ := filepath.Glob(filepath.Join(dir, "ht*.zst"))
	if len(files) != 1 {
		t.Fatalf("heaptrack wrote %v\n%s", files, said.String())
	}
	out, err := exec.Command(printer, "-l", "1", "-n", "100", files[0]).Output()
	if err != nil {
		t.Fatalf("heaptrack_print: %v", err)
	}
	htCalls := parseHeaptrack(t, string(out)).calls

	p = startInteractive(t, bin, strconv.Itoa(threads))
	p.line()
	trace := filepath.Join(dir, "hs.hst")
	a := startAttach(t, "-q", "-o", trace, "-p", strconv.Itoa(p.cmd.Process.Pid))
	window(p)
	a.wait() // the session ends with the program
	s := reportJSON(t, trace).Summary
	hsCalls := s.Allocations + s.Reallocations
	t.Logf("calls to allocation functions in the window: heaptrack -p %d, heapscope attach --inject %d, the program's %d", htCalls, hsCalls, want)
	if hsCalls != htCalls {
		t.Errorf("calls to allocation functions: heapscope %d, heaptrack %d", hsCalls, htCalls)
	}
	if hsCalls != want {
		t.Errorf("heapscope saw %d calls, the program made %d", hsCalls, want)
	}
}

// loopSink keeps a trace's events and its last statistics.
type loopSink struct {
	event.Sink
	events []event.Event
	stats  event.Stats
}

func (s *loopSink) Events(evs []event.Event) error {
	s.events = append(s.events, evs...)
	return nil
}

func (s *loopSink) Stats(st event.Stats) error {
	s.stats = st
	return nil
}

// TestAttachInjectAgainAndAgain: a program whose 8 threads allocate all the
// time is attached with `attach --inject --on-full block`, traced a moment
// and stopped, 20 times. Each trace has lost nothing, delivered what it
// holds, and holds every allocation of each thread's loop from its first
// to its last (inject_target's sizes say which were skipped), each
// followed by its free; the program runs on and answers after the last.
func TestAttachInjectAgainAndAgain(t *testing.T) {
	t.Cleanup(testutil.Cleanup)
	const threads, cycles = 8, 20
	bin := testutil.MustBuild(t, "inject_target", testutil.Options{})
	p := startInteractive(t, bin, strconv.Itoa(threads))
	p.line() // ready
	pid := p.cmd.Process.Pid
	if l := p.say("run"); l != "running" {
		t.Fatalf("target: %q", l)
	}
	dir := t.TempDir()
	for i := 0; i < cycles; i++ {
		trace := filepath.Join(dir, fmt.Sprintf("c%d.hst", i))
		a := startAttach(t, "-q", "--on-full", "block", "-o", trace, "-p", strconv.Itoa(pid))
		time.Sleep(50 * time.Millisecond)
		a.stop()
		untraced(t, pid)
		r, err := tracefile.Open(trace)
		if err != nil {
			t.Fatal(err)
		}
		s := &loopSink{Sink: event.Discard}
		err = r.Replay(s, tracefile.Window{})
		r.Close()
		if err != nil {
			t.Fatal(err)
		}
		if lost := s.stats.TotalLost(); lost != 0 {
			t.Errorf("cycle %d: %d events lost with --on-full block", i, lost)
		}
		if s.stats.Delivered != uint64(len(s.events)) {
			t.Errorf("cycle %d: %d events delivered, %d in the trace", i, s.stats.Delivered, len(s.events))
		}
		// per thread of the loop: its sizes in sequence, each block freed
		type loop struct {
			last     uint64
			n, frees int
			open     map[uint64]bool
			skipped  bool
		}
		loops := make([]loop, threads)
		total := 0
		for _, e := range s.events {
			switch e.Kind {
			case event.KindAlloc:
				th, r := int((e.Size-16)/4096), (e.Size-16)%4096
				if e.Size < 16 || th >= threads || r >= 4093 {
					continue
				}
				l := &loops[th]
				if l.n > 0 && r != (l.last+7)%4093 && !l.skipped {
					t.Errorf("cycle %d: thread %d's loop: after size residue %d came %d: allocations were skipped", i, th, l.last, r)
					l.skipped = true
				}
				if l.open == nil {
					l.open = map[uint64]bool{}
				}
				l.open[e.Addr] = true
				l.last = r
				l.n++
				total++
			case event.KindFree:
				for th := range loops {
					if loops[th].open[e.Addr] {
						delete(loops[th].open, e.Addr)
						loops[th].frees++
					}
				}
			}
		}
		for th, l := range loops {
			// the last block of a loop may be freed after the stop
			if l.n-l.frees > 1 {
				t.Errorf("cycle %d: thread %d: %d allocations of its loop, %d freed", i, th, l.n, l.frees)
			}
		}
		if total == 0 {
			t.Errorf("cycle %d: nothing of the loops traced", i)
		}
		t.Logf("cycle %d: %d events, %d of the loops' allocations", i, len(s.events), total)
	}
	if l := p.say("pause"); !strings.HasPrefix(l, "paused") {
		t.Fatalf("after %d cycles: target: %q", cycles, l)
	}
	if l := p.say("burst 100"); l != "done" {
		t.Fatalf("after %d cycles: target: %q", cycles, l)
	}
}
