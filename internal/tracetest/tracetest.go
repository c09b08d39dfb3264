// Package tracetest records traces of the C workloads in testdata/workloads
// for the tests of the analysis side: the program runs under the preload
// provider into a trace file, as `heapscope run` makes one.
package tracetest

import (
	"errors"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/heapscope/heapscope/internal/preload"
	"github.com/heapscope/heapscope/tracefile"
)

// Record runs bin with args under the preload provider, writing the trace
// to path, and fails the test if the program does not exit 0.
func Record(tb testing.TB, path, bin string, args ...string) {
	tb.Helper()
	RecordSampled(tb, path, 0, bin, args...)
}

// RecordSampled is Record sampling one allocation per rate bytes on
// average (0: every event), as `heapscope run --sample` does.
func RecordSampled(tb testing.TB, path string, rate int64, bin string, args ...string) {
	tb.Helper()
	var ts unix.Timespec
	must(tb, unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts))
	w, err := tracefile.Create(path, tracefile.Header{Session: "test", Provider: "preload", Clock: "CLOCK_MONOTONIC",
		MonoStart: ts.Nano(), WallStart: time.Now(), SampleRate: rate}, tracefile.Options{})
	must(tb, err)
	c, err := preload.New(preload.Config{SampleRate: rate}, w)
	must(tb, err)
	cmd := exec.Command(bin, args...)
	must(tb, c.Prepare(cmd))
	out, err := cmd.Output()
	status, signal := 0, 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		ws := ee.Sys().(syscall.WaitStatus)
		status, signal = ws.ExitStatus(), int(ws.Signal())
		if !ws.Signaled() {
			signal = 0
		}
	} else if err != nil {
		tb.Fatal(err)
	}
	c.Exited(cmd.Process.Pid, status, signal)
	must(tb, c.Close())
	must(tb, w.Close())
	if status != 0 || signal != 0 {
		tb.Fatalf("%s exited %d, signal %d: %s", bin, status, signal, out)
	}
}

func must(tb testing.TB, err error) {
	tb.Helper()
	if err != nil {
		tb.Fatal(err)
	}
}
