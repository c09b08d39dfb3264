package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/internal/ebpf"
	"github.com/heapscope/heapscope/internal/registry"
	"github.com/heapscope/heapscope/internal/testutil"
	"github.com/heapscope/heapscope/tracefile"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// cliBinary builds the command once per test binary and returns its path.
func cliBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "heapscope-cli-")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "heapscope")
		out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput()
		if err != nil {
			buildErr = errors.New(string(out))
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// cli runs the built command with a private session registry.
func cli(t *testing.T, args ...string) *exec.Cmd {
	cmd := exec.Command(cliBinary(t), args...)
	cmd.Env = append(os.Environ(), registry.DirEnv+"="+registryDir(t))
	return cmd
}

var (
	regOnce sync.Once
	regDir  string
)

func registryDir(t *testing.T) string {
	regOnce.Do(func() {
		regDir, _ = os.MkdirTemp("", "heapscope-cli-registry-")
	})
	return regDir
}

// exitCode runs cmd and returns its exit status and standard error.
func exitCode(t *testing.T, cmd *exec.Cmd) (int, string) {
	t.Helper()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode(), stderr.String()
	}
	if err != nil {
		t.Fatal(err)
	}
	return 0, stderr.String()
}

// traceCounts replays a trace and counts allocations by size.
type countSink struct {
	event.Sink
	allocs map[uint64]int
	exits  []event.Exit
}

func (c *countSink) Events(evs []event.Event) error {
	for _, e := range evs {
		if e.Kind == event.KindAlloc {
			c.allocs[e.Size]++
		}
	}
	return nil
}

func (c *countSink) Exit(e event.Exit) error { c.exits = append(c.exits, e); return nil }

func readTrace(t *testing.T, path string) *countSink {
	t.Helper()
	r, err := tracefile.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	c := &countSink{Sink: event.Discard, allocs: map[uint64]int{}}
	if err := r.Replay(c, tracefile.Window{}); err != nil {
		t.Fatal(err)
	}
	if w := r.Warnings(); len(w) > 0 {
		t.Errorf("warnings reading %s: %q", path, w)
	}
	return c
}

func TestRunExitStatus(t *testing.T) {
	dir := t.TempDir()
	ctor := testutil.MustBuild(t, "session_ctor", testutil.Options{})
	for _, c := range []struct {
		args []string
		want int
	}{
		{[]string{ctor}, 0},
		{[]string{ctor, "exit", "7"}, 7},
		{[]string{"/bin/sh", "-c", "kill -KILL $$"}, 128 + 9},
	} {
		out := filepath.Join(dir, "t.hst")
		code, stderr := exitCode(t, cli(t, append([]string{"run", "-o", out, "--"}, c.args...)...))
		if code != c.want {
			t.Errorf("%q: exit %d, want %d\n%s", c.args, code, c.want, stderr)
		}
		if !strings.Contains(stderr, out) || !strings.Contains(stderr, "SUMMARY") || !strings.Contains(stderr, "peak heap") {
			t.Errorf("%q: no summary saying where the trace is:\n%s", c.args, stderr)
		}
		tr := readTrace(t, out)
		if len(tr.exits) == 0 {
			t.Errorf("%q: no exit record", c.args)
		} else if got := tr.exits[0].Status; int(got) != c.want {
			t.Errorf("%q: exit record status %d, want %d", c.args, got, c.want)
		}
		if c.args[0] == ctor && (tr.allocs[7777] != 1 || tr.allocs[4321] != 10) {
			t.Errorf("%q: allocations by size %v; want the constructor's 7777 once and 4321 ten times", c.args, tr.allocs)
		}
	}
}

