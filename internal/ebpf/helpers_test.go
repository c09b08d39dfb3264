package ebpf

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"

	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/internal/proc"
	"github.com/heapscope/heapscope/internal/testutil"
)

func TestMain(m *testing.M) { testutil.Main(m) }

// recorder is a Sink that keeps everything, and checks the ordering rules
// of event.Sink as records arrive.
type recorder struct {
	mu        sync.Mutex
	t         testing.TB
	processes []event.Process
	exits     []event.Exit
	modules   []event.Module
	stacks    map[uint32]map[event.StackID][]uint64
	events    []event.Event
	images    []int // for each event, how many Process records of its pid came before it
	snapshots []event.Snapshot
	snapImage []int // the same for each snapshot
	stats     []event.Stats
	notes     []event.Note
	calls     int // Sink calls in flight, to catch concurrent use
	// uncovered are frames of stacks that lay in no Module sent before
	// the stack.
	uncovered []uint64
}

func newRecorder(t testing.TB) *recorder {
	return &recorder{t: t, stacks: map[uint32]map[event.StackID][]uint64{}}
}

func (r *recorder) enter() func() {
	r.mu.Lock()
	r.calls++
	if r.calls > 1 {
		r.t.Errorf("sink called concurrently")
	}
	r.mu.Unlock()
	return func() {
		r.mu.Lock()
		r.calls--
		r.mu.Unlock()
	}
}

// keep appends v to *list as one Sink call, under r.mu.
func keep[T any](r *recorder, list *[]T, v T) error {
	defer r.enter()()
	r.mu.Lock()
	defer r.mu.Unlock()
	*list = append(*list, v)
	return nil
}

func (r *recorder) Process(p event.Process) error { return keep(r, &r.processes, p) }
func (r *recorder) Exit(e event.Exit) error       { return keep(r, &r.exits, e) }
func (r *recorder) Module(m event.Module) error   { return keep(r, &r.modules, m) }
func (r *recorder) Stats(s event.Stats) error     { return keep(r, &r.stats, s) }
func (r *recorder) Note(n event.Note) error       { return keep(r, &r.notes, n) }

func (r *recorder) Stack(s event.Stack) error {
	defer r.enter()()
	r.mu.Lock()
	defer r.mu.Unlock()
	if s.ID == 0 {
		r.t.Errorf("stack with id 0")
	}
	m := r.stacks[s.PID]
	if m == nil {
		m = map[event.StackID][]uint64{}
		r.stacks[s.PID] = m
	}
	if _, dup := m[s.ID]; dup {
		r.t.Errorf("stack %d of pid %d sent twice", s.ID, s.PID)
	}
	m[s.ID] = append([]uint64(nil), s.Frames...)
	for _, f := range s.Frames {
		in := false
		for _, mod := range r.modules {
			in = in || mod.PID == s.PID && f > mod.Start && f <= mod.End
		}
		if !in {
			r.uncovered = append(r.uncovered, f)
		}
	}
	return nil
}

func (r *recorder) Events(evs []event.Event) error {
	defer r.enter()()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range evs {
		if e.Stack != 0 && r.stacks[e.PID][e.Stack] == nil {
			r.t.Errorf("event refers to stack %d of pid %d before it was sent", e.Stack, e.PID)
		}
		image := r.image(e.PID)
		if image == 0 {
			r.t.Errorf("event of pid %d before its Process", e.PID)
		}
		r.images = append(r.images, image)
	}
	r.events = append(r.events, evs...)
	return nil
}

func (r *recorder) Snapshot(s event.Snapshot) error {
	defer r.enter()()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, l := range s.Live {
		if l.Stack != 0 && r.stacks[s.PID][l.Stack] == nil {
			r.t.Errorf("snapshot refers to stack %d before it was sent", l.Stack)
		}
	}
	r.snapshots = append(r.snapshots, s)
	r.snapImage = append(r.snapImage, r.image(s.PID))
	return nil
}

// image returns how many Process records of pid have come. Called with mu
// held.
func (r *recorder) image(pid uint32) int {
	n := 0
	for _, p := range r.processes {
		if p.PID == pid {
			n++
		}
	}
	return n
}

// checkModules fails the test if a stack had a frame in no Module sent
// before it. When pid is still alive, only frames in its executable file
// mappings count: the last frame of a frame-pointer walk through code built
// without frame pointers (a static libc's start-up) can be any number.
func (r *recorder) checkModules(t testing.TB, pid int) {
	t.Helper()
	maps, _ := proc.ReadMaps(pid)
	r.mu.Lock()
	defer r.mu.Unlock()
	var bad []uint64
	for _, f := range r.uncovered {
		mapped := len(maps) == 0
		for _, m := range maps {
			mapped = mapped || m.Exec() && m.File() && f > m.Start && f <= m.End
		}
		if mapped {
			bad = append(bad, f)
		}
	}
	if len(bad) > 0 {
		t.Errorf("%d frames in no module sent before their stack: %x", len(bad), bad)
	}
}

