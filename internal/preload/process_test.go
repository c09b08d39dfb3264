//go:build linux && amd64

package preload

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/internal/testutil"
)

// ctorLib builds preload_ctorlib as a shared library.
func ctorLib(t *testing.T) string {
	t.Helper()
	return testutil.MustBuild(t, "preload_ctorlib", testutil.Options{Flags: []string{"-shared", "-fPIC"}})
}

// TestConstructors sees the allocations made before main: in a linked
// library's constructor, then in the executable's, then main's.
func TestConstructors(t *testing.T) {
	lib := ctorLib(t)
	bin := testutil.MustBuild(t, "preload_ctor", testutil.Options{Flags: []string{"-Wl,--no-as-needed", lib}})
	r := trace(t, Config{}, bin)
	if !r.state.Success() {
		t.Fatalf("workload failed: %v", r.state)
	}
	var order []string
	for _, e := range r.of(r.pid) {
		if e.Func != event.FuncMalloc {
			continue
		}
		switch c := r.chain(e); {
		case e.Size == 2222 && slices.Contains(c, "lib_ctor"):
			order = append(order, "lib_ctor")
		case e.Size == 1111 && slices.Contains(c, "exe_ctor"):
			order = append(order, "exe_ctor")
		case e.Size == 3333 && slices.Equal(c[:2], []string{"exe_site", "main"}):
			order = append(order, "main")
		case e.Size == 4444 && slices.Equal(c[:3], []string{"lib_site", "lib_work", "main"}):
			order = append(order, "lib_work")
		}
	}
	if want := []string{"lib_ctor", "exe_ctor", "main", "lib_work"}; !slices.Equal(order, want) {
		t.Errorf("allocations seen %v, want %v", order, want)
	}
	var libMod bool
	for _, m := range r.modules {
		if m.Path == lib && m.BuildID != "" {
			libMod = true
		}
	}
	if !libMod {
		t.Errorf("no module with a build-id for %s", lib)
	}
}

// TestDlopen covers frames in a library loaded after main started.
func TestDlopen(t *testing.T) {
	lib := ctorLib(t)
	bin := testutil.MustBuild(t, "preload_dlopen", testutil.Options{Flags: []string{"-ldl"}})
	r := trace(t, Config{}, bin, lib)
	if !r.state.Success() {
		t.Fatalf("workload failed: %v", r.state)
	}
	var seen []string
	for _, e := range r.of(r.pid) {
		if e.Size == 2222 || e.Size == 5555 {
			seen = append(seen, fmt.Sprintf("%d %v", e.Size, r.chain(e)[:2]))
		}
	}
	want := []string{"2222 [lib_site lib_ctor]", "5555 [lib_site lib_work]"}
	if !slices.Equal(seen, want) {
		t.Errorf("allocations from the dlopen'd library: %v, want %v", seen, want)
	}
}

// TestDWARF gets the whole chain main→site_a→site_b on an -O2 build
// without frame pointers with UnwindDWARF; with frame pointers the chain is
// cut short, which is what makes the first half of the test mean something.
func TestDWARF(t *testing.T) {
	bin := testutil.MustBuild(t, "preload_dwarf", testutil.Options{NoFramePointers: true, Opt: "2"})
	want := []string{"site_b", "site_a", "main"}
	chains := func(u event.Unwind) [][]string {
		r := trace(t, Config{Unwind: u}, bin)
		var out [][]string
		for _, e := range r.of(r.pid) {
			if e.Func == event.FuncMalloc && e.Size == 4098 {
				out = append(out, r.chain(e))
			}
		}
		if len(out) != 3 {
			t.Fatalf("unwind %v: %d allocations of 4098 bytes, want 3", u, len(out))
		}
		return out
	}
	for _, c := range chains(event.UnwindDWARF) {
		if len(c) < 3 || !slices.Equal(c[:3], want) {
			t.Errorf("dwarf: chain %v, want it to start %v", c, want)
		}
	}
	full := 0
	for _, c := range chains(event.UnwindFP) {
		if len(c) >= 3 && slices.Equal(c[:3], want) {
			full++
		}
	}
	if full == 3 {
		t.Error("frame pointers found the whole chain in code built without them: the workload tests nothing")
	}
}

