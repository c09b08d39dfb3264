package stopped

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/heapscope/heapscope/internal/errs"
	"github.com/heapscope/heapscope/internal/testutil"
)

// watched is a watch_exit process under a Watch.
type watched struct {
	t      *testing.T
	cmd    *exec.Cmd
	in     io.Writer
	out    *bufio.Reader
	pid    int
	marker uint64
	w      *Watch
	exits  chan exitSeen
}

// exitSeen is what OnExit saw of the process at its end.
type exitSeen struct {
	threads int
	marker  uint64
	err     error
	missing []int
	atExit  bool
}

func startWatched(t *testing.T) *watched {
	t.Helper()
	bin := testutil.MustBuild(t, "watch_exit", testutil.Options{})
	cmd := exec.Command(bin)
	cmd.Stderr = os.Stderr
	in, out := testutil.StartPiped(t, cmd)
	wd := &watched{t: t, cmd: cmd, in: in, out: bufio.NewReader(out), exits: make(chan exitSeen, 4)}
	wd.ready()
	w, err := Seize(wd.pid, WatchOptions{OnExit: func(p *Process) {
		b := make([]byte, 8)
		_, err := p.ReadAt(b, int64(wd.marker))
		wd.exits <- exitSeen{threads: len(p.Threads()), marker: binary.LittleEndian.Uint64(b), err: err, missing: p.Missing(), atExit: p.AtExit()}
	}})
	if err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatal(err)
	}
	wd.w = w
	t.Cleanup(func() { w.Close() })
	return wd
}

func (wd *watched) ready() {
	wd.t.Helper()
	l := wd.line()
	if _, err := fmt.Sscanf(l, "ready %d marker=0x%x", &wd.pid, &wd.marker); err != nil {
		wd.t.Fatalf("watch_exit said %q: %v", l, err)
	}
}

func (wd *watched) line() string {
	wd.t.Helper()
	l, err := wd.out.ReadString('\n')
	if err != nil {
		wd.t.Fatalf("reading watch_exit: %v (got %q)", err, l)
	}
	return strings.TrimSpace(l)
}

func (wd *watched) send(s string) {
	wd.t.Helper()
	if _, err := io.WriteString(wd.in, s+"\n"); err != nil {
		wd.t.Fatal(err)
	}
}

// wait waits for the watch to see the end, then reaps the process (the
// parent's wait must come after: a wait of the parent's reports, and
// takes, its child's ptrace stops too).
func (wd *watched) wait() (status int) {
	wd.t.Helper()
	select {
	case <-wd.w.Done():
	case <-time.After(30 * time.Second):
		wd.t.Fatal("the watch did not see the process end")
	}
	err := wd.cmd.Wait()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		wd.t.Fatal(err)
	}
	ws := wd.cmd.ProcessState.Sys().(syscall.WaitStatus)
	if ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ws.ExitStatus()
}

// TestWatchExits: whichever way a watched process ends (exit, _exit, a
// fatal signal, its main thread gone first), OnExit sees it stopped at its
// end with its memory readable and every thread still there held, and the
// process then ends with its own status.
func TestWatchExits(t *testing.T) {
	for _, c := range []struct {
		cmd     string
		status  int
		threads int
	}{
		{"x", 5, 4},
		{"_", 6, 4},
		{"a", 128 + 6, 4},
		{"m", 7, 3},
	} {
		t.Run(c.cmd, func(t *testing.T) {
			wd := startWatched(t)
			wd.send(c.cmd)
			var seen exitSeen
			select {
			case seen = <-wd.exits:
			case <-time.After(30 * time.Second):
				t.Fatal("OnExit was not called")
			}
			if got := wd.wait(); got != c.status {
				t.Errorf("status %d, want %d", got, c.status)
			}
			if seen.err != nil || seen.marker != 0x5a5a5a5a12345678 {
				t.Errorf("at the exit the marker read %#x, %v", seen.marker, seen.err)
			}
			// Every thread is held, or said missing: the kernel skips the
			// exit stop of a thread killed twice in a group exit (two
			// threads of "m" may call exit at once).
			if seen.threads+len(seen.missing) != c.threads || !seen.atExit || c.cmd != "m" && len(seen.missing) != 0 {
				t.Errorf("at the exit %d threads held (missing %v, at exit %v), want %d", seen.threads, seen.missing, seen.atExit, c.threads)
			}
		})
	}
}

