package inject

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/internal/errs"
	"github.com/heapscope/heapscope/internal/preload"
	"github.com/heapscope/heapscope/internal/testutil"
)

// helperEnv makes the test binary a helper:
//   - "kill PID POINT" injects into PID with a collector of its own and
//     kills itself (SIGKILL) at POINT;
//   - "inject PID [TIMEOUT]" injects (waiting up to TIMEOUT for a safe
//     point) and says how it went: "ok", or "error" and the sentinel
//     errors the error wraps;
//   - "trace PID" seizes thread PID, as a debugger would, and holds it.
const helperEnv = "HEAPSCOPE_INJECT_HELPER"

func TestMain(m *testing.M) {
	if h := os.Getenv(helperEnv); h != "" {
		os.Exit(helper(h))
	}
	testutil.Main(m)
}

func helper(h string) int {
	var mode, point string
	var pid int
	if n, _ := fmt.Sscanf(h, "%s %d %s", &mode, &pid, &point); n < 2 {
		fmt.Println("bad helper argument", h)
		return 2
	}
	switch mode {
	case "trace":
		runtime.LockOSThread()
		if err := unix.PtraceSeize(pid); err != nil {
			fmt.Println("error", err)
			return 1
		}
		fmt.Println("traced")
		select {}
	case "kill":
		testPoint = func(p string) {
			if p == point {
				fmt.Println("dying at", p)
				syscall.Kill(os.Getpid(), syscall.SIGKILL)
				select {}
			}
		}
	}
	c, err := preload.New(preload.Config{Unwind: event.UnwindFP}, newSink())
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	opt := Options{Serve: c.Serve}
	if mode == "inject" && point != "" {
		if opt.Timeout, err = time.ParseDuration(point); err != nil {
			fmt.Println("bad timeout", point)
			return 2
		}
	}
	_, err = Inject(pid, opt)
	if err != nil {
		var is []string
		for _, s := range []error{errs.ErrAccessDenied, errs.ErrCannotStop, errs.ErrUnavailable, errs.ErrNoSuchProcess} {
			if errors.Is(err, s) {
				is = append(is, s.Error())
			}
		}
		fmt.Printf("error [%s] %v\n", strings.Join(is, ","), err)
		return 1
	}
	if mode == "kill" {
		fmt.Println("not killed: no point", point)
		return 3
	}
	fmt.Println("ok")
	return 0
}

// sink keeps what a collector delivers.
type sink struct {
	mu     sync.Mutex
	procs  []event.Process
	exits  []event.Exit
	events []event.Event
	stacks map[uint64]event.Stack
	mods   []event.Module
	stats  event.Stats
	notes  []event.Note
}

func newSink() *sink { return &sink{stacks: map[uint64]event.Stack{}} }

func (s *sink) Process(p event.Process) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.procs = append(s.procs, p)
	return nil
}
func (s *sink) Exit(e event.Exit) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.exits = append(s.exits, e)
	return nil
}
func (s *sink) Module(m event.Module) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mods = append(s.mods, m)
	return nil
}
func (s *sink) Stack(st event.Stack) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stacks[uint64(st.PID)<<32|uint64(st.ID)] = st
	return nil
}
func (s *sink) Events(evs []event.Event) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.events = append(s.events, evs...)
	return nil
}
func (s *sink) Snapshot(event.Snapshot) error { return nil }
func (s *sink) Stats(st event.Stats) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stats = st
	return nil
}
func (s *sink) Note(n event.Note) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.notes = append(s.notes, n)
	return nil
}

func (s *sink) snapshot() []event.Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]event.Event(nil), s.events...)
}

// workload is a running inject_target.
type workload struct {
	t   testing.TB
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Reader
	pid int
}

func startWorkload(t testing.TB, threads int, o testutil.Options) *workload {
	t.Helper()
	bin := testutil.MustBuild(t, "inject_target", o)
	return startProgram(t, bin, fmt.Sprint(threads))
}

func startProgram(t testing.TB, bin string, args ...string) *workload {
	t.Helper()
	cmd := exec.Command(bin, args...)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	tg := &workload{t: t, cmd: cmd, in: in, out: bufio.NewReader(out), pid: cmd.Process.Pid}
	t.Cleanup(func() {
		tg.cmd.Process.Kill()
		tg.cmd.Wait()
	})
	tg.expect("ready")
	return tg
}

// say sends a command and returns the answer's line.
func (tg *workload) say(cmd string) string {
	tg.t.Helper()
	if _, err := fmt.Fprintln(tg.in, cmd); err != nil {
		tg.t.Fatalf("workload: %v", err)
	}
	return tg.line()
}

func (tg *workload) line() string {
	tg.t.Helper()
	type res struct {
		s   string
		err error
	}
	ch := make(chan res, 1)
	go func() {
		s, err := tg.out.ReadString('\n')
		ch <- res{s, err}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			tg.t.Fatalf("workload: %v (%q)", r.err, r.s)
		}
		return strings.TrimSpace(r.s)
	case <-time.After(60 * time.Second):
		tg.t.Fatal("workload does not answer")
	}
	return ""
}

func (tg *workload) expect(prefix string) string {
	tg.t.Helper()
	l := tg.line()
	if !strings.HasPrefix(l, prefix) {
		tg.t.Fatalf("workload said %q, want %q...", l, prefix)
	}
	return l
}

// collector starts a preload collector into s.
func collector(t testing.TB, s event.Sink, cfg preload.Config) *preload.Collector {
	t.Helper()
	c, err := preload.New(cfg, s)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func mustInject(t testing.TB, pid int, c *preload.Collector, o Options) *Result {
	t.Helper()
	o.Serve = c.Serve
	res, err := Inject(pid, o)
	if err != nil {
		t.Fatalf("Inject: %v", err)
	}
	return res
}

func mustEject(t testing.TB, pid int, o Options) *Result {
	t.Helper()
	res, err := Eject(pid, o)
	if err != nil {
		t.Fatalf("Eject: %v", err)
	}
	return res
}