// forkFamilies runs test once with each family set the fork tests use: the default,
// and every family, mmap included (the interposer's own mappings must never
// reach its mmap wrappers in a child being reset).
func forkFamilies(t *testing.T, test func(*testing.T, event.Family)) {
	for _, fam := range []event.Family{event.FamilyHeap, event.FamilyAll} {
		t.Run(fam.String(), func(t *testing.T) { test(t, fam) })
	}
}

// TestForkExec follows a process that forks and a child that execs, each
// image in its own stream.
func TestForkExec(t *testing.T) { forkFamilies(t, testForkExec) }

func testForkExec(t *testing.T, fam event.Family) {
	bin := testutil.MustBuild(t, "preload_fork", testutil.Options{})
	const k = 500
	r := trace(t, Config{Families: fam}, bin, strconv.Itoa(k))
	if !r.state.Success() {
		t.Fatalf("workload failed: %v", r.state)
	}
	if len(r.procs) != 3 {
		t.Fatalf("%d Process records, want 3 (parent, child, exec'd child): %+v", len(r.procs), r.procs)
	}
	parent, child, execd := r.procs[0], r.procs[1], r.procs[2]
	if int(parent.PID) != r.pid || child.PPID != parent.PID || execd.PID != child.PID || child.PID == parent.PID {
		t.Fatalf("processes %+v", r.procs)
	}
	if !slices.Equal(execd.Cmdline[1:], []string{"exec", strconv.Itoa(k)}) || execd.Exe != bin {
		t.Errorf("exec'd image: exe %q argv %q", execd.Exe, execd.Cmdline)
	}
	// The child's PID has two images: before and after its exec.
	var childEvents, execEvents []event.Event
	for i, e := range r.events {
		switch {
		case e.PID == child.PID && r.image[i] == 1:
			childEvents = append(childEvents, e)
		case e.PID == child.PID && r.image[i] == 2:
			execEvents = append(execEvents, e)
		}
	}
	count := func(evs []event.Event, pid uint32) map[string]int {
		m := map[string]int{}
		for _, e := range evs {
			if e.Kind == event.KindAlloc {
				m[r.site(e)]++
			}
		}
		return m
	}
	p := count(r.of(r.pid), parent.PID)
	c := count(childEvents, child.PID)
	x := count(execEvents, child.PID)
	if p["site_parent"] != k || p["site_child"] != 0 || p["site_exec"] != 0 {
		t.Errorf("parent stream: %v", p)
	}
	if c["site_child"] != k || c["site_parent"] != 0 || c["site_exec"] != 0 {
		t.Errorf("child stream before exec: %v", c)
	}
	if x["site_exec"] != k || x["site_child"] != 0 || x["site_parent"] != 0 {
		t.Errorf("exec'd stream: %v", x)
	}
	// the child freed its parent's first block: a free its stream never saw
	// allocated
	var first uint64
	for _, e := range r.of(r.pid) {
		if r.site(e) == "site_parent" {
			first = e.Addr
			break
		}
	}
	freedParent := false
	for _, e := range childEvents {
		if e.Kind == event.KindFree && e.Addr == first {
			freedParent = true
		}
	}
	if first == 0 || !freedParent {
		t.Errorf("the child's free of its parent's block %#x is missing", first)
	}
	// Exits: the parent's status; -1 for the exec'd-over image and for the
	// child, which is not ours.
	status := map[uint32][]int32{}
	for _, e := range r.exits {
		status[e.PID] = append(status[e.PID], e.Status)
	}
	if !slices.Equal(status[parent.PID], []int32{0}) || !slices.Equal(status[child.PID], []int32{-1, -1}) {
		t.Errorf("exit statuses %v", status)
	}
}

// TestRawFork forks with the system call, running no atfork handlers: the
// child still gets a stream of its own, and its parent's is untouched.
func TestRawFork(t *testing.T) { forkFamilies(t, testRawFork) }

