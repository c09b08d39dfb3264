package heapscope

import (
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heapscope/heapscope/internal/testutil"
)

// TestAttachShortLivedProgram attaches to a program of one second a tenth
// of a second after its start (issue 23: an attach that took a second
// missed it): its calls are traced, and the session ends at its exit.
func TestAttachShortLivedProgram(t *testing.T) {
	requireEBPF(t)
	bin := testutil.MustBuild(t, "attach_start", testutil.Options{})
	for i := 0; i < 3; i++ {
		cmd := exec.Command(bin, "1")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		started := time.Now()
		time.Sleep(100 * time.Millisecond)
		var allocs atomic.Int64
		pid := cmd.Process.Pid
		s, err := Start("short-lived", Properties{FileMode: RealTime, NoCensus: true, Hooks: Hooks{
			OnAlloc: func(c *Call) {
				if c.PID == uint32(pid) {
					allocs.Add(1)
				}
			},
		}}, []int{pid})
		if err != nil {
			cmd.Wait()
			t.Fatalf("run %d: attach 0.1 s after the start: %v", i, err)
		}
		<-s.Done()
		s.Stop()
		if err := cmd.Wait(); err != nil {
			t.Errorf("run %d: the program failed: %v", i, err)
		}
		// It allocates every 200 µs or so until its end.
		if n := allocs.Load(); n == 0 {
			t.Errorf("run %d: attached after %v, nothing traced", i, time.Since(started))
		} else {
			t.Logf("run %d: %d allocations traced", i, n)
		}
	}
}

// TestAttachTargetExits attaches to programs that end at about the time
// the attach is given: each attach either traces the program (and the
// session ends at its exit) or fails with one line that says it exited,
// wrapping ErrNoSuchProcess.
func TestAttachTargetExits(t *testing.T) {
	requireEBPF(t)
	bin := testutil.MustBuild(t, "attach_start", testutil.Options{})
	exited := 0
	for i := 0; i < 8; i++ {
		// Programs of 20 to 300 ms.
		cmd := exec.Command(bin, fmt.Sprint(0.02+0.04*float64(i)))
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
		s, err := Start("exits-during-attach", Properties{FileMode: RealTime, NoCensus: true}, []int{cmd.Process.Pid})
		if err == nil {
			<-s.Done()
			s.Stop()
		}
		cmd.Wait()
		switch {
		case err == nil:
		case errors.Is(err, ErrNoSuchProcess) && strings.Contains(err.Error(), "exited") && !strings.Contains(err.Error(), "\n"):
			exited++
		default:
			t.Errorf("run %d: %v; want it traced or a one-line 'exited' error", i, err)
		}
	}
	t.Logf("%d of 8 exited during the attach", exited)
}
