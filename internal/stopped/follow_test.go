package stopped

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/heapscope/heapscope/internal/errs"
	"github.com/heapscope/heapscope/internal/proc"
	"github.com/heapscope/heapscope/internal/testutil"
)

// forker is a watch_fork process: a parent that waits for its children
// with WUNTRACED, as a shell with job control does.
type forker struct {
	t     *testing.T
	in    io.Writer
	lines chan string
	pid   int
}

func startForker(t *testing.T) *forker {
	t.Helper()
	return startForkerCmd(t, exec.Command(testutil.MustBuild(t, "watch_fork", testutil.Options{})))
}

// startForkerCmd starts cmd, which runs watch_fork.
func startForkerCmd(t *testing.T, cmd *exec.Cmd) *forker {
	t.Helper()
	cmd.Stderr = os.Stderr
	in, out := testutil.StartPiped(t, cmd)
	f := &forker{t: t, in: in, lines: make(chan string, 16)}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			f.lines <- strings.TrimSpace(sc.Text())
		}
		close(f.lines)
	}()
	if _, err := fmt.Sscanf(f.line(), "ready %d", &f.pid); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// A child the test left held goes too.
		kids, _ := proc.Children(f.pid)
		for _, k := range kids {
			unix.Kill(k, unix.SIGKILL)
		}
	})
	return f
}

// line returns watch_fork's next line; none within 30 s (a child left
// held) fails the test.
func (f *forker) line() string {
	f.t.Helper()
	select {
	case l, ok := <-f.lines:
		if !ok {
			f.t.Fatal("watch_fork ended")
		}
		return l
	case <-time.After(30 * time.Second):
		f.t.Fatal("watch_fork said nothing in 30 s: a child is held still")
	}
	return ""
}

func (f *forker) send(cmd string) {
	f.t.Helper()
	if _, err := io.WriteString(f.in, cmd+"\n"); err != nil {
		f.t.Fatal(err)
	}
}

// holder returns WatchOptions.Held for the forker's watch: every child's
// SIGSTOP is a hold, and each is told on the channel.
func (f *forker) holder() (func(int) bool, chan int) {
	held := make(chan int, 16)
	return func(pid int) bool {
		if pid == f.pid {
			return false
		}
		held <- pid
		return true
	}, held
}

// heldChild waits until the watch holds a child of the forker, and returns
// it.
func (f *forker) heldChild(held chan int) int {
	f.t.Helper()
	select {
	case pid := <-held:
		if st, err := proc.ReadStat(pid); err != nil || st.State != 't' {
			f.t.Fatalf("the held child %d is in state %c (%v), want a ptrace stop", pid, st.State, err)
		}
		return pid
	case <-time.After(30 * time.Second):
		f.t.Fatal("no child of watch_fork held")
	}
	return 0
}

// TestFollowHoldsUnseen: a child forked by a watched process (by its main
// thread or another) and held as the BPF side holds it is not seen stopped
// by its parent's waitpid(WUNTRACED); Stop of the child goes through the
// watch and leaves the hold in place; Release lets it go on with the
// SIGSTOP dropped. Unwatched, the parent sees the child stopped: the
// failure the watch is for.
func TestFollowHoldsUnseen(t *testing.T) {
	f := startForker(t)
	f.send("f")
	if l := f.line(); !strings.HasPrefix(l, "stopped ") {
		t.Fatalf("unwatched: the parent said %q, want it to see its child stopped", l)
	}
	f.line() // the child's own line, once continued

	isHeld, held := f.holder()
	w, err := Seize(f.pid, WatchOptions{Follow: true, Held: isHeld})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for _, cmd := range []string{"f", "t", "f"} {
		f.send(cmd)
		kid := f.heldChild(held)
		p, err := Stop(kid, Options{})
		if err != nil {
			t.Fatalf("Stop of a held child: %v", err)
		}
		if n := len(p.Threads()); n != 1 {
			t.Errorf("Stop of the held child: %d threads, want 1", n)
		}
		p.Resume()
		time.Sleep(20 * time.Millisecond)
		if st, err := proc.ReadStat(kid); err != nil || st.State != 't' {
			t.Fatalf("after a Stop's Resume, the held child is %c (%v), want still held", st.State, err)
		}
		unlisted := false
		if !Release(kid, func() { unlisted = true }) || !unlisted {
			t.Fatalf("Release(%d) = false or did not unlist, want the watch to hold it", kid)
		}
		want := []string{fmt.Sprintf("child %d", kid), fmt.Sprintf("exited %d 0", kid)}
		got := []string{f.line(), f.line()}
		if !(got[0] == want[0] && got[1] == want[1] || got[0] == want[1] && got[1] == want[0]) {
			t.Fatalf("%s: the parent and child said %q, want %q", cmd, got, want)
		}
	}
	if Release(f.pid+1_000_000, nil) {
		t.Error("Release of a process no watch traces = true")
	}
}

