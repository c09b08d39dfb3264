package inject

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/heapscope/heapscope/internal/testutil"
)

// helperInject runs the helper that injects into pid (as another user when
// other; waiting timeout for a safe point, unless empty) and returns what
// it said.
func helperInject(t *testing.T, pid int, other bool, timeout string) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if other {
		self = testutil.SelfForOtherUser(t)
	}
	cmd := exec.Command(self, "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"=inject "+strconv.Itoa(pid)+" "+timeout)
	if other {
		testutil.AsOtherUser(t, cmd)
	}
	out, _ := cmd.CombinedOutput()
	return strings.TrimSpace(string(out))
}

// TestInjectRefuses: where injection is impossible or unsafe, Inject says
// why in one line, wraps the sentinel a program tests for, and leaves the
// process running as it was.
func TestInjectRefuses(t *testing.T) {
	musl := func(t *testing.T) string {
		cc := testutil.Tool(t, "musl-gcc")
		src, err := testutil.Source("inject_target", testutil.Options{})
		if err != nil {
			t.Fatal(err)
		}
		bin := filepath.Join(t.TempDir(), "inject_target_musl")
		if out, err := exec.Command(cc, "-O2", "-pthread", "-o", bin, src).CombinedOutput(); err != nil {
			t.Fatalf("musl-gcc: %v\n%s", err, out)
		}
		return bin
	}
	// start starts the target of a case; what it returns undoes what the
	// case did to it (a tracer, a stop), before the target is checked.
	type start func(t *testing.T) (*workload, func())
	plain := func(t *testing.T) (*workload, func()) {
		return startWorkload(t, 1, testutil.Options{}), func() {}
	}
	for _, c := range []struct {
		name    string
		start   start
		other   bool   // inject as another (unprivileged) user
		timeout string // the safe point's
		is, why string // the sentinel, words of the message
	}{
		{name: "static", is: "provider unavailable", why: "statically linked",
			start: func(t *testing.T) (*workload, func()) {
				return startWorkload(t, 1, testutil.Options{Static: true}), func() {}
			}},
		{name: "musl", is: "provider unavailable", why: "runs on musl",
			start: func(t *testing.T) (*workload, func()) { return startProgram(t, musl(t), "1"), func() {} }},
		{name: "seccomp", is: "provider unavailable", why: "seccomp filter",
			start: func(t *testing.T) (*workload, func()) {
				t.Setenv("INJECT_TARGET_SECCOMP", "1")
				return plain(t)
			}},
		{name: "traced", is: "cannot stop process", why: "already traced by",
			start: func(t *testing.T) (*workload, func()) {
				tg := startWorkload(t, 1, testutil.Options{})
				self, _ := os.Executable()
				cmd := exec.Command(self, "-test.run=^$")
				cmd.Env = append(os.Environ(), helperEnv+"=trace "+strconv.Itoa(tg.pid))
				out, _ := cmd.StdoutPipe()
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				done := false
				undo := func() {
					if !done {
						done = true
						cmd.Process.Kill()
						cmd.Wait()
					}
				}
				t.Cleanup(undo)
				if l, _ := bufio.NewReader(out).ReadString('\n'); !strings.HasPrefix(l, "traced") {
					t.Fatalf("tracer: %q", l)
				}
				return tg, undo
			}},
		{name: "job-stopped", is: "cannot stop process", why: "is stopped",
			start: func(t *testing.T) (*workload, func()) {
				tg := startWorkload(t, 1, testutil.Options{})
				syscall.Kill(tg.pid, syscall.SIGSTOP)
				for i := 0; i < 100 && !strings.Contains(status(tg.pid), "(stopped)"); i++ {
					time.Sleep(10 * time.Millisecond)
				}
				return tg, func() { syscall.Kill(tg.pid, syscall.SIGCONT) }
			}},
		{name: "other-user", other: true, is: "access denied", why: "not permitted",
			start: plain},
		// its only thread waits inside a dl_iterate_phdr callback, the
		// loader's lock held: never a safe point
		{name: "no-safe-point", timeout: "300ms", is: "cannot stop process", why: "reached no safe point in 300ms",
			start: func(t *testing.T) (*workload, func()) {
				tg := startWorkload(t, 0, testutil.Options{})
				if l := tg.say("hold"); l != "holding" {
					t.Fatalf("hold: %q", l)
				}
				return tg, func() {
					if l := tg.say("release"); l != "released" {
						t.Errorf("release: %q", l)
					}
				}
			}},
	} {
		t.Run(c.name, func(t *testing.T) {
			tg, undo := c.start(t)
			said := helperInject(t, tg.pid, c.other, c.timeout)
			t.Log(said)
			if !strings.HasPrefix(said, "error") || !strings.Contains(said, "["+c.is) && !strings.Contains(said, ","+c.is) || !strings.Contains(said, c.why) {
				t.Errorf("injecting: %q, want an error [%s] saying %q", said, c.is, c.why)
			}
			if strings.Contains(said, "\n") {
				t.Errorf("the error takes more than a line")
			}
			undo()
			untracedNow(t, tg.pid, c.name)
			if l := tg.say("burst 10"); l != "done" {
				t.Errorf("after the refusal the target says %q", l)
			}
			if c.name == "no-safe-point" {
				// and once released, injection works
				if said := helperInject(t, tg.pid, false, ""); said != "ok" {
					t.Errorf("after the release: %q", said)
				}
			}
		})
	}
}

func status(pid int) string {
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "State:") {
			return l
		}
	}
	return ""
}
