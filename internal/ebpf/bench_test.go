package ebpf

import (
	"strconv"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/internal/testutil"
)

// reportNs reads the workload's "KEY ns" line and reports it as a metric.
func reportNs(b *testing.B, w *workload, key, unit string) {
	b.Helper()
	line := w.expect(b, key)
	ns, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimPrefix(line, key)), 64)
	if err != nil {
		b.Fatalf("bad line %q", line)
	}
	b.ReportMetric(ns, unit)
}

// BenchmarkTrap measures bare uprobes: empty BPF programs on a function
// whose first instruction the kernel emulates (push %rbp), as an entry
// probe, a return probe and both (one trap at the entry serves both), and
// on one it single-steps (test %rdi,%rdi). The ns/call metric is the
// workload's own timing of its loop; it is the floor under the tracer's
// cost per call.
func BenchmarkTrap(b *testing.B) {
	bin := testutil.MustBuild(b, "ebpf_trap", testutil.Options{})
	for _, c := range []struct {
		name      string
		fn        string
		enter, ex bool
	}{
		{"untraced", "trap_push", false, false},
		{"entry", "trap_push", true, false},
		{"return", "trap_push", false, true},
		{"entry+return", "trap_push", true, true},
		{"single-step", "trap_test", true, false},
	} {
		b.Run(c.name, func(b *testing.B) {
			testutil.SkipWithoutEBPF(b, Available())
			var objs trapObjects
			if err := loadTrapObjects(&objs, nil); err != nil {
				b.Fatal(err)
			}
			defer objs.Close()
			w := startWorkload(b, bin, strings.TrimPrefix(c.fn, "trap_"), strconv.Itoa(b.N), "wait")
			ex, err := link.OpenExecutable(bin)
			if err != nil {
				b.Fatal(err)
			}
			opts := &link.UprobeMultiOptions{PID: uint32(w.pid())}
			attach := func(prog *ebpf.Program, ret bool) {
				var l link.Link
				var err error
				if ret {
					l, err = ex.UretprobeMulti([]string{c.fn}, prog, opts)
				} else {
					l, err = ex.UprobeMulti([]string{c.fn}, prog, opts)
				}
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { l.Close() })
			}
			if c.enter {
				attach(objs.TrapEnter, false)
			}
			if c.ex {
				attach(objs.TrapExit, true)
			}
			b.ResetTimer()
			w.release(b)
			reportNs(b, w, "ns_per_call", "ns/call")
		})
	}
}

// BenchmarkTracer measures the tracer on the churn workload (malloc of
// 16..527 bytes and free, in a loop): ns per malloc+free pair, untraced
// and traced in each mode, in one run.
func BenchmarkTracer(b *testing.B) {
	bin := testutil.MustBuild(b, "churn", testutil.Options{})
	for _, c := range []struct {
		name string
		cfg  *Config
	}{
		{"untraced", nil},
		{"stream/alloc-stacks", &Config{Mode: Stream}},
		{"stream/no-stacks", &Config{Mode: Stream, Stacks: NoStacks}},
		{"aggregate/alloc-stacks", &Config{Mode: Aggregate}},
		{"aggregate/no-stacks", &Config{Mode: Aggregate, Stacks: NoStacks}},
	} {
		b.Run(c.name, func(b *testing.B) {
			w := startWorkloadNoReady(b, bin, strconv.Itoa(b.N), "1", "wait")
			if c.cfg != nil {
				tr := newTracer(b, *c.cfg, event.Discard)
				if err := tr.Attach(w.pid()); err != nil {
					b.Fatal(err)
				}
			}
			b.ResetTimer()
			w.release(b)
			reportNs(b, w, "ns_per_pair", "ns/pair")
		})
	}
}
