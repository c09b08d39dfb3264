package heapscope

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/internal/registry"
	"github.com/heapscope/heapscope/internal/testutil"
)

func TestMain(m *testing.M) {
	// Re-executed as another process that acts on a session by name.
	if op := os.Getenv("HEAPSCOPE_TEST_CHILD"); op != "" {
		os.Exit(child(op, os.Getenv("HEAPSCOPE_TEST_NAME")))
	}
	// Sessions of this test binary register in a private directory.
	dir, err := os.MkdirTemp("", "heapscope-registry-")
	if err != nil {
		panic(err)
	}
	os.Setenv(registry.DirEnv, dir)
	code := m.Run()
	os.RemoveAll(dir)
	testutil.Cleanup()
	os.Exit(code)
}

// child performs op on the session named name from another process and
// prints the outcome as JSON.
func child(op, name string) int {
	var out struct {
		Status Status `json:"status"`
		Err    string `json:"err"`
		Kind   string `json:"kind"`
	}
	var err error
	switch op {
	case "start":
		var s *Session
		s, err = Start(name, Properties{FileMode: RealTime}, []int{os.Getppid()})
		if err == nil {
			s.Stop()
		}
	case "update-add":
		var pid int
		fmt.Sscan(os.Getenv("HEAPSCOPE_TEST_PID"), &pid)
		err = Update(name, Change{AddPIDs: []int{pid}})
	default:
		out.Status, err = Control(name, ControlOp(op))
	}
	if err != nil {
		out.Err = err.Error()
		for kind, e := range map[string]error{"already_exists": ErrAlreadyExists, "not_running": ErrNotRunning, "no_such_process": ErrNoSuchProcess} {
			if errors.Is(err, e) {
				out.Kind = kind
			}
		}
	}
	json.NewEncoder(os.Stdout).Encode(out)
	return 0
}

type childResult struct {
	Status Status `json:"status"`
	Err    string `json:"err"`
	Kind   string `json:"kind"`
}

// fromAnotherProcess runs op on the session named name in a child process.
func fromAnotherProcess(t *testing.T, op, name string, env ...string) childResult {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), "HEAPSCOPE_TEST_CHILD="+op, "HEAPSCOPE_TEST_NAME="+name), env...)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("child %s: %v", op, err)
	}
	var r childResult
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("child %s said %q: %v", op, out, err)
	}
	return r
}

// stepper is a running session_steps workload.
type stepper struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Reader
}

func startStepper(t *testing.T) *stepper {
	t.Helper()
	cmd := exec.Command(testutil.MustBuild(t, "session_steps", testutil.Options{}))
	in, out := testutil.StartPiped(t, cmd)
	s := &stepper{cmd: cmd, in: in, out: bufio.NewReader(out)}
	s.expect(t, "ready")
	return s
}

func (s *stepper) expect(t *testing.T, want string) {
	t.Helper()
	line, err := s.out.ReadString('\n')
	if err != nil || strings.TrimSpace(line) != want {
		t.Fatalf("workload said %q (%v), want %q", line, err, want)
	}
}

func (s *stepper) do(t *testing.T, cmd string) {
	t.Helper()
	fmt.Fprintln(s.in, cmd)
	s.expect(t, "ok")
}

func (s *stepper) pid() int { return s.cmd.Process.Pid }

func requireEBPF(t *testing.T) {
	t.Helper()
	testutil.SkipWithoutEBPF(t, ebpfAvailable())
}

// counter is a set of hooks that count calls by kind and size.
type counter struct {
	mu        sync.Mutex
	allocs    map[uint64]int // by size
	frees     int
	unmatched int
	stacks    int
}

func (c *counter) hooks(pid int) Hooks {
	c.allocs = map[uint64]int{}
	return Hooks{
		OnAlloc: func(call *Call) {
			if call.PID != uint32(pid) {
				return
			}
			c.mu.Lock()
			c.allocs[call.Size]++
			if len(call.Frames) > 0 {
				c.stacks++
			}
			c.mu.Unlock()
		},
		OnFree: func(call *Call) {
			if call.PID != uint32(pid) {
				return
			}
			c.mu.Lock()
			c.frees++
			if call.Unmatched {
				c.unmatched++
			}
			c.mu.Unlock()
		},
	}
}

