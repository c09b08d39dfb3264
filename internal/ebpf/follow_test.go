package ebpf

import (
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/internal/proc"
	"github.com/heapscope/heapscope/internal/testutil"
)

// forkRun attaches a tracer to ebpf_fork, already running, and runs it to
// its "done": the parent leaks k blocks of 111 bytes, its child k of 222,
// and the program the child execs k of 333; each also allocates and frees
// k blocks of 444. It returns the parent's and the child's pids.
func forkRun(t *testing.T, cfg Config, k int) (*recorder, *Tracer, int, int) {
	bin := testutil.MustBuild(t, "ebpf_fork", testutil.Options{})
	rec := newRecorder(t)
	tr := newTracer(t, cfg, rec)
	if err := tr.FollowsChildren(); err != nil && !cfg.NoFollowFork {
		t.Fatal(err)
	}
	w := startWorkload(t, bin, strconv.Itoa(k))
	if err := tr.Attach(w.pid()); err != nil {
		t.Fatal(err)
	}
	w.release(t)
	line := w.expect(t, "child ")
	child, err := strconv.Atoi(strings.TrimPrefix(line, "child "))
	if err != nil {
		t.Fatal(err)
	}
	w.expect(t, "done")
	if !cfg.NoFollowFork {
		// The child has exited (its parent reaped it): wait for its
		// tracer to notice.
		waitFor(t, func() bool { return len(rec.exitsOf(child)) == 2 })
	}
	mustFlush(t, tr)
	for _, err := range tr.Warnings() {
		t.Errorf("warning: %v", err)
	}
	return rec, tr, w.pid(), child
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatal("timed out")
}

func (r *recorder) exitsOf(pid int) []event.Exit {
	return ofPID(r, &r.exits, pid, func(e *event.Exit) uint32 { return e.PID })
}

// leaks replays the events of one image (pid, and the count of its Process
// records before them) and returns its allocations and its blocks never
// freed, by size.
func (r *recorder) leaks(pid, image int) (allocs, live map[uint64]int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	allocs, live = map[uint64]int{}, map[uint64]int{}
	blocks := map[uint64]uint64{}
	for i, e := range r.events {
		if e.PID != uint32(pid) || r.images[i] != image {
			continue
		}
		switch e.Kind {
		case event.KindAlloc:
			allocs[e.Size]++
			blocks[e.Addr] = e.Size
			if e.Stack == 0 {
				r.t.Errorf("pid %d image %d: an allocation of %d without a stack", pid, image, e.Size)
			}
		case event.KindFree:
			delete(blocks, e.Addr)
		}
	}
	for _, size := range blocks {
		live[size]++
	}
	return allocs, live
}

// TestFollowFork attaches to a process already running that then forks a
// child that execs: the parent, the child and the exec'd program are
// reported as three processes (the child's two images under its pid, the
// first ended by an Exit), the child with its parent, each with exactly its
// allocations and leaks: the child is traced from its first instruction
// after the fork, the new program from its first.
func TestFollowFork(t *testing.T) {
	const k = 300
	rec, _, parent, child := forkRun(t, Config{}, k)
	var procs []event.Process
	for _, p := range rec.processes {
		if p.PID == uint32(parent) || p.PID == uint32(child) {
			procs = append(procs, p)
		}
	}
	if len(procs) != 3 || procs[0].PID != uint32(parent) || procs[1].PID != uint32(child) || procs[2].PID != uint32(child) {
		t.Fatalf("Process records %+v, want the parent %d, then the child %d twice (fork, exec)", procs, parent, child)
	}
	if procs[1].PPID != uint32(parent) || procs[2].PPID != uint32(parent) {
		t.Errorf("child's parent %d and %d, want %d", procs[1].PPID, procs[2].PPID, parent)
	}
	if !slices.Equal(procs[2].Cmdline[1:], []string{"exec", strconv.Itoa(k)}) {
		t.Errorf("exec'd image's command line %q", procs[2].Cmdline)
	}
	if ex := rec.exitsOf(child); len(ex) != 2 || ex[0].Status != -1 {
		t.Errorf("child's exits %+v, want two (the exec'd-over image's with status -1)", ex)
	}

	type want struct {
		pid, image int
		allocs     map[uint64]int
		live       map[uint64]int
	}
	for _, w := range []want{
		{parent, 1, map[uint64]int{111: k, 444: k}, map[uint64]int{111: k}},
		{child, 1, map[uint64]int{222: k, 444: k}, map[uint64]int{222: k}},
		{child, 2, map[uint64]int{333: k, 444: k}, map[uint64]int{333: k}},
	} {
		allocs, live := rec.leaks(w.pid, w.image)
		// The exec'd program's start-up (the loader, stdio) allocates
		// too: only the sizes of the workload's own calls count.
		for size := range allocs {
			if size != 111 && size != 222 && size != 333 && size != 444 {
				delete(allocs, size)
				delete(live, size)
			}
		}
		if fmt.Sprint(allocs) != fmt.Sprint(w.allocs) || fmt.Sprint(live) != fmt.Sprint(w.live) {
			t.Errorf("pid %d image %d: allocations by size %v, leaks %v; want %v and %v", w.pid, w.image, allocs, live, w.allocs, w.live)
		}
	}
	rec.checkModules(t, parent)
}