// TestFollowReleaseBeforeHold: a release that comes before its hold's
// stop (the BPF side's hold is released by a tracer that was quick) ends
// the hold as it comes: the child runs on, unseen.
func TestFollowReleaseBeforeHold(t *testing.T) {
	f := startForker(t)
	w, err := Seize(f.pid, WatchOptions{Follow: true, Held: func(pid int) bool { return pid != f.pid }})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	f.send("d")
	var kid int
	for deadline := time.Now().Add(30 * time.Second); kid == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("watch_fork forked no child")
		}
		if kids, _ := proc.Children(f.pid); len(kids) > 0 {
			kid = kids[0]
		}
	}
	if !Release(kid, nil) {
		t.Fatalf("Release(%d) = false, want the watch to trace it", kid)
	}
	got := f.line() + " / " + f.line()
	if !strings.Contains(got, fmt.Sprintf("exited %d 0", kid)) || strings.Contains(got, "stopped") {
		t.Fatalf("the parent and child said %q, want the child to have run and exited, unseen", got)
	}
}

// TestFollowCloseEndsHolds: closing the watch lets a held child go on,
// unseen, with its SIGSTOP dropped.
func TestFollowCloseEndsHolds(t *testing.T) {
	f := startForker(t)
	isHeld, held := f.holder()
	w, err := Seize(f.pid, WatchOptions{Follow: true, Held: isHeld})
	if err != nil {
		t.Fatal(err)
	}
	f.send("f")
	kid := f.heldChild(held)
	w.Close()
	got := f.line() + " / " + f.line()
	if !strings.Contains(got, fmt.Sprintf("exited %d 0", kid)) {
		t.Fatalf("after Close the parent and child said %q, want the child to have run and exited", got)
	}
}

// TestFollowOutlivesRoot: the watched process forks itself and ends, as a
// daemon does (its parent, a shell, reaps it); the watch goes on with the
// process it followed, whose children's holds its parent still does not
// see, and ends once that process has ended too. (Before, the watch ended
// with the process Seize named, and the next child's hold was a group stop
// its parent saw.)
func TestFollowOutlivesRoot(t *testing.T) {
	bin := testutil.MustBuild(t, "watch_fork", testutil.Options{})
	f := startForkerCmd(t, exec.Command("sh", "-c", bin+"; echo root-ended $?"))
	isHeld, held := f.holder()
	w, err := Seize(f.pid, WatchOptions{Follow: true, Held: isHeld})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	root := f.pid
	f.send("x")
	if _, err := fmt.Sscanf(f.line(), "forked %d", &f.pid); err != nil {
		t.Fatal(err)
	}
	if l := f.line(); l != "root-ended 0" {
		t.Fatalf("the shell said %q, want its wait for the watched process to report it ended with status 0", l)
	}
	select {
	case <-w.Done():
	case <-time.After(10 * time.Second):
		t.Fatalf("Done not closed 10 s after pid %d ended", root)
	}
	if _, err := w.Stop(Options{}); !errors.Is(err, errs.ErrNoSuchProcess) {
		t.Errorf("Stop of the ended process: %v, want ErrNoSuchProcess", err)
	}
	for range 2 {
		f.send("f")
		kid := f.heldChild(held)
		if !Release(kid, nil) {
			t.Fatalf("Release(%d) = false, want the watch to hold it", kid)
		}
		got := f.line() + " / " + f.line()
		if !strings.Contains(got, fmt.Sprintf("exited %d 0", kid)) || strings.Contains(got, "stopped") {
			t.Fatalf("the parent and child said %q, want the child to have run and exited, unseen", got)
		}
	}
	p, err := Stop(f.pid, Options{})
	if err != nil {
		t.Fatalf("Stop of the followed process after the watched one ended: %v", err)
	}
	p.Resume()
	f.in.(io.Closer).Close() // the followed process reads its end and exits
	select {
	case <-w.tr.done:
	case <-time.After(10 * time.Second):
		t.Fatal("the watch still runs 10 s after the last process it followed ended")
	}
}