func (c *counter) get() (allocs map[uint64]int, frees, unmatched, stacks int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	a := map[uint64]int{}
	for k, v := range c.allocs {
		a[k] = v
	}
	return a, c.frees, c.unmatched, c.stacks
}

func TestStartErrors(t *testing.T) {
	long := strings.Repeat("n", registry.MaxNameLen+1)
	if _, err := Start(long, Properties{FileMode: RealTime}, []int{os.Getpid()}); !errors.Is(err, ErrNameTooLong) {
		t.Errorf("long name: %v", err)
	}
	_, err := Start("nopid", Properties{FileMode: RealTime}, []int{os.Getpid(), 1 << 30})
	if !errors.Is(err, ErrNoSuchProcess) || !strings.Contains(err.Error(), fmt.Sprint(1<<30)) {
		t.Errorf("missing pid: %v", err)
	}
	if _, err := Start("noprocs", Properties{FileMode: RealTime}, nil); !errors.Is(err, ErrInvalidFlags) {
		t.Errorf("no pids: %v", err)
	}
	if _, err := Start("badprops", Properties{FileMode: Circular}, []int{os.Getpid()}); !errors.Is(err, ErrInvalidFlags) {
		t.Errorf("bad properties: %v", err)
	}
	if _, err := Control("no-such-session", ControlQuery); !errors.Is(err, ErrNotRunning) {
		t.Errorf("control of a missing session: %v", err)
	}
	if err := Update("no-such-session", Change{AddPIDs: []int{1}}); !errors.Is(err, ErrNotRunning) {
		t.Errorf("update of a missing session: %v", err)
	}
}