func TestRunEBPFSeesConstructor(t *testing.T) {
	testutil.SkipWithoutEBPF(t, ebpf.Available())
	out := filepath.Join(t.TempDir(), "t.hst")
	ctor := testutil.MustBuild(t, "session_ctor", testutil.Options{})
	code, stderr := exitCode(t, cli(t, "run", "-q", "--provider", "ebpf", "-o", out, "--", ctor, "exit", "3"))
	if code != 3 {
		t.Fatalf("exit %d, want 3: %s", code, stderr)
	}
	tr := readTrace(t, out)
	if tr.allocs[7777] != 1 || tr.allocs[4321] != 10 {
		t.Errorf("allocations by size %v; want the constructor's 7777 once and 4321 ten times", tr.allocs)
	}
	if len(tr.exits) != 1 || tr.exits[0].Status != 3 {
		t.Errorf("exit records %+v", tr.exits)
	}
}

// runSleeping starts the CLI with args, which run session_ctor's sleep, and
// returns once the workload says it sleeps; the process is killed at the
// end of the test if it still runs.
func runSleeping(t *testing.T, args ...string) (*exec.Cmd, *bytes.Buffer) {
	t.Helper()
	cmd := cli(t, args...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := new(bytes.Buffer)
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
	if line, _ := bufio.NewReader(stdout).ReadString('\n'); line != "sleeping\n" {
		t.Fatalf("workload said %q", line)
	}
	return cmd, stderr
}

func TestRunInterrupted(t *testing.T) {
	out := filepath.Join(t.TempDir(), "t.hst")
	ctor := testutil.MustBuild(t, "session_ctor", testutil.Options{})
	cmd, stderr := runSleeping(t, "run", "-q", "-o", out, "--", ctor, "sleep")
	// Not from a terminal: heapscope forwards the signal to the program.
	cmd.Process.Signal(syscall.SIGINT)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		cmd.Process.Kill()
		t.Fatal("heapscope run did not end after SIGINT")
	}
	if code := cmd.ProcessState.ExitCode(); code != 128+int(syscall.SIGINT) {
		t.Errorf("exit %d, want %d: %s", code, 128+int(syscall.SIGINT), stderr.String())
	}
	tr := readTrace(t, out)
	if tr.allocs[7777] != 1 || tr.allocs[4321] != 10 {
		t.Errorf("allocations by size %v", tr.allocs)
	}
	if len(tr.exits) != 1 || tr.exits[0].Signal != int32(syscall.SIGINT) {
		t.Errorf("exit records %+v", tr.exits)
	}
}

func TestRunErrors(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"run", "--", "/no/such/program"}, 127, "no such file"},
		{[]string{"run"}, 2, "no program"},
		{[]string{"run", "--unwind", "sideways", "--", "true"}, 2, "--unwind"},
		{[]string{"run", "--log-mode", "circular", "-o", filepath.Join(dir, "c.hst"), "--", "true"}, 2, "--max-size"},
		{[]string{"run", "--provider", "ebpf", "--on-full", "block", "--", "true"}, 2, "--on-full block with --provider ebpf"},
		{[]string{"attach", "--unwind", "sideways", "-p", "1"}, 2, "--unwind"},
		{[]string{"attach", "--source", "dtrace", "-p", "1"}, 2, "--source"},
		{[]string{"attach", "--source", "usdt", "-p", "1"}, 2, "--source usdt with --sample 0: the probes' samples are estimates"},
		{[]string{"run", "--export", "otlp=ftp://h:1", "--", "true"}, 2, `--export otlp=ftp://h:1: scheme "ftp"`},
		{[]string{"attach", "--export", "h:4318", "-p", "1"}, 2, `--export h:4318: want FORMAT=URL`},
		{[]string{"run", "--export", "otlp=http://h:1", "--export-interval", "100ms", "--", "true"}, 2, "--export-interval 100ms: must be at least 1s"},
		{[]string{"run", "--export-addresses", "--", "true"}, 2, "--export-addresses true: without an export target"},
		{[]string{"run", "--emit-usdt", "--", "true"}, 2, "--emit-usdt true with --sample 0: the otel_memory probes fire for sampled blocks only"},
		{[]string{"run", "--emit-usdt", "--sample", "1KiB", "--provider", "ebpf", "--", "true"}, 2, "--emit-usdt true with --provider ebpf"},
		{[]string{"run", "--bogus", "--", "true"}, 2, "bogus"},
		{[]string{"attach"}, 2, "-p"},
		{[]string{"attach", "-p", "1073741824", "-o", filepath.Join(dir, "a.hst")}, 1, "no such process"},
		{[]string{"stop", "no-such-session"}, 1, "no such session"},
	} {
		code, stderr := exitCode(t, cli(t, c.args...))
		if code != c.code || !strings.Contains(stderr, c.want) {
			t.Errorf("%q: exit %d (want %d), stderr %q (want %q)", c.args, code, c.code, stderr, c.want)
		}
		if n := strings.Count(strings.TrimSpace(stderr), "\n"); n > 0 {
			t.Errorf("%q: a %d-line error, want one line: %q", c.args, n+1, stderr)
		}
	}
}

