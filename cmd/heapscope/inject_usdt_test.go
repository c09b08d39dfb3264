package main

import (
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/heapscope/heapscope/internal/ebpf"
	"github.com/heapscope/heapscope/internal/testutil"
)

// TestEmitUSDTAttachInject: a running inject_target injected with `attach
// --inject --sample 1KiB --emit-usdt` is read through the injected
// interposer's otel_memory probes by `attach --source usdt` started after
// the injection: the two traces' estimates per function are equal within a
// byte per sample. A second injected session without --emit-usdt fires no
// probe, although the probes' semaphores are raised again.
func TestEmitUSDTAttachInject(t *testing.T) {
	testutil.SkipWithoutEBPF(t, ebpf.Available())
	t.Cleanup(testutil.Cleanup)
	bin := testutil.MustBuild(t, "inject_target", testutil.Options{})
	p := startInteractive(t, bin, "1")
	p.line() // ready
	pid := strconv.Itoa(p.cmd.Process.Pid)
	dir := t.TempDir()
	fns := []string{"leak_small", "leak_big", "kept"}

	// session is one injected session read by a usdt attach meanwhile:
	// both traces' allocated and live estimates per function.
	session := func(name string, flags ...string) (inj, att [2]map[string]uint64) {
		t.Helper()
		injTrace, attTrace := filepath.Join(dir, name+"-inject.hst"), filepath.Join(dir, name+"-usdt.hst")
		a := startAttach(t, append([]string{"--sample", "1KiB", "-q", "-o", injTrace, "-p", pid}, flags...)...)
		h := cli(t, "attach", "-q", "--source", "usdt", "--sample", "1KiB", "-o", attTrace, "-p", pid)
		var errb testutil.SyncBuffer
		h.Stderr = &errb
		rmust(t, h.Start())
		t.Cleanup(func() { h.Process.Kill(); h.Wait() })
		waitStderr(t, &errb, "tracing pid")
		if l := p.say("leak 3000"); l != "leaked" {
			t.Fatalf("target: %q", l)
		}
		time.Sleep(1500 * time.Millisecond) // the probes' events flushed
		rmust(t, h.Process.Signal(syscall.SIGINT))
		if err := h.Wait(); err != nil {
			t.Fatalf("attach --source usdt: %v: %s", err, errb.String())
		}
		a.stop()
		inj[0], inj[1] = siteTotals(t, injTrace, fns...)
		att[0], att[1] = siteTotals(t, attTrace, fns...)
		return inj, att
	}

	inj, att := session("emit", "--emit-usdt")
	for i, what := range []string{"allocated", "live"} {
		for _, fn := range fns {
			x, y := int64(inj[i][fn]), int64(att[i][fn])
			// A byte of rounding per sample: a sample stands for at
			// least 1 KiB here.
			if d := x - y; d < -x/1000-1 || d > x/1000+1 {
				t.Errorf("%s bytes of %s: the injected session estimates %d, the probes' reader %d", what, fn, x, y)
			}
		}
	}
	if inj[0]["leak_big"] == 0 || inj[1]["leak_big"] == 0 || inj[0]["kept"] == 0 {
		t.Errorf("nothing sampled: allocated %v, live %v", inj[0], inj[1])
	}
	t.Logf("injected: allocated %v, live %v; probes: allocated %v, live %v", inj[0], inj[1], att[0], att[1])

	inj, att = session("quiet")
	if inj[0]["leak_big"] == 0 {
		t.Errorf("second session: nothing sampled: %v", inj[0])
	}
	for _, m := range att {
		for fn, v := range m {
			if v != 0 {
				t.Errorf("a session without --emit-usdt: the probes' reader saw %d bytes in %s", v, fn)
			}
		}
	}
	if l := p.say("burst 100"); !strings.HasPrefix(l, "done") {
		t.Fatalf("target after the sessions: %q", l)
	}
}

// TestAttachEmitUSDTErrors: --emit-usdt on attach without --inject says
// that only the injected interposer fires the probes (not "--provider
// ebpf", which an attach user never typed); with --inject it still needs
// --sample.
func TestAttachEmitUSDTErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"attach", "--emit-usdt", "--sample", "1KiB", "-p", "1"}, "--emit-usdt: only heapscope's interposer fires the probes: attach --inject"},
		{[]string{"attach", "--inject", "--emit-usdt", "-p", "1"}, "--emit-usdt true with --sample 0"},
	} {
		code, stderr := exitCode(t, cli(t, c.args...))
		if code != 2 || !strings.Contains(stderr, c.want) || strings.Count(strings.TrimSpace(stderr), "\n") > 0 {
			t.Errorf("%q: exit %d, stderr %q; want exit 2 and one line with %q", c.args, code, stderr, c.want)
		}
	}
}
