package stopped

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/heapscope/heapscope/internal/errs"
	"github.com/heapscope/heapscope/internal/proc"
	"github.com/heapscope/heapscope/internal/testutil"
)

// helperEnv makes the test binary a helper process: "stop:PID" stops PID
// and holds the stop until it is killed; "trace:TID" seizes thread TID (as
// another debugger would) and holds it.
const helperEnv = "HEAPSCOPE_STOPPED_HELPER"

func TestMain(m *testing.M) {
	if h := os.Getenv(helperEnv); h != "" {
		os.Exit(helper(h))
	}
	testutil.Main(m)
}

func helper(h string) int {
	mode, arg, _ := strings.Cut(h, ":")
	id, err := strconv.Atoi(arg)
	if err != nil {
		fmt.Println("bad helper argument", h)
		return 2
	}
	switch mode {
	case "stop":
		p, err := Stop(id, Options{MaxPause: -1})
		if err != nil {
			fmt.Println("error", err)
			return 1
		}
		fmt.Println("stopped", len(p.Threads()))
	case "watch":
		if _, err := Seize(id, WatchOptions{}); err != nil {
			fmt.Println("error", err)
			return 1
		}
		fmt.Println("watching")
	case "trace":
		runtime.LockOSThread()
		if err := unix.PtraceSeize(id); err != nil {
			fmt.Println("error", err)
			return 1
		}
		fmt.Println("traced")
	default:
		return 2
	}
	select {} // hold it until killed
}

// target is a running scan_threads.
type target struct {
	testutil.ThreadsProgram
	t        testing.TB
	cmd      *exec.Cmd
	pid      int
	counters uint64 // address of its counters
	noaccess uint64 // a PROT_NONE page
	hole     uint64 // an unmapped page
}

func startTarget(t testing.TB, nthreads int) *target {
	t.Helper()
	bin := testutil.MustBuild(t, "scan_threads", testutil.Options{})
	cmd := exec.Command(bin, strconv.Itoa(nthreads))
	cmd.Stderr = os.Stderr
	in, out := testutil.StartPiped(t, cmd)
	tg := &target{ThreadsProgram: testutil.ThreadsProgram{TB: t, In: in, Out: bufio.NewReader(out), NThreads: nthreads}, t: t, cmd: cmd}
	line := tg.Line()
	var page int
	if _, err := fmt.Sscanf(line, "ready %d counters=0x%x noaccess=0x%x hole=0x%x page=%d",
		&tg.pid, &tg.counters, &tg.noaccess, &tg.hole, &page); err != nil {
		t.Fatalf("scan_threads said %q: %v", line, err)
	}
	tg.waitThreads(nthreads + 1)
	return tg
}

func (tg *target) send(cmd string) {
	tg.t.Helper()
	if _, err := io.WriteString(tg.In, cmd+"\n"); err != nil {
		tg.t.Fatal(err)
	}
}

func (tg *target) waitThreads(n int) {
	tg.t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		tids, err := listTasks(tg.pid)
		if err == nil && len(tids) == n {
			return
		}
		if time.Now().After(deadline) {
			tg.t.Fatalf("scan_threads has %d threads, want %d", len(tids), n)
		}
	}
}

// quit ends the target and checks it ended well.
func (tg *target) quit() {
	tg.t.Helper()
	tg.send("q")
	if l := tg.Line(); l != "done" {
		tg.t.Fatalf("scan_threads ended with %q", l)
	}
	if err := tg.cmd.Wait(); err != nil {
		tg.t.Fatalf("scan_threads: %v", err)
	}
}

// threadStates returns each thread's state letter and tracer.
func threadStates(t testing.TB, pid int) map[int]status {
	t.Helper()
	tids, err := listTasks(pid)
	if err != nil {
		t.Fatal(err)
	}
	m := map[int]status{}
	for _, tid := range tids {
		b, err := os.ReadFile(taskPath(pid, tid, "status"))
		if err != nil {
			continue
		}
		st := parseStatus(b)
		if s, err := taskState(pid, tid); err == nil {
			st.state = s // stat's letter tells 't' (traced) from 'T'
		}
		m[tid] = st
	}
	return m
}

