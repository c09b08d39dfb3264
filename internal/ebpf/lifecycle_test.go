package ebpf

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/internal/errs"
	"github.com/heapscope/heapscope/internal/testutil"
)

// countCalls reads ebpf_count's "calls C" line.
func countCalls(t testing.TB, w *workload) uint64 {
	t.Helper()
	line := w.expect(t, "calls ")
	n, err := strconv.ParseUint(strings.TrimPrefix(line, "calls "), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestTinyRing runs two threads of malloc+free pairs against a one-page
// ring buffer that the consumer rarely drains (a long flush interval):
// events are lost, and every call is either delivered or counted lost,
// exactly.
func TestTinyRing(t *testing.T) {
	bin := testutil.MustBuild(t, "ebpf_count", testutil.Options{})
	rec := &countSink{Sink: event.Discard}
	tr := newTracer(t, Config{RingSize: 4096, FlushInterval: time.Hour}, rec)
	w := traced(t, tr, bin, "50000", "2")
	calls := countCalls(t, w)
	mustFlush(t, tr)
	st := tr.Stats()
	t.Logf("calls %d: delivered %d, lost %v", calls, st.Delivered, st.Lost)
	if st.Delivered+st.TotalLost() != calls {
		t.Errorf("delivered %d + lost %d = %d, want the %d calls made",
			st.Delivered, st.TotalLost(), st.Delivered+st.TotalLost(), calls)
	}
	if st.Lost[event.LostRingFull] == 0 {
		t.Errorf("a one-page ring lost nothing: the test did not test losses")
	}
	if rec.events != st.Delivered {
		t.Errorf("sink got %d events, Stats says %d delivered", rec.events, st.Delivered)
	}
}

type countSink struct {
	event.Sink
	events uint64
}

func (c *countSink) Events(evs []event.Event) error { c.events += uint64(len(evs)); return nil }

// TestStacksLost gives the stack map room for two stacks: the other
// stacks' events arrive without one, and each is counted in StacksLost.
func TestStacksLost(t *testing.T) {
	bin := testutil.MustBuild(t, "ebpf_calls", testutil.Options{})
	rec := newRecorder(t)
	tr := newTracer(t, Config{Stacks: allStacks, StackMapSize: 2, MaxStacks: 1}, rec)
	w := traced(t, tr, bin, "3")
	w.lines(t, "done")
	mustFlush(t, tr)
	var without uint64
	for _, e := range rec.eventsOf(w.pid()) {
		if e.Stack == 0 {
			without++
		}
	}
	st := tr.Stats()
	if without == 0 || st.StacksLost != without {
		t.Errorf("%d events without a stack, StacksLost %d", without, st.StacksLost)
	}
}

// TestManyProcesses traces two processes, attaches a third while tracing,
// then detaches the first: each one's calls are all seen, each has its
// Process and Exit records, and nothing is seen of the first after it was
// detached (its exit frees its threads' caches: calls).
func TestManyProcesses(t *testing.T) {
	bin := testutil.MustBuild(t, "ebpf_count", testutil.Options{})
	rec := newRecorder(t)
	tr := newTracer(t, Config{}, rec)
	a := startWorkload(t, bin, "1000", "2")
	b := startWorkload(t, bin, "2000", "1")
	attachAll(t, tr, a, b)
	if err := tr.Attach(a.pid()); err != nil {
		t.Errorf("attaching again: %v", err)
	}
	a.release(t)
	b.release(t)
	callsA, callsB := countCalls(t, a), countCalls(t, b)

	c := startWorkload(t, bin, "3000", "3")
	if err := tr.Attach(c.pid()); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(tr.PIDs()); got != fmt.Sprint(sortedInts(a.pid(), b.pid(), c.pid())) {
		t.Errorf("PIDs() = %s", got)
	}
	c.release(t)
	callsC := countCalls(t, c)
	mustFlush(t, tr)
	for _, x := range []struct {
		w     *workload
		calls uint64
	}{{a, callsA}, {b, callsB}, {c, callsC}} {
		if n := uint64(len(rec.eventsOf(x.w.pid()))); n != x.calls {
			t.Errorf("pid %d: %d events, %d calls", x.w.pid(), n, x.calls)
		}
	}

	if err := tr.Detach(a.pid()); err != nil {
		t.Fatal(err)
	}
	if err := tr.Detach(a.pid()); !errors.Is(err, errs.ErrNoSuchProcess) {
		t.Errorf("detaching twice: %v", err)
	}
	a.release(t) // its threads exit: calls not traced any more
	a.wait(t)
	mustFlush(t, tr)
	if n := uint64(len(rec.eventsOf(a.pid()))); n != callsA {
		t.Errorf("pid %d: %d events after detach, %d calls while attached", a.pid(), n, callsA)
	}
	rec.mu.Lock()
	exits := append([]event.Exit(nil), rec.exits...)
	procs := len(rec.processes)
	rec.mu.Unlock()
	if procs != 3 {
		t.Errorf("%d Process records, want 3", procs)
	}
	if len(exits) != 1 || exits[0].PID != uint32(a.pid()) || exits[0].Status != -1 {
		t.Errorf("exits %+v, want pid %d detached (status -1)", exits, a.pid())
	}
	select {
	case <-tr.Done():
		t.Errorf("Done closed with processes still traced")
	default:
	}
}

func sortedInts(xs ...int) []int {
	for i := range xs {
		for j := i + 1; j < len(xs); j++ {
			if xs[j] < xs[i] {
				xs[i], xs[j] = xs[j], xs[i]
			}
		}
	}
	return xs
}

// TestKilled kills a traced process in the middle of its calls: the tracer
// notices, delivers what it captured, sends its Exit with the signal
// (it is the test's child, not yet reaped), and closes Done.
func TestKilled(t *testing.T) {
	bin := testutil.MustBuild(t, "ebpf_count", testutil.Options{})
	rec := newRecorder(t)
	tr := newTracer(t, Config{FlushInterval: 50 * time.Millisecond}, rec)
	w := traced(t, tr, bin, "100000000", "2")
	// Wait until calls are flowing, then kill it mid-loop.
	for deadline := time.Now().Add(10 * time.Second); len(rec.eventsOf(w.pid())) == 0; {
		if time.Now().After(deadline) {
			t.Fatal("no events in 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := w.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case <-tr.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("Done not closed 10s after the only traced process was killed")
	}
	rec.mu.Lock()
	exits := append([]event.Exit(nil), rec.exits...)
	rec.mu.Unlock()
	if len(exits) != 1 || exits[0].Status != 128+9 || exits[0].Signal != 9 {
		t.Errorf("exits %+v, want one, killed by signal 9", exits)
	}
	if len(tr.PIDs()) != 0 {
		t.Errorf("PIDs() = %v after exit", tr.PIDs())
	}
	st := tr.Stats()
	if n := uint64(len(rec.eventsOf(w.pid()))); n != st.Delivered || n == 0 {
		t.Errorf("%d events recorded, %d delivered", n, st.Delivered)
	}
	if err := tr.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestSetStacks changes the stack kinds while tracing.
func TestSetStacks(t *testing.T) {
	bin := testutil.MustBuild(t, "ebpf_calls", testutil.Options{})
	rec := newRecorder(t)
	tr := newTracer(t, Config{Stacks: event.NoStacks}, rec)
	a := startWorkload(t, bin, "2")
	b := startWorkload(t, bin, "2")
	attachAll(t, tr, a, b)
	a.release(t)
	a.lines(t, "done")
	if err := tr.SetStacks(event.KindsOf(event.KindFree)); err != nil {
		t.Fatal(err)
	}
	b.release(t)
	b.lines(t, "done")
	mustFlush(t, tr)
	for _, e := range rec.eventsOf(a.pid()) {
		if e.Stack != 0 {
			t.Fatalf("a stack with stacks off: %+v", e)
		}
	}
	for _, e := range rec.eventsOf(b.pid()) {
		if (e.Stack != 0) != (e.Kind == event.KindFree) {
			t.Fatalf("stacks on frees only, got %+v", e)
		}
	}
	if err := tr.SetStacks(event.KindSet(0x80)); !errors.Is(err, errs.ErrInvalidFlags) {
		t.Errorf("SetStacks(bad) = %v", err)
	}
}

func TestAttachErrors(t *testing.T) {
	tr := newTracer(t, Config{}, event.Discard)
	// A pid that does not exist: past the kernel's pid_max.
	if err := tr.Attach(1 << 30); !errors.Is(err, errs.ErrNoSuchProcess) || !strings.Contains(err.Error(), strconv.Itoa(1<<30)) {
		t.Errorf("Attach(no such pid) = %v", err)
	}
	// A thread that is not a process's main thread.
	bin := testutil.MustBuild(t, "ebpf_count", testutil.Options{})
	threads := startWorkload(t, bin, "1", "2")
	tids, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", threads.pid()))
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range tids {
		if tid, _ := strconv.Atoi(d.Name()); tid != threads.pid() {
			if err := tr.Attach(tid); !errors.Is(err, errs.ErrNoSuchProcess) {
				t.Errorf("Attach(thread %d) = %v", tid, err)
			}
			break
		}
	}
	// A zombie: exited, not reaped.
	w := startWorkload(t, bin, "1", "1")
	w.stdin.Close() // both waits end, it exits
	for i := 0; i < 500; i++ {
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", w.pid())); err == nil && strings.Contains(string(b), ") Z ") {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := tr.Attach(w.pid()); !errors.Is(err, errs.ErrNoSuchProcess) {
		t.Errorf("Attach(zombie) = %v", err)
	}
	if err := tr.Detach(12345678); !errors.Is(err, errs.ErrNoSuchProcess) {
		t.Errorf("Detach(not traced) = %v", err)
	}
	if err := tr.ReportExit(12345678, 0, 0); !errors.Is(err, errs.ErrNoSuchProcess) {
		t.Errorf("ReportExit(not traced) = %v", err)
	}
	tr.Close()
	if err := tr.Attach(os.Getpid()); !errors.Is(err, errs.ErrNotRunning) {
		t.Errorf("Attach after Close = %v", err)
	}
	if err := tr.Flush(); !errors.Is(err, errs.ErrNotRunning) {
		t.Errorf("Flush after Close = %v", err)
	}
	if err := tr.SetStacks(event.NoStacks); !errors.Is(err, errs.ErrNotRunning) {
		t.Errorf("SetStacks after Close = %v", err)
	}
	if err := tr.Close(); err != nil {
		t.Errorf("Close twice = %v", err)
	}
}

func TestConfigErrors(t *testing.T) {
	for _, c := range []Config{
		{Mode: 7},
		{Families: 1 << 20},
		{Mode: event.Aggregate, Families: event.FamilyMmap},
		{RingSize: -1},
		{RingSize: 2 << 30},
		{Stacks: 0x80},
		{StackMapSize: 1 << 32},
	} {
		if _, err := New(c, event.Discard); !errors.Is(err, errs.ErrInvalidFlags) {
			t.Errorf("New(%+v) = %v, want ErrInvalidFlags", c, err)
		}
	}
	if _, err := New(Config{}, nil); !errors.Is(err, errs.ErrInvalidFlags) {
		t.Errorf("New(nil sink) = %v", err)
	}
}

// TestOutOfMemory asks for maps the kernel cannot give: a live-block map of
// 2^30 entries (a hash map's buckets alone would be 16 GiB; the kernel
// refuses such sizes before allocating anything).
func TestOutOfMemory(t *testing.T) {
	testutil.SkipWithoutEBPF(t, Available())
	tr, err := New(Config{Mode: event.Aggregate, MaxLive: 1 << 30}, event.Discard)
	if err == nil {
		tr.Close()
	}
	if !errors.Is(err, errs.ErrOutOfMemory) {
		t.Errorf("New(2^30 live blocks) = %v, want ErrOutOfMemory", err)
	}
}

// TestDetachClearsThreads checks that Detach deletes the per-thread BPF
// state of the process's threads, which otherwise outlives the probes.
func TestDetachClearsThreads(t *testing.T) {
	bin := testutil.MustBuild(t, "ebpf_count", testutil.Options{})
	tr := newTracer(t, Config{}, event.Discard)
	w := traced(t, tr, bin, "100", "2")
	countCalls(t, w) // the workers are alive, parked
	states := func() int {
		n := 0
		tids, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", w.pid()))
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range tids {
			tid, _ := strconv.Atoi(d.Name())
			fd, err := unix.PidfdOpen(tid, unix.PIDFD_THREAD)
			if err != nil {
				t.Fatal(err)
			}
			var th heapscopeThread
			if tr.coll.Maps["threads"].Lookup(int32(fd), &th) == nil {
				n++
			}
			unix.Close(fd)
		}
		return n
	}
	if n := states(); n < 2 {
		t.Fatalf("%d threads with state after their calls, want the 2 workers", n)
	}
	if err := tr.Detach(w.pid()); err != nil {
		t.Fatal(err)
	}
	if n := states(); n != 0 {
		t.Errorf("%d threads with state after Detach", n)
	}
}

// TestClassicThreads checks that classic uprobes (the fallback where
// uprobe_multi links are missing), attached with a PID, see every thread of
// the process, not only the one with that id.
func TestClassicThreads(t *testing.T) {
	bin := testutil.MustBuild(t, "ebpf_count", testutil.Options{})
	rec := newRecorder(t)
	tr := newTracer(t, Config{noMulti: true}, rec)
	w := traced(t, tr, bin, "2000", "3")
	calls := countCalls(t, w)
	mustFlush(t, tr)
	tids := map[uint32]bool{}
	evs := rec.eventsOf(w.pid())
	for _, e := range evs {
		tids[e.TID] = true
	}
	if uint64(len(evs)) != calls || len(tids) != 3 {
		t.Errorf("%d events from %d threads, want %d from 3", len(evs), len(tids), calls)
	}
}