func testRawFork(t *testing.T, fam event.Family) {
	bin := testutil.MustBuild(t, "preload_fork", testutil.Options{})
	const k = 300
	r := trace(t, Config{Families: fam}, bin, "raw", strconv.Itoa(k))
	if !r.state.Success() {
		t.Fatalf("workload failed: %v", r.state)
	}
	if len(r.procs) != 2 || r.procs[1].PPID != r.procs[0].PID {
		t.Fatalf("processes %+v", r.procs)
	}
	for i, p := range r.procs {
		counts := map[string]int{}
		for _, e := range r.of(int(p.PID)) {
			if e.Kind == event.KindAlloc {
				counts[r.site(e)]++
			}
		}
		want := map[int]string{0: "site_parent", 1: "site_child"}[i]
		other := map[int]string{0: "site_child", 1: "site_parent"}[i]
		if counts[want] != k || counts[other] != 0 {
			t.Errorf("process %d (%d): %v, want %d from %s only", i, p.PID, counts, k, want)
		}
	}
}

// started is a traced workload still running, driven through its stdin.
type started struct {
	c      *Collector
	rec    *recorder
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stdout *bufio.Reader
}

func start(t *testing.T, cfg Config, bin string, args ...string) *started {
	t.Helper()
	s := &started{rec: newRecorder(), cmd: exec.Command(bin, args...)}
	var err error
	if s.c, err = New(cfg, s.rec); err != nil {
		t.Fatal(err)
	}
	if err := s.c.Prepare(s.cmd); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.c.Close() }) // after the workload's end: cleanups run last first
	stdin, out := testutil.StartPiped(t, s.cmd)
	s.stdin, s.stdout = stdin, bufio.NewReader(out)
	return s
}

// expect reads the workload's next line and checks it.
func (s *started) expect(t *testing.T, want string) {
	t.Helper()
	l, err := s.stdout.ReadString('\n')
	if err != nil || strings.TrimSpace(l) != want {
		t.Fatalf("workload said %q (%v), want %q", l, err, want)
	}
}

// siteEvents counts events of the workload's site_phase with and without a
// stack.
func siteEvents(rec *recorder, pid int) (with, without int) {
	for _, e := range rec.events {
		if int(e.PID) != pid || e.Size != 48 || e.Func != event.FuncMalloc {
			continue
		}
		if e.Stack == 0 {
			without++
		} else if rec.site(e) == "site_phase" {
			with++
		}
	}
	return with, without
}

// TestKilled keeps what a process published before it was SIGKILLed.
func TestKilled(t *testing.T) {
	bin := testutil.MustBuild(t, "preload_wait", testutil.Options{})
	const n = 30000
	s := start(t, Config{}, bin, strconv.Itoa(n))
	s.expect(t, "phase 1")
	s.cmd.Process.Signal(syscall.SIGKILL)
	s.cmd.Wait()
	reportExit(s.c, s.cmd)
	if err := s.c.Close(); err != nil {
		t.Fatal(err)
	}
	s.rec.check(t)
	if with, _ := siteEvents(s.rec, s.cmd.Process.Pid); with != n {
		t.Errorf("%d allocations kept, want %d", with, n)
	}
	if len(s.rec.exits) != 1 || s.rec.exits[0].Status != 128+9 || s.rec.exits[0].Signal != 9 {
		t.Errorf("exits %+v, want status 137, signal 9", s.rec.exits)
	}
}

// TestSetStacks changes the stack kinds of a running process.
func TestSetStacks(t *testing.T) {
	bin := testutil.MustBuild(t, "preload_wait", testutil.Options{})
	const n = 1000
	s := start(t, Config{Stacks: event.NoStacks}, bin, strconv.Itoa(n))
	if s.c.Stacks() != 0 {
		t.Fatalf("Stacks() = %v with NoStacks", s.c.Stacks())
	}
	s.expect(t, "phase 1")
	if err := s.c.SetStacks(event.KindsOf(event.KindAlloc)); err != nil {
		t.Fatal(err)
	}
	fmt.Fprintln(s.stdin)
	s.expect(t, "phase 2")
	if err := s.c.SetStacks(0); err != nil {
		t.Fatal(err)
	}
	fmt.Fprintln(s.stdin)
	s.expect(t, "phase 3")
	s.stdin.Close()
	s.cmd.Wait()
	reportExit(s.c, s.cmd)
	if err := s.c.Close(); err != nil {
		t.Fatal(err)
	}
	s.rec.check(t)
	with, without := siteEvents(s.rec, s.cmd.Process.Pid)
	if with != n || without != 2*n {
		t.Errorf("%d allocations with a stack and %d without, want %d and %d", with, without, n, 2*n)
	}
}

