//go:build linux && amd64

package preload

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/heapscope/heapscope/event"
	procfs "github.com/heapscope/heapscope/internal/proc"
	"github.com/heapscope/heapscope/internal/testutil"
)

// TestManyThreads runs waves of short-lived threads: each is traced with
// its exact calls, and threads that ended hand their buffers on.
func TestManyThreads(t *testing.T) {
	bin := testutil.MustBuild(t, "preload_threads", testutil.Options{})
	const waves, per, k = 25, 8, 200
	rec := newRecorder()
	c := runUnder(t, Config{BufferSize: 64 << 10}, rec, exec.Command(bin, fmt.Sprint(waves), fmt.Sprint(per), fmt.Sprint(k)))
	rec.check(t)
	perTID := map[uint32]int{}
	for _, e := range rec.events {
		if e.Func == event.FuncMalloc && e.Size == 40 && rec.funcAt(e.PID, rec.stack(e)[0]) == "site_thread" {
			perTID[e.TID]++
		}
	}
	if len(perTID) != waves*per {
		t.Errorf("site_thread called from %d threads, want %d", len(perTID), waves*per)
	}
	for tid, n := range perTID {
		if n != k {
			t.Errorf("thread %d: %d calls, want %d", tid, n, k)
		}
	}
	if c.ringsMapped >= waves*per/2 {
		t.Errorf("%d rings for %d threads, at most %d at a time: threads that ended did not hand theirs on", c.ringsMapped, waves*per, per+1)
	}
}

// TestCollectorKilled kills the collector's process under a running
// target: the target notices, runs on untraced and finishes.
func TestCollectorKilled(t *testing.T) {
	churn := testutil.MustBuild(t, "churn", testutil.Options{})
	helper := exec.Command(os.Args[0], "-test.run=^$")
	helper.Env = append(os.Environ(), helperEnv+"="+churn+" 3000000 1")
	// the target writes here too; Wait must not close our end
	out, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	helper.Stdout = w
	errs, err := helper.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := helper.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	var pid int
	line, err := bufio.NewReader(errs).ReadString('\n')
	if _, err2 := fmt.Sscanf(line, "pid %d", &pid); err != nil || err2 != nil {
		helper.Process.Kill()
		t.Fatalf("helper said %q: %v %v", line, err, err2)
	}
	helper.Process.Signal(syscall.SIGKILL)
	helper.Wait()
	done := make(chan string, 1)
	go func() {
		b, _ := io.ReadAll(out) // until the target, holding the pipe too, exits
		done <- string(b)
	}()
	select {
	case s := <-done:
		if !strings.Contains(s, "ns_per_pair") {
			t.Errorf("target's output %q", s)
		}
	case <-time.After(60 * time.Second):
		syscall.Kill(pid, syscall.SIGKILL)
		t.Fatal("the target hangs after its collector died")
	}
}

// waitStopped waits until every thread of process pid is in a group stop.
func waitStopped(t *testing.T, pid int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
		if err != nil {
			t.Fatal(err)
		}
		stopped := 0
		for _, e := range ents {
			tid, _ := strconv.Atoi(e.Name())
			if st, err := procfs.ReadStat(tid); err == nil && st.State == 'T' {
				stopped++
			}
		}
		if stopped == len(ents) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pid %d: %d of %d threads stopped 10 s after SIGSTOP", pid, stopped, len(ents))
		}
	}
}

// frozenRun runs preload_wait N under a collector process in block mode
// with the smallest buffer; if freeze, it stops (SIGSTOP) that process
// after the workload's first phase, and resumes it once the workload
// finished its second. It returns what the collector delivered and lost.
func frozenRun(t *testing.T, bin string, n int, freeze bool) (delivered, lost uint64) {
	t.Helper()
	helper := exec.Command(os.Args[0], "-test.run=^$")
	helper.Env = append(os.Environ(), countHelperEnv+"="+bin+" "+strconv.Itoa(n))
	in, err := helper.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := helper.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := helper.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		helper.Process.Signal(syscall.SIGCONT)
		helper.Process.Kill()
		helper.Wait()
	}()
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	next := func(want string) string {
		t.Helper()
		select {
		case l := <-lines:
			if !strings.HasPrefix(l, want) {
				t.Fatalf("helper said %q, want %q", l, want)
			}
			return l
		case <-time.After(60 * time.Second):
			t.Fatalf("no %q in 60s: the workload is blocked", want)
		}
		return ""
	}
	next("phase 1")
	if freeze {
		helper.Process.Signal(syscall.SIGSTOP)
		// A collector thread draining a ring on another CPU goes on
		// until it enters the kernel: under load long enough for the
		// second phase to go through (CI once saw nothing lost).
		waitStopped(t, helper.Process.Pid)
	}
	fmt.Fprintln(in)
	// With the collector stopped the ring fills; the workload must give
	// up waiting and finish its phase.
	next("phase 2")
	in.Close()
	if freeze {
		helper.Process.Signal(syscall.SIGCONT)
	}
	l := next("delivered")
	var sink uint64
	if _, err := fmt.Sscanf(l, "delivered %d lost %d sink %d", &delivered, &lost, &sink); err != nil || sink != delivered {
		t.Fatalf("helper said %q (%v)", l, err)
	}
	return delivered, lost
}