func TestAttachHooksAndUnmatchedFrees(t *testing.T) {
	requireEBPF(t)
	w := startStepper(t)
	w.do(t, "a 5 333") // allocated before tracing: their frees are unmatched
	s, err := Start("hooks-test", Properties{FileMode: RealTime}, []int{w.pid()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	var c counter
	s.SetHooks(c.hooks(w.pid()))
	w.do(t, "a 50 100")
	w.do(t, "f")
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	allocs, frees, unmatched, stacks := c.get()
	if allocs[100] != 50 || frees != 55 || unmatched != 5 || stacks < 50 {
		t.Errorf("allocs %v, frees %d, unmatched %d, with stacks %d; want 50 of 100 bytes, 55, 5, 50",
			allocs, frees, unmatched, stacks)
	}
	if st := s.Stats(); st.Unmatched != 5 || st.TotalLost() != 0 {
		t.Errorf("stats %+v", st)
	}
	// A nil field clears that hook only.
	s.SetHooks(Hooks{OnFree: c.hooks(w.pid()).OnFree})
	w.do(t, "a 7 100")
	w.do(t, "f")
	s.Flush()
	allocs, frees, _, _ = c.get()
	if len(allocs) != 0 || frees != 55+7 {
		t.Errorf("after clearing OnAlloc: allocs %v, frees %d", allocs, frees)
	}
	s.SetHooks(Hooks{})
	w.do(t, "a 1 100")
	s.Flush()
	if _, frees2, _, _ := c.get(); frees2 != 55+7 {
		t.Errorf("hooks still called after clearing")
	}
}

func TestNamesAcrossProcesses(t *testing.T) {
	requireEBPF(t)
	w := startStepper(t)
	file := filepath.Join(t.TempDir(), "t.hst")
	s, err := Start("Shared-Name", Properties{File: file}, []int{w.pid()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()

	r := fromAnotherProcess(t, "start", "shared-NAME")
	if r.Kind != "already_exists" || !strings.Contains(r.Err, fmt.Sprintf("pid %d", os.Getpid())) {
		t.Errorf("duplicate name from another process: %+v", r)
	}

	w.do(t, "a 10 200")
	r = fromAnotherProcess(t, "flush", "shared-name")
	if r.Err != "" || r.Status.Name != "Shared-Name" || r.Status.Owner != os.Getpid() ||
		len(r.Status.PIDs) != 1 || r.Status.PIDs[0] != w.pid() || r.Status.Stats.Delivered < 10 {
		t.Errorf("flush from another process: %+v", r)
	}
	r = fromAnotherProcess(t, "query", "SHARED-NAME")
	if r.Err != "" || r.Status.Stacks != DefaultStacks || r.Status.Protocol != ControlProtocol || r.Status.Files[0] != file {
		t.Errorf("query from another process: %+v", r)
	}
	r = fromAnotherProcess(t, "stop", "shared-name")
	if r.Err != "" {
		t.Fatalf("stop from another process: %+v", r)
	}
	select {
	case <-s.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("session still running after stop by name")
	}
	if st, err := os.Stat(file); err != nil || st.Size() == 0 {
		t.Errorf("trace file after stop: %v", err)
	}
	if r := fromAnotherProcess(t, "query", "shared-name"); r.Kind != "not_running" {
		t.Errorf("query after stop: %+v", r)
	}
	// The name is free again.
	s2, err := Start("shared-name", Properties{FileMode: RealTime}, []int{w.pid()})
	if err != nil {
		t.Fatalf("name not released: %v", err)
	}
	s2.Stop()
}

func TestUpdateAddsProcessesLive(t *testing.T) {
	requireEBPF(t)
	a, b, c := startStepper(t), startStepper(t), startStepper(t)
	s, err := Start("update-test", Properties{FileMode: RealTime}, []int{a.pid(), b.pid()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	var ca, cb, cc counter
	ha, hb, hc := ca.hooks(a.pid()), cb.hooks(b.pid()), cc.hooks(c.pid())
	s.SetHooks(Hooks{OnAlloc: func(call *Call) { ha.OnAlloc(call); hb.OnAlloc(call); hc.OnAlloc(call) }})

	a.do(t, "a 3 128")
	b.do(t, "a 4 128")
	c.do(t, "a 5 128") // not traced yet
	if r := fromAnotherProcess(t, "update-add", "update-test", fmt.Sprintf("HEAPSCOPE_TEST_PID=%d", c.pid())); r.Err != "" {
		t.Fatalf("update: %s", r.Err)
	}
	c.do(t, "a 6 128")
	s.Flush()
	for _, x := range []struct {
		name string
		c    *counter
		want int
	}{{"a", &ca, 3}, {"b", &cb, 4}, {"c", &cc, 6}} {
		if allocs, _, _, _ := x.c.get(); allocs[128] != x.want {
			t.Errorf("process %s: %d allocations of 128 bytes, want %d", x.name, allocs[128], x.want)
		}
	}
	if err := s.Update(Change{RemovePIDs: []int{a.pid()}}); err != nil {
		t.Fatal(err)
	}
	a.do(t, "a 9 128")
	s.Flush()
	if allocs, _, _, _ := ca.get(); allocs[128] != 3 {
		t.Errorf("removed process still traced: %d", allocs[128])
	}
	if err := s.Update(Change{AddPIDs: []int{1 << 30}}); !errors.Is(err, ErrNoSuchProcess) {
		t.Errorf("adding a missing pid: %v", err)
	}
}

func TestSessionEndsWhenTargetsExit(t *testing.T) {
	requireEBPF(t)
	w := startStepper(t)
	file := filepath.Join(t.TempDir(), "t.hst")
	s, err := Start("exit-test", Properties{File: file}, []int{w.pid()})
	if err != nil {
		t.Fatal(err)
	}
	w.do(t, "a 20 64")
	w.in.Close() // the workload exits
	select {
	case <-s.Done():
	case <-time.After(20 * time.Second):
		s.Stop()
		t.Fatal("session did not end when its process exited")
	}
	if err := s.Wait(); err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.Delivered < 20 {
		t.Errorf("delivered %d", st.Delivered)
	}
}

func TestKindSetJSON(t *testing.T) {
	k := event.KindsOf(event.KindFree)
	b, _ := json.Marshal(Change{Stacks: &k})
	var c Change
	if err := json.Unmarshal(b, &c); err != nil || *c.Stacks != k {
		t.Errorf("%s: %v", b, err)
	}
}