// TestFlush delivers what a running process published, before it ends.
func TestFlush(t *testing.T) {
	bin := testutil.MustBuild(t, "preload_wait", testutil.Options{})
	const n = 5000
	s := start(t, Config{FlushInterval: time.Hour}, bin, strconv.Itoa(n))
	s.expect(t, "phase 1")
	if err := s.c.Flush(); err != nil {
		t.Fatal(err)
	}
	// The sink is called from the collector's goroutine; Flush returned,
	// so it is done with everything published before the call.
	if with, _ := siteEvents(s.rec, s.cmd.Process.Pid); with != n {
		t.Errorf("after Flush the sink has %d allocations, want %d", with, n)
	}
	if st := s.c.Stats(); st.Delivered < n {
		t.Errorf("Stats after Flush: %+v", st)
	}
}

// TestFlushInterval sees a running process's events reach the sink without
// a Flush, once the interval passed. (The deadline is generous: this checks
// that idle threads' events are delivered at all, not how fast.)
func TestFlushInterval(t *testing.T) {
	bin := testutil.MustBuild(t, "preload_wait", testutil.Options{})
	const n = 3000
	s := start(t, Config{FlushInterval: 20 * time.Millisecond}, bin, strconv.Itoa(n))
	s.expect(t, "phase 1")
	deadline := time.Now().Add(10 * time.Second)
	for s.c.Stats().Delivered < n {
		if time.Now().After(deadline) {
			t.Fatalf("after 10s, %d events delivered, want at least %d", s.c.Stats().Delivered, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestClosedSessionScrubsEnv ends the session under a running process: it
// stops tracing and the program it execs inherits none of the preload
// environment.
func TestClosedSessionScrubsEnv(t *testing.T) {
	bin := testutil.MustBuild(t, "preload_wait", testutil.Options{})
	s := start(t, Config{}, bin, "10", "spawn")
	s.expect(t, "phase 1")
	if err := s.c.Close(); err != nil {
		t.Fatal(err)
	}
	s.rec.check(t)
	s.stdin.Close()
	rest, _ := io.ReadAll(s.stdout)
	if err := s.cmd.Wait(); err != nil {
		t.Fatalf("workload: %v", err)
	}
	env := string(rest)
	if !strings.Contains(env, "PATH=") {
		t.Fatalf("env printed nothing useful: %q", env)
	}
	for _, l := range strings.Split(env, "\n") {
		if strings.HasPrefix(l, envPrefix) || (strings.HasPrefix(l, "LD_PRELOAD=") && strings.Contains(l, "heapscope")) {
			t.Errorf("leaked into an untraced program: %s", l)
		}
	}
}

// TestNoCollector runs a program whose environment names a collector that
// is gone: it runs untraced and passes nothing on.
func TestNoCollector(t *testing.T) {
	lib, err := LibraryPath()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("/bin/sh", "-c", "exec /usr/bin/env")
	cmd.Env = append(os.Environ(), "LD_PRELOAD="+lib, envSocket+"="+filepath.Join(t.TempDir(), "gone"), envLib+"="+lib)
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), "PATH=") {
		t.Fatalf("env printed %q", out)
	}
	for _, l := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(l, envPrefix) || strings.HasPrefix(l, "LD_PRELOAD=") {
			t.Errorf("leaked: %s", l)
		}
	}
}

// slowSink delays every batch of events, as a sink that cannot keep up.
type slowSink struct {
	*recorder
	delay time.Duration
}

func (s slowSink) Events(evs []event.Event) error {
	time.Sleep(s.delay)
	return s.recorder.Events(evs)
}

// TestDrop loses events with a tiny buffer and a sink that cannot keep up,
// and counts every one: delivered + lost equals what a blocking run of the
// same (fully deterministic) workload delivers.
func TestDrop(t *testing.T) {
	bin := testutil.MustBuild(t, "preload_sites", testutil.Options{})
	args := []string{"2", "20000"}
	exact := trace(t, Config{}, bin, args...)
	ex := exact.final()
	want := ex.Delivered
	if ex.TotalLost() != 0 {
		t.Fatalf("block mode lost events: %+v", ex)
	}

	rec := newRecorder()
	c := runUnder(t, Config{OnFull: event.Drop, BufferSize: MinBufferSize}, slowSink{rec, 200 * time.Microsecond}, exec.Command(bin, args...))
	rec.check(t)
	st := rec.final()
	if uint64(len(rec.events)) != st.Delivered {
		t.Fatalf("sink got %d events, Stats says %d delivered", len(rec.events), st.Delivered)
	}
	if st.Delivered+st.Lost[event.LostBufferFull] != want || st.TotalLost() != st.Lost[event.LostBufferFull] {
		t.Fatalf("drop mode: %d delivered + %d lost, want %d calls; %+v", st.Delivered, st.Lost[event.LostBufferFull], want, st)
	}
	if st.Lost[event.LostBufferFull] == 0 {
		t.Errorf("nothing lost with a %d-byte buffer and a slow sink: the test checks no loss accounting", MinBufferSize)
	}
	if c.Stats() != st {
		t.Errorf("Stats() %+v, final Stats record %+v", c.Stats(), st)
	}
}

// TestMonotonicClock runs a multi-threaded workload with timestamps from
// CLOCK_MONOTONIC instead of the TSC (the fallback for machines whose TSC
// is not usable).
func TestMonotonicClock(t *testing.T) {
	forceMonotonic = true
	defer func() { forceMonotonic = false }()
	bin := testutil.MustBuild(t, "preload_handoff", testutil.Options{})
	r := trace(t, Config{Stacks: allStacks}, bin, "5000")
	if n := r.bySite(r.pid)[siteKey{"site_consume", event.FuncFree}].calls; n != 5000 {
		t.Errorf("%d frees from site_consume, want 5000", n)
	}
	checkLive(t, r)
}

// TestTimes puts event times between the process's start and its exit, on
// the CLOCK_MONOTONIC scale.
func TestTimes(t *testing.T) {
	bin := testutil.MustBuild(t, "preload_sites", testutil.Options{})
	before := monoNow()
	r := trace(t, Config{}, bin, "2", "1000")
	after := monoNow()
	p := r.procs[0]
	if p.Time < before || p.Time > after {
		t.Errorf("process start %d outside the run [%d, %d]", p.Time, before, after)
	}
	for _, e := range r.events {
		if e.Time < p.Time || e.Time > after {
			t.Fatalf("event at %d outside [%d, %d]", e.Time, p.Time, after)
		}
	}
	if x := r.exits[0]; x.Time < r.events[len(r.events)-1].Time || x.Time > after {
		t.Errorf("exit at %d", x.Time)
	}
}

// TestGDBAllFamilies traces gdb running a program with every family: gdb
// forks the program it debugs, and that child used to die of a SIGSEGV in
// the interposer's munmap while it reset itself after the fork.
func TestGDBAllFamilies(t *testing.T) {
	gdb := testutil.Tool(t, "gdb")
	bin := testutil.MustBuild(t, "preload_fork", testutil.Options{})
	cmd := exec.Command(gdb, "-batch", "-nx", "-ex", "run", "--args", bin, "exec", "50")
	r := traceCmd(t, Config{Families: event.FamilyAll}, cmd)
	if !r.state.Success() {
		t.Fatalf("gdb failed: %v: %s", r.state, r.stdout)
	}
	if strings.Contains(r.stdout, "SIGSEGV") || !strings.Contains(r.stdout, "exited normally") {
		t.Fatalf("the debugged program did not exit normally:\n%s", r.stdout)
	}
	// the debugged program's image was traced: its 50 mallocs of 333
	n := 0
	for _, e := range r.events {
		if e.Func == event.FuncMalloc && e.Size == 333 && r.site(e) == "site_exec" {
			n++
		}
	}
	if n != 50 {
		t.Errorf("%d allocations of the program gdb ran, want 50", n)
	}
}

// TestDeepBind opens a library with RTLD_DEEPBIND, which would bind its
// malloc and free to the C library's before ours: its calls are counted
// and the strdup'd blocks it frees do not show as leaks. That the flag was
// dropped is said once, through the collector (OnWarning, and a Warning
// note in the trace), never on the program's stderr (it was).
func TestDeepBind(t *testing.T) {
	lib := testutil.MustBuild(t, "preload_deeplib", testutil.Options{Flags: []string{"-shared", "-fPIC"}})
	bin := testutil.MustBuild(t, "preload_deepbind", testutil.Options{Flags: []string{"-ldl"}})
	const n = 40
	var stderr strings.Builder
	cmd := exec.Command(bin, lib, strconv.Itoa(n))
	cmd.Stderr = &stderr
	var told []event.Warning
	r := traceCmd(t, Config{OnWarning: func(w event.Warning) { told = append(told, w) }}, cmd)
	if !r.state.Success() {
		t.Fatalf("workload failed: %v: %s", r.state, stderr.String())
	}
	live := map[uint64]bool{}
	mallocs, frees, dups := 0, 0, 0
	for _, e := range r.of(r.pid) {
		switch {
		case e.Kind == event.KindAlloc && e.Size == 7777:
			mallocs++
			live[e.Addr] = true
		case e.Kind == event.KindAlloc && e.Size == 52 && slices.Contains(r.chain(e), "strdup"):
			dups++
			live[e.Addr] = true
		case e.Kind == event.KindFree && live[e.Addr]:
			frees++
			delete(live, e.Addr)
		}
	}
	if mallocs != n || dups != n || frees != 2*n || len(live) != 0 {
		t.Errorf("the deep-bound library: %d mallocs of 7777 and %d strdups (want %d each), %d frees (want %d), %d blocks left live (want 0)",
			mallocs, dups, n, frees, 2*n, len(live))
	}
	if stderr.Len() != 0 {
		t.Errorf("the program's stderr %q: heapscope wrote to it", stderr.String())
	}
	if len(told) != 1 || told[0].Code != WarnDeepbind || told[0].PID != uint32(r.pid) || !strings.Contains(told[0].Text, "RTLD_DEEPBIND") {
		t.Errorf("OnWarning told %+v; want one %s warning for pid %d", told, WarnDeepbind, r.pid)
	}
	if notes := r.warnings(); len(notes) != 1 || notes[0] != told[0] {
		t.Errorf("warnings in the trace %+v; want what OnWarning was told, %+v", notes, told)
	}
}

// waitDescendants waits, as heapscope's run does, until no traced process
// has been live for 50 ms after the launched program exited.
func waitDescendants(t *testing.T, c *Collector) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	quiet := time.Now()
	for time.Since(quiet) < 50*time.Millisecond {
		if time.Now().After(deadline) {
			t.Fatal("traced processes still live after 60s")
		}
		time.Sleep(5 * time.Millisecond)
		if c.Live() > 0 {
			quiet = time.Now()
		}
	}
}

