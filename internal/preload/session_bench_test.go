//go:build linux && amd64

package preload

import (
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/internal/testutil"
	"github.com/heapscope/heapscope/tracefile"
)

// lockedSink stands for heapscope's session sink: a mutex in front of the
// trace writer.
type lockedSink struct {
	mu sync.Mutex
	w  *tracefile.Writer
}

// locked calls f with the writer's lock held.
func (s *lockedSink) locked(f func() error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return f()
}

func (s *lockedSink) Process(p event.Process) error {
	return s.locked(func() error { return s.w.Process(p) })
}
func (s *lockedSink) Exit(x event.Exit) error { return s.locked(func() error { return s.w.Exit(x) }) }
func (s *lockedSink) Module(m event.Module) error {
	return s.locked(func() error { return s.w.Module(m) })
}
func (s *lockedSink) Stack(st event.Stack) error {
	return s.locked(func() error { return s.w.Stack(st) })
}
func (s *lockedSink) Events(evs []event.Event) error {
	return s.locked(func() error { return s.w.Events(evs) })
}
func (s *lockedSink) Snapshot(sn event.Snapshot) error {
	return s.locked(func() error { return s.w.Snapshot(sn) })
}
func (s *lockedSink) Stats(st event.Stats) error {
	return s.locked(func() error { return s.w.Stats(st) })
}
func (s *lockedSink) Note(n event.Note) error {
	return s.locked(func() error { return s.w.Note(n) })
}

// processCPU returns the CPU time this process (every thread) has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkSession measures the tracer's own cost per event on the path of
// `heapscope run`: the churn workload traced by a Collector whose sink is a
// trace file Writer behind a mutex, one b.N = one malloc+free pair per
// thread. tracer-cpu-ns/event is this process's CPU time (the collector,
// the encoder, the compressor and the runtime) per event delivered;
// target-cpu-ns/pair is the workload's own CPU per pair (interposer
// included), ns/pair its wall time per pair and thread.
func BenchmarkSession(b *testing.B) {
	bin := testutil.MustBuild(b, "churn", testutil.Options{})
	for _, res := range []time.Duration{0, 1} {
		for _, threads := range []int{1, 2} {
			name := "res=default/threads=" + strconv.Itoa(threads)
			if res == 1 {
				name = "res=1ns/threads=" + strconv.Itoa(threads)
			}
			b.Run(name, func(b *testing.B) {
				path := filepath.Join(b.TempDir(), "s.hst")
				w, err := tracefile.Create(path, tracefile.Header{Session: "bench", Provider: "preload", Clock: "CLOCK_MONOTONIC"},
					tracefile.Options{TimeResolution: res})
				if err != nil {
					b.Fatal(err)
				}
				c, err := New(Config{}, &lockedSink{w: w})
				if err != nil {
					b.Fatal(err)
				}
				cmd := exec.Command(bin, strconv.Itoa(b.N), strconv.Itoa(threads))
				if err := c.Prepare(cmd); err != nil {
					b.Fatal(err)
				}
				b.ResetTimer()
				cpu := processCPU()
				out, err := cmd.Output()
				if err != nil {
					b.Fatal(err)
				}
				c.Exited(cmd.Process.Pid, 0, 0)
				if err := c.Close(); err != nil {
					b.Fatal(err)
				}
				if err := w.Close(); err != nil {
					b.Fatal(err)
				}
				cpu = processCPU() - cpu
				b.StopTimer()
				st := c.Stats()
				if st.Delivered < uint64(2*b.N*threads) {
					b.Fatalf("delivered %d events, want at least %d", st.Delivered, 2*b.N*threads)
				}
				ns, err := nsPerPair(out)
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(ns, "ns/pair")
				if v, err := churnValue(out, "cpu_ns_per_pair"); err == nil {
					b.ReportMetric(v, "target-cpu-ns/pair")
				}
				b.ReportMetric(float64(cpu.Nanoseconds())/float64(st.Delivered), "tracer-cpu-ns/event")
				b.ReportMetric(float64(w.Written())/float64(st.Delivered), "bytes/event")
				b.ReportMetric(0, "ns/op")
			})
		}
	}
}