// checkRunning fails the test when a thread of pid is traced or stopped,
// and checks /proc/PID/status too.
func checkRunning(t testing.TB, pid int) {
	t.Helper()
	for tid, st := range threadStates(t, pid) {
		if st.state == 't' || st.state == 'T' || st.tracer != 0 {
			t.Errorf("thread %d left in state %c, traced by %d", tid, st.state, st.tracer)
		}
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	if st := parseStatus(b); st.state == 't' || st.state == 'T' || st.tracer != 0 {
		t.Errorf("/proc/%d/status: state %c, TracerPid %d", pid, st.state, st.tracer)
	}
}

func checkAllStopped(t *testing.T, pid, want int) {
	t.Helper()
	sts := threadStates(t, pid)
	if len(sts) != want {
		t.Errorf("%d threads, want %d", len(sts), want)
	}
	for tid, st := range sts {
		if st.state != 't' {
			t.Errorf("thread %d in state %c during the stop, want t", tid, st.state)
		}
	}
}

func (tg *target) readCounters(t *testing.T, p *Process) []int64 {
	t.Helper()
	b := make([]byte, 8*tg.NThreads)
	if n, err := p.ReadAt(b, int64(tg.counters)); err != nil || n != len(b) {
		t.Fatalf("ReadAt counters: %d, %v", n, err)
	}
	c := make([]int64, tg.NThreads)
	for i := range c {
		c[i] = int64(binary.LittleEndian.Uint64(b[8*i:]))
	}
	return c
}

// TestStopResume stops, reads and resumes an 8-thread process 20 times in a
// row: every thread is stopped during each stop, none is stopped or traced
// after it, each runs again, and the process ends as it would have.
func TestStopResume(t *testing.T) {
	tg := startTarget(t, 8)
	var pauses []time.Duration
	for i := 0; i < 20; i++ {
		before := tg.Counts()
		p, err := Stop(tg.pid, Options{})
		if err != nil {
			t.Fatalf("stop %d: %v", i, err)
		}
		if n := len(p.Threads()); n != 9 {
			t.Errorf("stop %d: %d threads, want 9", i, n)
		}
		checkAllStopped(t, tg.pid, 9)
		c1 := tg.readCounters(t, p)
		time.Sleep(time.Millisecond)
		c2 := tg.readCounters(t, p)
		if !slices.Equal(c1, c2) {
			t.Errorf("stop %d: counters moved while stopped: %v then %v", i, c1, c2)
		}
		for k := range c1 {
			if c1[k] < before[k] {
				t.Errorf("stop %d: counter %d read %d, below %d printed before", i, k, c1[k], before[k])
			}
		}
		for _, th := range p.Threads() {
			if m := p.mapping(th.SP()); m == nil || m.Perms[:2] != "rw" {
				t.Errorf("stop %d: thread %d's stack pointer %#x is in no writable mapping", i, th.TID, th.SP())
			}
			if th.FSBase() == 0 {
				t.Errorf("stop %d: thread %d has no fs base", i, th.TID)
			}
		}
		if err := p.Resume(); err != nil {
			t.Fatal(err)
		}
		if err := p.Resume(); err != nil {
			t.Errorf("second Resume: %v", err)
		}
		pauses = append(pauses, p.Paused())
		checkRunning(t, tg.pid)
		if _, err := p.ReadAt(make([]byte, 8), int64(tg.counters)); !errors.Is(err, ErrResumed) {
			t.Errorf("ReadAt after Resume: %v, want ErrResumed", err)
		}
		tg.Progressing(c1)
	}
	tg.quit()
	slices.Sort(pauses)
	t.Logf("pause of a 9-thread process (8 allocating), 20 stops: min %v, median %v, max %v",
		pauses[0], pauses[len(pauses)/2], pauses[len(pauses)-1])
}

// TestTracerKilled kills a helper process that holds a stop, by each signal
// whose default ends it: the kernel must let every thread run again.
func TestTracerKilled(t *testing.T) {
	for _, sig := range []unix.Signal{unix.SIGKILL, unix.SIGTERM, unix.SIGINT} {
		t.Run(unix.SignalName(sig), func(t *testing.T) {
			tg := startTarget(t, 8)
			before := tg.Counts()
			h := exec.Command(os.Args[0], "-test.run=^$")
			h.Env = append(os.Environ(), helperEnv+"=stop:"+strconv.Itoa(tg.pid))
			h.Stderr = os.Stderr
			_, hout := testutil.StartPiped(t, h)
			l, _ := bufio.NewReader(hout).ReadString('\n')
			if !strings.HasPrefix(l, "stopped 9") {
				t.Fatalf("helper said %q", l)
			}
			checkAllStopped(t, tg.pid, 9)
			h.Process.Signal(sig)
			err := h.Wait()
			if ee, ok := err.(*exec.ExitError); !ok || ee.ProcessState.Sys().(syscall.WaitStatus).Signal() != sig {
				t.Fatalf("helper ended with %v, want killed by %v", err, sig)
			}
			// The helper is reaped: every thread of it has exited, and
			// with them the tracer.
			checkRunning(t, tg.pid)
			tg.Progressing(before)
			tg.quit()
		})
	}
}

// TestAlreadyTraced: a thread that another tracer holds fails the stop with
// a clear error naming that tracer, and the other threads run on.
func TestAlreadyTraced(t *testing.T) {
	tg := startTarget(t, 8)
	tids, _ := listTasks(tg.pid)
	victim := tids[len(tids)-1]
	h := exec.Command(os.Args[0], "-test.run=^$")
	h.Env = append(os.Environ(), helperEnv+"=trace:"+strconv.Itoa(victim))
	_, hout := testutil.StartPiped(t, h)
	if l, _ := bufio.NewReader(hout).ReadString('\n'); l != "traced\n" {
		t.Fatalf("helper said %q", l)
	}
	before := tg.Counts()
	_, err := Stop(tg.pid, Options{})
	if !errors.Is(err, errs.ErrCannotStop) || !strings.Contains(err.Error(), fmt.Sprintf("traced by pid %d", h.Process.Pid)) {
		t.Fatalf("Stop: %v, want ErrCannotStop naming pid %d", err, h.Process.Pid)
	}
	t.Log(err)
	for tid, st := range threadStates(t, tg.pid) {
		if tid == victim {
			if st.tracer != h.Process.Pid {
				t.Errorf("thread %d: tracer %d, want the helper %d", tid, st.tracer, h.Process.Pid)
			}
			continue
		}
		if st.state == 't' || st.state == 'T' || st.tracer != 0 {
			t.Errorf("thread %d left in state %c, traced by %d", tid, st.state, st.tracer)
		}
	}
	tg.Progressing(before)
	h.Process.Kill()
	h.Wait()
	checkRunning(t, tg.pid)
	tg.quit()
}

// TestExitDuringStop: a process killed while stopped reads as gone, resumes
// without error, and its exit status stays its parent's to read.
func TestExitDuringStop(t *testing.T) {
	tg := startTarget(t, 8)
	p, err := Stop(tg.pid, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Resume()
	tg.cmd.Process.Kill()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		if st, err := taskState(tg.pid, tg.pid); err != nil || st == 'Z' {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("killed process did not exit")
		}
	}
	if _, err := p.ReadAt(make([]byte, 8), int64(tg.counters)); !errors.Is(err, errs.ErrNoSuchProcess) {
		t.Errorf("ReadAt of an exited process: %v, want ErrNoSuchProcess", err)
	}
	if err := p.Resume(); err != nil {
		t.Errorf("Resume: %v", err)
	}
	err = tg.cmd.Wait()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ProcessState.Sys().(syscall.WaitStatus).Signal() != unix.SIGKILL {
		t.Fatalf("target ended with %v, want killed", err)
	}
}

// TestExitWhileStopping stops a process over and over while it exits on
// its own: each stop succeeds or says the process is gone, and the process
// ends as it would have.
func TestExitWhileStopping(t *testing.T) {
	tg := startTarget(t, 8)
	tg.send("q")
	stops := 0
	for {
		p, err := Stop(tg.pid, Options{})
		if errors.Is(err, errs.ErrNoSuchProcess) {
			break
		}
		if err != nil {
			t.Fatalf("Stop: %v", err)
		}
		stops++
		p.Resume()
	}
	if l := tg.Line(); l != "done" {
		t.Fatalf("scan_threads ended with %q", l)
	}
	if err := tg.cmd.Wait(); err != nil {
		t.Fatalf("scan_threads: %v", err)
	}
	t.Logf("%d stops while it exited", stops)
}

// TestUnreadable reads PROT_NONE and unmapped memory: a *FaultError that
// says which, a partial read up to the boundary, and no harm to the target.
func TestUnreadable(t *testing.T) {
	tg := startTarget(t, 8)
	p, err := Stop(tg.pid, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Resume()
	var fe *FaultError
	n, err := p.ReadAt(make([]byte, 16), int64(tg.noaccess))
	if !errors.As(err, &fe) || n != 0 || fe.Mapping == nil || fe.Mapping.Perms[0] != '-' || fe.Addr != tg.noaccess {
		t.Errorf("ReadAt PROT_NONE: %d, %v, want a FaultError naming its mapping", n, err)
	}
	t.Log(err)
	n, err = p.ReadAt(make([]byte, 16), int64(tg.hole))
	if !errors.As(err, &fe) || n != 0 || fe.Mapping != nil || fe.Addr != tg.hole {
		t.Errorf("ReadAt unmapped: %d, %v, want a FaultError without mapping", n, err)
	}
	t.Log(err)
	// A read that runs off the end of a readable mapping into a gap.
	maps := p.Maps()
	for i, m := range maps {
		if !readable(m) || m.Path == "[vvar]" || m.Path == "[vsyscall]" || (i+1 < len(maps) && maps[i+1].Start == m.End) {
			continue
		}
		n, err = p.ReadAt(make([]byte, 32), int64(m.End-16))
		if !errors.As(err, &fe) || n != 16 || fe.Addr != m.End {
			t.Errorf("ReadAt across the end of %#x-%#x: %d, %v, want 16 bytes and a fault at the end", m.Start, m.End, n, err)
		}
		break
	}
	p.Resume()
	tg.Progressing(tg.Counts())
	tg.quit()
}

// TestGroupStopKept: a process already stopped by SIGSTOP stays stopped
// after a stop and resume, and runs on SIGCONT.
func TestGroupStopKept(t *testing.T) {
	tg := startTarget(t, 8)
	before := tg.Counts()
	unix.Kill(tg.pid, unix.SIGSTOP)
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		all := true
		for _, st := range threadStates(t, tg.pid) {
			all = all && st.state == 'T'
		}
		if all {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("SIGSTOP did not stop the process")
		}
	}
	p, err := Stop(tg.pid, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(p.Threads()); n != 9 {
		t.Errorf("%d threads, want 9", n)
	}
	p.Resume()
	time.Sleep(20 * time.Millisecond)
	for tid, st := range threadStates(t, tg.pid) {
		if st.state != 'T' || st.tracer != 0 {
			t.Errorf("thread %d: state %c, tracer %d after the stop; want T, untraced", tid, st.state, st.tracer)
		}
	}
	unix.Kill(tg.pid, unix.SIGCONT)
	tg.Progressing(before)
	tg.quit()
}

// TestCannotStop: a thread in vfork (waiting, killable only, for its child)
// cannot stop; Stop says which thread after its timeout and lets every
// other thread go.
func TestCannotStop(t *testing.T) {
	tg := startTarget(t, 8)
	before := tg.Counts()
	tg.send("v")
	// Wait for the main thread to be in vfork.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		if st, _ := taskState(tg.pid, tg.pid); st == 'D' {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("main thread did not enter vfork")
		}
	}
	start := time.Now()
	_, err := Stop(tg.pid, Options{Timeout: 300 * time.Millisecond})
	if !errors.Is(err, errs.ErrCannotStop) || !strings.Contains(err.Error(), "thread "+strconv.Itoa(tg.pid)+" ") {
		t.Fatalf("Stop: %v, want ErrCannotStop naming thread %d", err, tg.pid)
	}
	t.Logf("after %v: %v", time.Since(start).Round(time.Millisecond), err)
	checkRunning(t, tg.pid)
	if l := tg.Line(); l != "vforked" {
		t.Fatalf("got %q, want vforked", l)
	}
	tg.Progressing(before)
	checkRunning(t, tg.pid)
	tg.quit()
}