// TestWatchRunning: a watched program takes its signals, makes threads,
// stops and continues with job control, executes a new program (watched
// on), and is stopped by Watch.Stop and let go again; none of it shows.
func TestWatchRunning(t *testing.T) {
	wd := startWatched(t)
	wd.send("s 200")
	if l := wd.line(); l != "signals 200" {
		t.Errorf("after 200 signals: %q", l)
	}
	wd.send("t 50")
	if l := wd.line(); l != "threads 50" {
		t.Errorf("after 50 threads: %q", l)
	}
	wd.send("z")
	waitState(t, wd.pid, func(st byte) bool { return st == 't' || st == 'T' })
	time.Sleep(20 * time.Millisecond)
	if err := unix.Kill(wd.pid, unix.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if l := wd.line(); l != "continued" {
		t.Errorf("after SIGCONT: %q", l)
	}
	for i := 0; i < 5; i++ {
		p, err := wd.w.Stop(Options{})
		if err != nil {
			t.Fatal(err)
		}
		if n := len(p.Threads()); n != 4 {
			t.Errorf("stop %d: %d threads, want 4", i, n)
		}
		b := make([]byte, 8)
		if _, err := p.ReadAt(b, int64(wd.marker)); err != nil || binary.LittleEndian.Uint64(b) != 0x5a5a5a5a12345678 {
			t.Errorf("stop %d: marker %x, %v", i, b, err)
		}
		checkAllStopped(t, wd.pid, 4)
		p.Resume()
	}
	wd.send("s 10")
	if l := wd.line(); l != "signals 10" {
		t.Errorf("after the stops: %q", l)
	}
	wd.send("e")
	wd.ready()
	wd.send("s 3")
	if l := wd.line(); l != "signals 3" {
		t.Errorf("the new program: %q", l)
	}
	wd.send("x")
	select {
	case seen := <-wd.exits:
		if seen.threads != 4 || seen.marker != 0x5a5a5a5a12345678 {
			t.Errorf("the new program's exit: %+v", seen)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("OnExit was not called for the new program")
	}
	if got := wd.wait(); got != 5 {
		t.Errorf("status %d, want 5", got)
	}
}

// TestWatchClose: after Close the process runs on untraced.
func TestWatchClose(t *testing.T) {
	wd := startWatched(t)
	wd.w.Close()
	checkRunning(t, wd.pid)
	wd.send("s 5")
	if l := wd.line(); l != "signals 5" {
		t.Errorf("after Close: %q", l)
	}
	if _, err := wd.w.Stop(Options{}); !errors.Is(err, errs.ErrNoSuchProcess) {
		t.Errorf("Stop after Close: %v", err)
	}
	wd.send("x")
	if err := wd.cmd.Wait(); err == nil || wd.cmd.ProcessState.ExitCode() != 5 {
		t.Errorf("exit: %v", err)
	}
	select {
	case <-wd.exits:
		t.Error("OnExit called after Close")
	default:
	}
}

// TestWatchKilled: when the process holding a Watch dies, the watched
// process runs on untraced.
func TestWatchKilled(t *testing.T) {
	bin := testutil.MustBuild(t, "watch_exit", testutil.Options{})
	cmd := exec.Command(bin)
	in, out := testutil.StartPiped(t, cmd)
	wd := &watched{t: t, cmd: cmd, in: in, out: bufio.NewReader(out)}
	wd.ready()
	h := exec.Command(os.Args[0], "-test.run=^$")
	h.Env = append(os.Environ(), helperEnv+"=watch:"+strconv.Itoa(wd.pid))
	hout, err := h.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Start(); err != nil {
		t.Fatal(err)
	}
	if l, _ := bufio.NewReader(hout).ReadString('\n'); strings.TrimSpace(l) != "watching" {
		t.Fatalf("helper said %q", l)
	}
	if tr := threadStates(t, wd.pid)[wd.pid].tracer; tr == 0 || threadGroupOf(tr) != h.Process.Pid {
		t.Fatalf("traced by %d, not a thread of the helper %d", tr, h.Process.Pid)
	}
	h.Process.Kill()
	h.Wait()
	waitState(t, wd.pid, func(byte) bool { return threadStates(t, wd.pid)[wd.pid].tracer == 0 })
	checkRunning(t, wd.pid)
	wd.send("s 4")
	if l := wd.line(); l != "signals 4" {
		t.Errorf("after the helper died: %q", l)
	}
	wd.send("x")
	cmd.Wait()
}

func waitState(t *testing.T, pid int, ok func(byte) bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		if st, err := taskState(pid, pid); err == nil && ok(st) {
			return
		}
		if time.Now().After(deadline) {
			st, _ := taskState(pid, pid)
			t.Fatalf("pid %d stays in state %c", pid, st)
		}
	}
}

func threadGroupOf(tid int) int {
	tg, _ := threadGroup(tid)
	return tg
}