// TestDaemonChild traces a program whose child allocates only 500 ms
// after the program exited: the child is known from its fork, so the
// session lasts until it exits and its allocations are recorded.
func TestDaemonChild(t *testing.T) {
	bin := testutil.MustBuild(t, "preload_daemon", testutil.Options{})
	const k = 20
	rec := newRecorder()
	c, err := New(Config{}, rec)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, strconv.Itoa(k))
	c.Prepare(cmd)
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	reportExit(c, cmd)
	waitDescendants(t, c)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	rec.check(t)
	r := &result{recorder: rec, pid: cmd.Process.Pid}
	n := 0
	for _, e := range r.events {
		if e.Func == event.FuncMalloc && e.Size == 5555 && int(e.PID) != r.pid && r.site(e) == "site_daemon" {
			n++
		}
	}
	if n != k {
		t.Errorf("%d allocations of the daemon child recorded, want %d", n, k)
	}
}

// TestUnwindTables walks an -O2 build without frame pointers with the
// unwind tables: once the collector sent them, every allocation has the
// whole chain main→site_a→site_b. With unwindTablesOnly the frame pointer,
// not libunwind, stands in where no table answers yet, so the complete
// chains are the tables' work; with UnwindTables every chain is complete,
// the first ones through libunwind.
func TestUnwindTables(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir()) // tables built here, not read from the user's cache
	bin := testutil.MustBuild(t, "preload_tables", testutil.Options{NoFramePointers: true, Opt: "2"})
	want := []string{"site_b", "site_a", "main"}
	const n = 300
	for _, u := range []event.Unwind{unwindTablesOnly, event.UnwindTables} {
		var c *Collector
		r := traceWith(t, Config{Unwind: u}, func(col *Collector) { c = col }, bin, strconv.Itoa(n))
		var chains [][]string
		for _, e := range r.of(r.pid) {
			if e.Func == event.FuncMalloc && e.Size == 4097 {
				chains = append(chains, r.chain(e))
			}
		}
		if len(chains) != n {
			t.Fatalf("unwind %v: %d allocations of 4097 bytes, want %d", u, len(chains), n)
		}
		full := 0
		for _, ch := range chains {
			if len(ch) >= 3 && slices.Equal(ch[:3], want) {
				full++
			}
		}
		st := c.TableStats()
		t.Logf("unwind %v: %d of %d chains complete; tables: %+v", u, full, n, st)
		if st.Files == 0 {
			t.Errorf("unwind %v: the collector sent no table", u)
		}
		switch u {
		case unwindTablesOnly:
			// the tables arrive within milliseconds; the calls are 2 ms apart
			if last := chains[n-1]; len(last) < 3 || !slices.Equal(last[:3], want) {
				t.Errorf("tables only: last chain %v, want it to start %v", last, want)
			}
			if full < n/2 {
				t.Errorf("tables only: %d of %d chains complete", full, n)
			}
		default:
			if full != n {
				t.Errorf("tables: %d of %d chains complete", full, n)
			}
		}
	}
}

