//go:build linux && amd64

package preload

import (
	"bufio"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/internal/testutil"
)

// allocCounter counts the allocations it is sent, per process.
type allocCounter struct {
	event.Sink
	mu sync.Mutex
	n  map[uint32]int
}

func (a *allocCounter) Events(evs []event.Event) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, e := range evs {
		if e.Kind == event.KindAlloc {
			a.n[e.PID]++
		}
	}
	return nil
}

func (a *allocCounter) of(pid int) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.n[uint32(pid)]
}

// TestFlushProcessLateRing: a collector that takes in a process's new ring
// late (here 2.5 s: the interposer waits 2 s for it, then writes into it
// all the same) still delivers what the process wrote there when
// FlushProcess is asked for the process, stopped. Before, FlushProcess
// drained only the rings the pump had, and a leak check at the exit of a
// short program under heavy load found none of its blocks.
func TestFlushProcessLateRing(t *testing.T) {
	bin := testutil.MustBuild(t, "preload_wait", testutil.Options{})
	var rings atomic.Int32
	testHookRing = func() {
		if rings.Add(1) == 1 {
			time.Sleep(2500 * time.Millisecond)
		}
	}
	t.Cleanup(func() { testHookRing = nil })
	sink := &allocCounter{Sink: event.Discard, n: map[uint32]int{}}
	c, err := New(Config{}, sink)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cmd := exec.Command(bin, "100")
	if err := c.Prepare(cmd); err != nil {
		t.Fatal(err)
	}
	in, out := testutil.StartPiped(t, cmd)
	sc := bufio.NewScanner(out)
	if !sc.Scan() || !strings.HasPrefix(sc.Text(), "phase") {
		t.Fatalf("preload_wait said %q, want its first phase", sc.Text())
	}
	pid := cmd.Process.Pid
	syscall.Kill(pid, syscall.SIGSTOP)
	if err := c.FlushProcess(pid); err != nil {
		t.Fatal(err)
	}
	if n := sink.of(pid); n < 100 {
		t.Errorf("after FlushProcess: %d allocations of the stopped process, want its 100 and more", n)
	}
	syscall.Kill(pid, syscall.SIGCONT)
	in.Close()
	cmd.Wait()
}