// eventsOf returns a copy of the events of pid.
func (r *recorder) eventsOf(pid int) []event.Event {
	return ofPID(r, &r.events, pid, func(e *event.Event) uint32 { return e.PID })
}

// ofPID returns a copy of the records of pid in *list, read under r's lock.
func ofPID[T any](r *recorder, list *[]T, pid int, pidOf func(*T) uint32) []T {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []T
	for i := range *list {
		if pidOf(&(*list)[i]) == uint32(pid) {
			out = append(out, (*list)[i])
		}
	}
	return out
}

func (r *recorder) frames(pid int, id event.StackID) []uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stacks[uint32(pid)][id]
}

// workload is a running test program that talks over stdin and stdout.
type workload struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Scanner
}

func startWorkload(t testing.TB, bin string, args ...string) *workload {
	t.Helper()
	w := startWorkloadNoReady(t, bin, args...)
	w.expect(t, "ready")
	return w
}

// startWorkloadNoReady starts a workload that prints no "ready" line.
func startWorkloadNoReady(t testing.TB, bin string, args ...string) *workload {
	t.Helper()
	return spawnWorkload(t, nil, bin, args...)
}

// spawnWorkload starts bin, with env added to the environment, its stdin
// and stdout piped to the test; it is killed when the test ends.
func spawnWorkload(t testing.TB, env []string, bin string, args ...string) *workload {
	t.Helper()
	cmd := exec.Command(bin, args...)
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	return startCmd(t, cmd)
}

// startCmd starts cmd as a workload, its stdin and stdout piped to the
// test; it is killed when the test ends.
func startCmd(t testing.TB, cmd *exec.Cmd) *workload {
	t.Helper()
	stdin, stdout := testutil.StartPiped(t, cmd)
	w := &workload{cmd: cmd, stdin: stdin, out: bufio.NewScanner(stdout)}
	w.out.Buffer(make([]byte, 1<<16), 1<<20)
	return w
}

func (w *workload) pid() int { return w.cmd.Process.Pid }

// expect reads lines until one starts with prefix, and returns it.
func (w *workload) expect(t testing.TB, prefix string) string {
	t.Helper()
	for w.out.Scan() {
		if strings.HasPrefix(w.out.Text(), prefix) {
			return w.out.Text()
		}
	}
	t.Fatalf("workload ended before %q: %v", prefix, w.out.Err())
	return ""
}

// lines reads lines until one equal to end, returning those before it.
func (w *workload) lines(t testing.TB, end string) []string {
	t.Helper()
	var ls []string
	for w.out.Scan() {
		if w.out.Text() == end {
			return ls
		}
		ls = append(ls, w.out.Text())
	}
	t.Fatalf("workload ended before %q: %v", end, w.out.Err())
	return nil
}

func (w *workload) release(t testing.TB) {
	t.Helper()
	if _, err := fmt.Fprintln(w.stdin, "go"); err != nil {
		t.Fatal(err)
	}
}

func (w *workload) wait(t testing.TB) {
	t.Helper()
	if err := w.cmd.Wait(); err != nil {
		t.Fatalf("workload: %v", err)
	}
}

// newTracer makes a tracer for a test, or skips it where eBPF is not
// available (fails when testutil.RequireEBPFEnv is set).
func newTracer(t testing.TB, cfg Config, sink event.Sink) *Tracer {
	t.Helper()
	testutil.SkipWithoutEBPF(t, Available())
	tr, err := New(cfg, sink)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	return tr
}

// traced starts bin held at its first wait, attaches tr to it and releases
// it.
func traced(t testing.TB, tr *Tracer, bin string, args ...string) *workload {
	t.Helper()
	w := startWorkload(t, bin, args...)
	if err := tr.Attach(w.pid()); err != nil {
		t.Fatal(err)
	}
	w.release(t)
	return w
}

// attachAll attaches tr to each of ws, still held.
func attachAll(t testing.TB, tr *Tracer, ws ...*workload) {
	t.Helper()
	for _, w := range ws {
		if err := tr.Attach(w.pid()); err != nil {
			t.Fatal(err)
		}
	}
}

// mustFlush flushes tr, failing the test if it cannot.
func mustFlush(t testing.TB, tr *Tracer) {
	t.Helper()
	if err := tr.Flush(); err != nil {
		t.Fatal(err)
	}
}
