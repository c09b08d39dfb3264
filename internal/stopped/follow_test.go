package stopped

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/heapscope/heapscope/internal/proc"
	"github.com/heapscope/heapscope/internal/testutil"
)

// forker is a watch_fork process: a parent that waits for its children
// with WUNTRACED, as a shell with job control does.
type forker struct {
	t   *testing.T
	in  io.Writer
	out *bufio.Reader
	pid int
}

func startForker(t *testing.T) *forker {
	t.Helper()
	bin := testutil.MustBuild(t, "watch_fork", testutil.Options{})
	cmd := exec.Command(bin)
	cmd.Stderr = os.Stderr
	in, out := testutil.StartPiped(t, cmd)
	f := &forker{t: t, in: in, out: bufio.NewReader(out)}
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

func (f *forker) line() string {
	f.t.Helper()
	l, err := f.out.ReadString('\n')
	if err != nil {
		f.t.Fatalf("reading watch_fork: %v (got %q)", err, l)
	}
	return strings.TrimSpace(l)
}

func (f *forker) send(cmd string) {
	f.t.Helper()
	if _, err := io.WriteString(f.in, cmd+"\n"); err != nil {
		f.t.Fatal(err)
	}
}

// heldChild waits for a child of the forker in a ptrace stop ('t') and
// returns it.
func (f *forker) heldChild() int {
	f.t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		kids, _ := proc.Children(f.pid)
		for _, k := range kids {
			if st, err := proc.ReadStat(k); err == nil && st.State == 't' {
				return k
			}
		}
	}
	f.t.Fatal("no child of watch_fork held in a ptrace stop")
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

	w, err := Seize(f.pid, WatchOptions{Follow: true, Held: func(pid int) bool { return pid != f.pid }})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for _, cmd := range []string{"f", "t", "f"} {
		f.send(cmd)
		kid := f.heldChild()
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

// TestFollowCloseEndsHolds: closing the watch lets a held child go on,
// unseen, with its SIGSTOP dropped.
func TestFollowCloseEndsHolds(t *testing.T) {
	f := startForker(t)
	w, err := Seize(f.pid, WatchOptions{Follow: true, Held: func(pid int) bool { return pid != f.pid }})
	if err != nil {
		t.Fatal(err)
	}
	f.send("f")
	kid := f.heldChild()
	w.Close()
	got := f.line() + " / " + f.line()
	if !strings.Contains(got, fmt.Sprintf("exited %d 0", kid)) {
		t.Fatalf("after Close the parent and child said %q, want the child to have run and exited", got)
	}
}