func TestRunNameInUse(t *testing.T) {
	dir := t.TempDir()
	ctor := testutil.MustBuild(t, "session_ctor", testutil.Options{})
	first := cli(t, "run", "-q", "--name", "Busy", "-o", filepath.Join(dir, "1.hst"), "--", ctor, "sleep")
	stdout, _ := first.StdoutPipe()
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	defer first.Process.Kill()
	bufio.NewReader(stdout).ReadString('\n')
	code, stderr := exitCode(t, cli(t, "run", "--name", "busy", "-o", filepath.Join(dir, "2.hst"), "--", "true"))
	if code != 1 || !strings.Contains(stderr, "already in use") || !strings.Contains(stderr, "pid") {
		t.Errorf("second session with the name: exit %d, %q", code, stderr)
	}
	var out bytes.Buffer
	q := cli(t, "sessions")
	q.Stdout = &out
	if err := q.Run(); err != nil || !strings.Contains(out.String(), "Busy") {
		t.Errorf("sessions: %v\n%s", err, out.String())
	}
	// Stopping by name ends tracing; the program runs on untraced.
	if code, stderr := exitCode(t, cli(t, "stop", "BUSY")); code != 0 {
		t.Errorf("stop: %d %s", code, stderr)
	}
	first.Process.Signal(syscall.SIGTERM)
	first.Wait()
	tr := readTrace(t, filepath.Join(dir, "1.hst"))
	if tr.allocs[4321] != 10 {
		t.Errorf("allocations by size %v", tr.allocs)
	}
}

// TestRunStoppedByName stops a run's session by name: the trace is
// complete, the program runs on untraced, and heapscope waits for it (still
// forwarding signals) to exit with its status.
func TestRunStoppedByName(t *testing.T) {
	out := filepath.Join(t.TempDir(), "t.hst")
	ctor := testutil.MustBuild(t, "session_ctor", testutil.Options{})
	name := fmt.Sprintf("stopped-by-name-%d", os.Getpid())
	cmd, stderr := runSleeping(t, "run", "-q", "--name", name, "-o", out, "--", ctor, "sleep")
	if out, err := cli(t, "stop", name).CombinedOutput(); err != nil {
		t.Fatalf("stop: %v: %s", err, out)
	}
	tr := readTrace(t, out) // complete once stop returns
	if tr.allocs[7777] != 1 || tr.allocs[4321] != 10 {
		t.Errorf("allocations by size %v", tr.allocs)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
		t.Fatalf("heapscope run ended with its program still running: %s", stderr.String())
	case <-time.After(300 * time.Millisecond):
	}
	cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("heapscope run did not end after SIGINT")
	}
	if code := cmd.ProcessState.ExitCode(); code != 128+int(syscall.SIGINT) || !strings.Contains(stderr.String(), "runs on untraced") {
		t.Errorf("exit %d, want %d, and a word that the program runs on: %s", code, 128+int(syscall.SIGINT), stderr.String())
	}
}