// TestSetIDExec: a traced program's children exec a set-user-ID copy of
// the workload (owned by another user, so that root's exec changes its
// effective uid), one after a heap call of its own and one at once (it
// connects to say so). The dynamic loader runs it without LD_PRELOAD, so it
// is not traced; the collector says so once for each child image that
// exec'd it, where it said nothing; of an exec that failed, nothing.
func TestSetIDExec(t *testing.T) {
	bin := testutil.MustBuild(t, "preload_setid", testutil.Options{})
	uid, gid := testutil.OtherUser(t)
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	prog := filepath.Join(dir, "setid-prog")
	b, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(prog, b, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(prog, int(uid), int(gid)); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(prog, 0o755|os.ModeSetuid); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "setid-bad") // set-user-ID, not a program: its exec fails
	if err := os.WriteFile(bad, []byte("not a program\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(bad, int(uid), int(gid)); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(bad, 0o755|os.ModeSetuid); err != nil {
		t.Fatal(err)
	}
	var told []event.Warning
	r := traceCmd(t, Config{OnWarning: func(w event.Warning) { told = append(told, w) }}, exec.Command(bin, "exec", prog, bad))
	want := fmt.Sprintf("failed\nruid 0 euid %d\nruid 0 euid %d\nexec done\n", uid, uid)
	if r.stdout != want {
		t.Fatalf("output %q, want %q", r.stdout, want)
	}
	for _, p := range r.procs {
		if p.Exe == prog {
			t.Fatalf("the set-ID program was traced: %+v", p)
		}
	}
	var setid []event.Warning
	for _, w := range told {
		if w.Code == WarnSetID {
			setid = append(setid, w)
		}
	}
	if len(setid) != 2 {
		t.Fatalf("told %+v; want two %s warnings", told, WarnSetID)
	}
	children := map[uint32]bool{} // the images of the program's children
	for _, p := range r.procs {
		if p.PPID == uint32(r.pid) {
			children[p.PID] = true
		}
	}
	byPID := map[uint32]int{}
	for _, w := range setid {
		byPID[w.PID]++
		if !children[w.PID] || byPID[w.PID] > 1 {
			t.Errorf("warning for pid %d: want one for each child image %v", w.PID, children)
		}
		if !strings.Contains(w.Text, prog) || !strings.Contains(w.Text, "not traced") {
			t.Errorf("warning %q does not name %s and say it is not traced", w.Text, prog)
		}
	}
	notes := r.warnings()
	if len(notes) != len(told) {
		t.Errorf("the trace has %d warnings, OnWarning was told %d", len(notes), len(told))
	}
}
