package ebpf

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/internal/proc"
	"github.com/heapscope/heapscope/internal/testutil"
)

// discard is a Sink that keeps nothing.
type discard struct{}

func (discard) Process(event.Process) error   { return nil }
func (discard) Exit(event.Exit) error         { return nil }
func (discard) Module(event.Module) error     { return nil }
func (discard) Stack(event.Stack) error       { return nil }
func (discard) Events([]event.Event) error    { return nil }
func (discard) Snapshot(event.Snapshot) error { return nil }
func (discard) Stats(event.Stats) error       { return nil }
func (discard) Note(event.Note) error         { return nil }

// holderEnv makes the test binary a tracer of the pid it names that
// prints "attached" and waits to be killed (TestKilledWhileHolding).
const holderEnv = "HEAPSCOPE_TEST_HOLDER"

func init() {
	if s := os.Getenv(holderEnv); s != "" {
		pid, _ := strconv.Atoi(s)
		t, err := New(Config{UnwindTables: true}, discard{})
		if err == nil {
			err = t.Attach(pid)
		}
		if err != nil {
			fmt.Println(err)
			os.Exit(1)
		}
		fmt.Println("attached")
		select {}
	}
}

// TestKilledWhileHolding kills a tracer (SIGKILL) while the BPF side holds
// a process stopped for it, 20 times at each kind of hold: at a fork (the
// child), and at the loader's adding a library (the process). The process
// must never be left stopped: the tracer's watchdog continues it.
func TestKilledWhileHolding(t *testing.T) {
	testutil.SkipWithoutEBPF(t, Available())
	bin := testutil.MustBuild(t, "ebpf_holds", testutil.Options{Flags: []string{"-ldl"}})
	_, lib := dlopenWorkload(t)
	for _, mode := range []string{"fork", "dlopen"} {
		t.Run(mode, func(t *testing.T) {
			args := []string{mode}
			if mode == "dlopen" {
				args = append(args, lib)
			}
			target := exec.Command(bin, args...)
			out, err := target.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := target.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() {
				// A child left stopped (the test failing) goes too.
				kids, _ := proc.Children(target.Process.Pid)
				for _, k := range kids {
					syscall.Kill(k, syscall.SIGKILL)
				}
				target.Process.Kill()
				target.Wait()
			}()
			if line, _ := bufio.NewReader(out).ReadString('\n'); strings.TrimSpace(line) != "ready" {
				t.Fatalf("workload said %q", line)
			}
			pid := target.Process.Pid
			caught := 0
			for i := 0; i < 20; i++ {
				if killAtHold(t, pid, mode == "fork") {
					caught++
				}
				time.Sleep(1500 * time.Millisecond) // the watchdog's scans take a second
				if s := stoppedIn(pid); s != "" {
					t.Fatalf("kill %d: %s left stopped", i, s)
				}
			}
			t.Logf("%s: %d of 20 kills came while a process was held", mode, caught)
			if caught < 10 {
				t.Errorf("only %d of 20 kills came during a hold: the test did not test", caught)
			}
		})
	}
}

// killAtHold starts a tracer of pid in another process and kills it with
// SIGKILL as soon as it holds a process stopped (a child of pid if child,
// else pid), or after two seconds. It reports whether it saw the hold.
func killAtHold(t *testing.T, pid int, child bool) bool {
	cmd := exec.Command("/proc/self/exe", "-test.run=^$")
	cmd.Env = append(os.Environ(), holderEnv+"="+strconv.Itoa(pid))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	if line, _ := bufio.NewReader(out).ReadString('\n'); strings.TrimSpace(line) != "attached" {
		cmd.Process.Kill()
		t.Fatalf("tracer said %q", line)
	}
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		held := false
		if child {
			kids, _ := proc.Children(pid)
			for _, k := range kids {
				held = held || isStopped(k)
			}
		} else {
			held = isStopped(pid)
		}
		if held {
			cmd.Process.Signal(syscall.SIGKILL)
			return true
		}
		time.Sleep(100 * time.Microsecond)
	}
	cmd.Process.Signal(syscall.SIGKILL)
	return false
}

func isStopped(pid int) bool {
	st, err := proc.ReadStat(pid)
	return err == nil && st.State == 'T'
}

// stoppedIn names pid or a child of it that is stopped, or returns "".
func stoppedIn(pid int) string {
	if isStopped(pid) {
		return fmt.Sprintf("pid %d", pid)
	}
	kids, _ := proc.Children(pid)
	for _, k := range kids {
		if isStopped(k) {
			return fmt.Sprintf("child %d of %d", k, pid)
		}
	}
	return ""
}
