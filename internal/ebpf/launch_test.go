package ebpf

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/internal/testutil"
)

// startHeld starts cmd stopped at its exec, as `heapscope run` does: only
// the executable and the dynamic loader are mapped. It calls attach with the
// pid, then lets the child run.
func startHeld(t *testing.T, cmd *exec.Cmd, attach func(pid int) error) {
	t.Helper()
	runtime.LockOSThread() // ptrace requests come from the thread that forked
	defer runtime.UnlockOSThread()
	cmd.SysProcAttr = &syscall.SysProcAttr{Ptrace: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var ws unix.WaitStatus
	for {
		_, err := unix.Wait4(cmd.Process.Pid, &ws, unix.WALL, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		break
	}
	if !ws.Stopped() || ws.StopSignal() != unix.SIGTRAP {
		t.Fatalf("child did not stop at exec: %v", ws)
	}
	if err := attach(cmd.Process.Pid); err != nil {
		cmd.Process.Kill()
		unix.PtraceDetach(cmd.Process.Pid)
		cmd.Wait()
		t.Fatal(err)
	}
	if err := unix.PtraceDetach(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
}

// TestLaunchHeld starts ebpf_ctor held at its exec, before libc is even
// mapped, attaches, and lets it run: the allocations of its constructor,
// which run before main, are all seen, with their call site. Its exit,
// reported by the launcher, ends the tracer's Done.
func TestLaunchHeld(t *testing.T) {
	bin := testutil.MustBuild(t, "ebpf_ctor", testutil.Options{})
	rec := newRecorder(t)
	tr := newTracer(t, Config{}, rec)
	var out bytes.Buffer
	cmd := exec.Command(bin)
	cmd.Stdout = &out
	startHeld(t, cmd, func(pid int) error {
		maps, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
		if err != nil {
			return err
		}
		if bytes.Contains(maps, []byte("libc.so")) {
			return fmt.Errorf("libc already mapped at the exec stop:\n%s", maps)
		}
		return tr.Attach(pid, Launched())
	})
	pid := cmd.Process.Pid
	cmd.Wait()
	if cmd.ProcessState.ExitCode() != 7 {
		t.Fatalf("workload exited with %v", cmd.ProcessState)
	}
	if err := tr.ReportExit(pid, cmd.ProcessState.ExitCode(), 0); err != nil {
		t.Fatal(err)
	}
	<-tr.Done()

	var site uint64
	var calls, size int
	if _, err := fmt.Sscanf(out.String(), "ctor_site %v calls %d size %d", &site, &calls, &size); err != nil {
		t.Fatalf("workload said %q: %v", out.String(), err)
	}
	r := siteRanges(t, bin, map[string]uint64{"ctor_site": site})
	seen := 0
	for _, e := range rec.eventsOf(pid) {
		if e.Kind == event.KindAlloc && e.Size == uint64(size) {
			if fr := rec.frames(pid, e.Stack); len(fr) > 0 && r.in("ctor_site", fr[0]) {
				seen++
			}
		}
	}
	if seen != calls {
		t.Errorf("saw %d of the constructor's %d allocations", seen, calls)
	}
	// libc and the rest were mapped after the attach: Module records
	// for them came when stacks first pointed into them.
	rec.checkModules(t, pid) // exited: every frame counts
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.exits) != 1 || rec.exits[0].PID != uint32(pid) || rec.exits[0].Status != 7 {
		t.Errorf("exits %+v, want pid %d status 7", rec.exits, pid)
	}
}

// TestLaunchedNeverReported: a launched process exits and its launcher
// never reports the status. Detach waits for it; Close gives up on it, ends
// the process with status -1, and lets Detach return.
func TestLaunchedNeverReported(t *testing.T) {
	bin := testutil.MustBuild(t, "ebpf_ctor", testutil.Options{})
	rec := newRecorder(t)
	tr := newTracer(t, Config{}, rec)
	cmd := exec.Command(bin)
	startHeld(t, cmd, func(pid int) error { return tr.Attach(pid, Launched()) })
	cmd.Wait()
	detached := make(chan error, 1)
	go func() { detached <- tr.Detach(cmd.Process.Pid) }()
	closed := make(chan error, 1)
	go func() { closed <- tr.Close() }()
	for _, c := range []chan error{closed, detached} {
		select {
		case <-c:
		case <-time.After(10 * time.Second):
			t.Fatal("Close or Detach hung")
		}
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.exits) != 1 || rec.exits[0].Status != -1 {
		t.Errorf("exits %+v, want one with status -1", rec.exits)
	}
}