// TestFrozenCollector stops the collector's process under a workload in
// block mode: the workload does not wait for it forever; what it could not
// write is counted lost, so that delivered + lost is what an undisturbed
// run delivers.
func TestFrozenCollector(t *testing.T) {
	bin := testutil.MustBuild(t, "preload_wait", testutil.Options{})
	const n = 20000
	want, lost0 := frozenRun(t, bin, n, false)
	if lost0 != 0 {
		t.Fatalf("an undisturbed run in block mode lost %d events", lost0)
	}
	got, lost := frozenRun(t, bin, n, true)
	if lost == 0 || got+lost != want {
		t.Errorf("frozen collector: %d delivered + %d lost, want %d in all with some lost", got, lost, want)
	}
}

// unmatchedFrees counts the frees of pid's blocks that its stream never
// allocated (nor reallocated into).
func unmatchedFrees(r *result, pid int) int {
	live := map[uint64]bool{}
	n := 0
	for _, e := range r.of(pid) {
		switch e.Kind {
		case event.KindAlloc:
			if e.Addr != 0 {
				live[e.Addr] = true
			}
		case event.KindRealloc:
			if e.OldAddr != 0 {
				delete(live, e.OldAddr)
			}
			if e.Addr != 0 {
				live[e.Addr] = true
			}
		case event.KindFree:
			if !live[e.Addr] {
				n++
			}
			delete(live, e.Addr)
		}
	}
	return n
}

// TestDWARFThreadsNoUnmatchedFrees traces a threaded workload from its
// first instruction with UnwindDWARF: every free is of a block the stream
// saw allocated. The blocks libunwind's thread-local data needs are
// allocated inside the interposer's hook and freed later by the C library;
// they are the interposer's own: never shown, and their frees dropped.
func TestDWARFThreadsNoUnmatchedFrees(t *testing.T) {
	bin := testutil.MustBuild(t, "preload_threads", testutil.Options{})
	for _, u := range []event.Unwind{event.UnwindFP, event.UnwindDWARF} {
		r := trace(t, Config{Unwind: u, Stacks: allStacks}, bin, "10", "8", "50")
		if !r.state.Success() {
			t.Fatalf("%v: workload failed: %v", u, r.state)
		}
		if n := unmatchedFrees(r, r.pid); n != 0 {
			t.Errorf("unwind %v: %d frees of blocks never allocated in a trace from the first instruction", u, n)
		}
	}
}

// keepSink passes to its recorder only the events keep selects: for
// workloads whose other events are too many to keep.
type keepSink struct {
	*recorder
	keep func(event.Event) bool
	buf  []event.Event
}

func (k *keepSink) Events(evs []event.Event) error {
	k.buf = k.buf[:0]
	for _, e := range evs {
		if k.keep(e) {
			k.buf = append(k.buf, e)
		}
	}
	return k.recorder.Events(k.buf)
}

// TestSignalHandlers allocates inside a signal handler that interrupts the
// program's own allocation calls (and so, often, the interposer's hook):
// every call the handler makes is recorded, with its stack. (The main
// loop's events, millions, are counted but not kept.)
func TestSignalHandlers(t *testing.T) {
	bin := testutil.MustBuild(t, "preload_signal", testutil.Options{})
	const n = 500
	for _, u := range []event.Unwind{event.UnwindFP, event.UnwindDWARF} {
		rec := newRecorder()
		c, err := New(Config{Unwind: u, Stacks: allStacks}, &keepSink{recorder: rec, keep: func(e event.Event) bool { return e.Size != 24 }})
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(bin, strconv.Itoa(n))
		c.Prepare(cmd)
		out, err := cmd.Output()
		reportExit(c, cmd)
		if cerr := c.Close(); cerr != nil {
			t.Fatal(cerr)
		}
		if err != nil || strings.TrimSpace(string(out)) != fmt.Sprintf("handled %d", n) {
			t.Fatalf("%v: workload failed: %v: %q", u, err, out)
		}
		rec.check(t)
		r := &result{recorder: rec, pid: cmd.Process.Pid}
		live := map[uint64]bool{}
		allocs, frees, sited := 0, 0, 0
		for _, e := range r.of(r.pid) {
			switch {
			case e.Kind == event.KindAlloc && e.Size == 4321:
				allocs++
				live[e.Addr] = true
				if slices.Contains(r.chain(e), "site_handler") {
					sited++
				}
			case e.Kind == event.KindFree && live[e.Addr]:
				frees++
				delete(live, e.Addr)
			}
		}
		st := r.final()
		if allocs != n || frees != n || st.TotalLost() != 0 {
			t.Errorf("unwind %v: %d allocations and %d frees in the handler recorded, %d lost; want %d, %d, 0",
				u, allocs, frees, st.TotalLost(), n, n)
		}
		if sited != allocs {
			t.Errorf("unwind %v: %d of %d handler allocations have site_handler in their stack", u, sited, allocs)
		}
	}
}