// TestFollowForkAggregate is TestFollowFork in aggregate mode: each image
// has a final snapshot whose live blocks are its leaks.
func TestFollowForkAggregate(t *testing.T) {
	const k = 300
	rec, _, parent, child := forkRun(t, Config{Mode: event.Aggregate}, k)
	type key struct{ pid, image int }
	got := map[key]map[uint64]int{}
	rec.mu.Lock()
	for i, sn := range rec.snapshots {
		if !sn.Final {
			continue
		}
		k := key{int(sn.PID), rec.snapImage[i]}
		if got[k] != nil {
			t.Errorf("two final snapshots of pid %d image %d", k.pid, k.image)
		}
		m := map[uint64]int{}
		for _, l := range sn.Live {
			if l.Size == 111 || l.Size == 222 || l.Size == 333 || l.Size == 444 {
				m[l.Size]++
			}
		}
		got[k] = m
	}
	rec.mu.Unlock()
	for k2, w := range map[key]map[uint64]int{
		{child, 1}: {222: k},
		{child, 2}: {333: k},
	} {
		if fmt.Sprint(got[k2]) != fmt.Sprint(w) {
			t.Errorf("pid %d image %d: live %v, want %v", k2.pid, k2.image, got[k2], w)
		}
	}
	// The parent still runs: its last snapshot is Flush's.
	var last map[uint64]int
	for _, sn := range rec.snapshotsOf(parent) {
		last = map[uint64]int{}
		for _, l := range sn.Live {
			if l.Size == 111 || l.Size == 444 {
				last[l.Size]++
			}
		}
	}
	if fmt.Sprint(last) != fmt.Sprint(map[uint64]int{111: k}) {
		t.Errorf("parent: live %v, want %v", last, map[uint64]int{111: k})
	}
}

// TestNoFollowFork keeps the behaviour from before children were followed:
// the child is not traced.
func TestNoFollowFork(t *testing.T) {
	rec, _, parent, child := forkRun(t, Config{NoFollowFork: true}, 50)
	for _, p := range rec.processes {
		if p.PID != uint32(parent) {
			t.Errorf("Process record of pid %d, child %d (not followed)", p.PID, child)
		}
	}
	if n := len(rec.eventsOf(child)); n != 0 {
		t.Errorf("%d events of the child, not followed", n)
	}
}

// TestCloseResumesHeld: a process still held when Close returns (its
// follower waits for Close, and the program may exit right after) is
// continued by Close, not left stopped.
func TestCloseResumesHeld(t *testing.T) {
	tr := newTracer(t, Config{}, newRecorder(t))
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	pid := cmd.Process.Pid
	// As the BPF side holds a child at its fork: stopped, and noted.
	if err := unix.Kill(pid, unix.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { st, err := proc.ReadStat(pid); return err == nil && st.State == 'T' })
	tr.heldMu.Lock()
	tr.held[pid] = true
	tr.heldMu.Unlock()
	if err := tr.Close(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { st, err := proc.ReadStat(pid); return err == nil && st.State != 'T' })
}