// TestMaxPause: a stop whose caller never resumes it ends by itself.
func TestMaxPause(t *testing.T) {
	tg := startTarget(t, 8)
	p, err := Stop(tg.pid, Options{MaxPause: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	c := tg.readCounters(t, p)
	time.Sleep(200 * time.Millisecond)
	if _, err := p.ReadAt(make([]byte, 8), int64(tg.counters)); !errors.Is(err, ErrResumed) {
		t.Errorf("ReadAt after MaxPause: %v, want ErrResumed", err)
	}
	checkRunning(t, tg.pid)
	tg.Progressing(c)
	if err := p.Resume(); err != nil {
		t.Errorf("Resume after MaxPause: %v", err)
	}
	if d := p.Paused(); d < 50*time.Millisecond {
		t.Errorf("Paused %v, shorter than MaxPause", d)
	}
	tg.quit()
}

// TestNoProcess: a PID that names nothing, or this very process.
func TestNoProcess(t *testing.T) {
	if _, err := Stop(1<<22+12345, Options{}); !errors.Is(err, errs.ErrNoSuchProcess) {
		t.Errorf("Stop of no process: %v", err)
	}
	if _, err := Stop(os.Getpid(), Options{}); !errors.Is(err, errs.ErrCannotStop) {
		t.Errorf("Stop of itself: %v", err)
	}
}

// TestSignalDuringStop: a signal sent while the process is stopped takes
// effect once it runs again (here SIGTERM's default: it ends).
func TestSignalDuringStop(t *testing.T) {
	tg := startTarget(t, 8)
	p, err := Stop(tg.pid, Options{})
	if err != nil {
		t.Fatal(err)
	}
	unix.Kill(tg.pid, unix.SIGTERM)
	time.Sleep(20 * time.Millisecond)
	if !slices.Equal(tg.readCounters(t, p), tg.readCounters(t, p)) {
		t.Error("the process ran during the stop")
	}
	p.Resume()
	err = tg.cmd.Wait()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ProcessState.Sys().(syscall.WaitStatus).Signal() != unix.SIGTERM {
		t.Fatalf("target ended with %v, want killed by SIGTERM after the stop", err)
	}
}

// TestExecWhileStopping stops a process over and over while its threads
// execute new programs: each stop ends with the process stopped whole, or
// an error that says why (an exec met during the stop, or a thread gone),
// and the chain of execs runs to its end.
func TestExecWhileStopping(t *testing.T) {
	bin := testutil.MustBuild(t, "scan_exec", testutil.Options{})
	cmd := exec.Command(bin, "150")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	outcomes := map[string]int{}
	for proc.Alive(cmd.Process.Pid) {
		p, err := Stop(cmd.Process.Pid, Options{Timeout: time.Second})
		switch {
		case err == nil:
			outcomes["stopped"]++
			checkAllStopped(t, cmd.Process.Pid, len(p.Threads()))
			p.Resume()
		case errors.Is(err, errs.ErrCannotStop) && strings.Contains(err.Error(), "executed a new program during the stop"):
			outcomes["exec during the stop"]++
		case errors.Is(err, errs.ErrNoSuchProcess):
			outcomes["gone"]++
		default:
			t.Fatalf("Stop: %v", err)
		}
		if _, err := os.Stat("/proc/" + strconv.Itoa(cmd.Process.Pid)); err == nil {
			if st, err := taskState(cmd.Process.Pid, cmd.Process.Pid); err == nil && st != 'Z' {
				checkRunning(t, cmd.Process.Pid)
			}
		}
	}
	b, _ := io.ReadAll(out)
	if err := cmd.Wait(); err != nil || string(b) != "done\n" {
		t.Fatalf("scan_exec: %v, output %q", err, b)
	}
	t.Logf("outcomes: %v", outcomes)
}
