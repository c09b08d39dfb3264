//go:build linux && amd64

package preload

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/internal/testutil"
)

// TestManyThreads runs waves of short-lived threads: each is traced with
// its exact calls, and threads that ended hand their buffers on.
func TestManyThreads(t *testing.T) {
	bin := testutil.MustBuild(t, "preload_threads", testutil.Options{})
	const waves, per, k = 25, 8, 200
	rec := newRecorder()
	c, err := New(Config{BufferSize: 64 << 10}, rec)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, fmt.Sprint(waves), fmt.Sprint(per), fmt.Sprint(k))
	c.Prepare(cmd)
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	reportExit(c, cmd)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
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
