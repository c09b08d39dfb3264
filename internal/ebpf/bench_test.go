package ebpf

import (
	"debug/elf"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

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
// workload's own wall-clock timing of its loop, cpu-ns/call its CPU time
// (steadier on a shared machine); it is the floor under the tracer's cost
// per call.
func BenchmarkTrap(b *testing.B) {
	bin := testutil.MustBuild(b, "ebpf_trap", testutil.Options{})
	for _, c := range []struct {
		name               string
		fn                 string
		enter, ex, session bool
	}{
		{"untraced", "trap_push", false, false, false},
		{"entry", "trap_push", true, false, false},
		{"return", "trap_push", false, true, false},
		{"entry+return", "trap_push", true, true, false},
		{"session", "trap_push", false, false, true},
		{"single-step", "trap_test", true, false, false},
	} {
		b.Run(c.name, func(b *testing.B) {
			testutil.SkipWithoutEBPF(b, Available())
			if c.session {
				testutil.SkipWithoutEBPF(b, haveUprobeSession())
			}
			objs := loadTrapForBench(b)
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
			if c.session {
				off, err := symbolOffset(bin, c.fn)
				if err != nil {
					b.Fatal(err)
				}
				l, err := uprobeSession(bin, objs.TrapSession, w.pid(), []uint64{off}, []uint64{0})
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { l.Close() })
			}
			b.ResetTimer()
			w.release(b)
			reportNs(b, w, "ns_per_call", "ns/call")
			reportNs(b, w, "cpu_ns_per_call", "cpu-ns/call")
		})
	}
}

// BenchmarkTracer measures the tracer on ebpf_churn (churn.c's loop of
// malloc of 16..527 bytes and free, timed by both the wall clock and the
// thread's CPU clock): ns per malloc+free pair, untraced,
// with empty programs where the tracer puts its probes (the floor: malloc's
// entry and return, as an entry and a return probe or as a session, and
// free's entry), and traced in each mode, in one run. The loop's stack is
// two frames deep; the depth-24 cases run it 24 frames of 200 bytes deeper,
// as in a larger program.
func BenchmarkTracer(b *testing.B) {
	bin := testutil.MustBuild(b, "ebpf_churn", testutil.Options{})
	for _, session := range []bool{false, true} {
		name := "floor"
		if session {
			name = "floor-session"
		}
		b.Run(name, func(b *testing.B) {
			testutil.SkipWithoutEBPF(b, Available())
			if session {
				testutil.SkipWithoutEBPF(b, haveUprobeSession())
			}
			w := startWorkloadNoReady(b, bin, strconv.Itoa(b.N), "1", "wait")
			attachFloor(b, w.pid(), session)
			b.ResetTimer()
			w.release(b)
			reportNs(b, w, "ns_per_pair", "ns/pair")
			reportNs(b, w, "cpu_ns_per_pair", "cpu-ns/pair")
		})
	}
	b.Run("untraced-while-another-is-traced", func(b *testing.B) {
		// Probes are per process: a process not traced does not trap,
		// even in the same libc.
		other := startWorkloadNoReady(b, bin, "1", "1", "wait")
		tr := newTracer(b, Config{Families: event.FamilyAll, Stacks: allStacks}, event.Discard)
		if err := tr.Attach(other.pid()); err != nil {
			b.Fatal(err)
		}
		w := startWorkloadNoReady(b, bin, strconv.Itoa(b.N), "1", "wait")
		b.ResetTimer()
		w.release(b)
		reportNs(b, w, "ns_per_pair", "ns/pair")
		reportNs(b, w, "cpu_ns_per_pair", "cpu-ns/pair")
	})
	// The same loop built without frame pointers, unwound with tables.
	noFP := testutil.MustBuild(b, "ebpf_churn", testutil.Options{NoFramePointers: true, Flags: []string{"-fno-optimize-sibling-calls"}})
	for _, c := range []struct {
		name  string
		cfg   *Config
		depth int  // frames above the loop's
		noFP  bool // the build without frame pointers
	}{
		{"untraced", nil, 0, false},
		{"stream/alloc-stacks", &Config{Mode: event.Stream}, 0, false},
		{"stream/alloc-stacks/depth-24", &Config{Mode: event.Stream}, 24, false},
		{"stream/no-stacks", &Config{Mode: event.Stream, Stacks: event.NoStacks}, 0, false},
		// Sampled in BPF: the traps remain, the stack walk and the ring
		// go (one pair in about 2000 at 512 KiB).
		{"stream/alloc-stacks/sample-512KiB", &Config{Mode: event.Stream, Sample: 512 << 10}, 0, false},
		{"stream/alloc-stacks/depth-24/sample-512KiB", &Config{Mode: event.Stream, Sample: 512 << 10}, 24, false},
		{"stream/alloc-stacks/sample-4KiB", &Config{Mode: event.Stream, Sample: 4 << 10}, 0, false},
		{"aggregate/alloc-stacks", &Config{Mode: event.Aggregate}, 0, false},
		{"aggregate/alloc-stacks/depth-24", &Config{Mode: event.Aggregate}, 24, false},
		// Sampled in aggregate mode: the tables see only the sampled
		// blocks, each weighed in BPF (smp_weights).
		{"aggregate/alloc-stacks/sample-512KiB", &Config{Mode: event.Aggregate, Sample: 512 << 10}, 0, false},
		{"aggregate/alloc-stacks/depth-24/sample-512KiB", &Config{Mode: event.Aggregate, Sample: 512 << 10}, 24, false},
		{"aggregate/alloc-stacks/sample-4KiB", &Config{Mode: event.Aggregate, Sample: 4 << 10}, 0, false},
		{"aggregate/no-stacks", &Config{Mode: event.Aggregate, Stacks: event.NoStacks}, 0, false},
		{"stream/alloc-stacks/depth-24/tables", &Config{Mode: event.Stream, UnwindTables: true}, 24, false},
		{"stream/alloc-stacks/depth-24/no-fp/tables", &Config{Mode: event.Stream, UnwindTables: true}, 24, true},
		{"aggregate/alloc-stacks/depth-24/no-fp/tables", &Config{Mode: event.Aggregate, UnwindTables: true}, 24, true},
	} {
		b.Run(c.name, func(b *testing.B) {
			bin := bin
			if c.noFP {
				bin = noFP
			}
			w := startWorkloadNoReady(b, bin, strconv.Itoa(b.N), "1", "wait", strconv.Itoa(c.depth))
			var tr *Tracer
			if c.cfg != nil {
				tr = newTracer(b, *c.cfg, event.Discard)
				if err := tr.Attach(w.pid()); err != nil {
					b.Fatal(err)
				}
			}
			report := func() {}
			if tr != nil && *bpfStats {
				report = bpfRuntime(b, tr.coll.Programs)
			}
			cpu0 := selfCPU()
			b.ResetTimer()
			w.release(b)
			reportNs(b, w, "ns_per_pair", "ns/pair")
			reportNs(b, w, "cpu_ns_per_pair", "cpu-ns/pair")
			report()
			if tr != nil {
				// What the consumer (this process) spent per call
				// delivered, on another CPU.
				if err := tr.Flush(); err != nil {
					b.Fatal(err)
				}
				st := tr.Stats()
				if st.Delivered > 0 && c.cfg.Mode == event.Stream {
					b.ReportMetric(float64(selfCPU()-cpu0)/float64(st.Delivered), "consumer-cpu-ns/event")
				}
				// What the probes handed on per pair: in stream mode
				// events through the ring (each a struct event and the
				// ring's 8-byte header), in aggregate mode calls
				// accounted in the tables.
				b.ReportMetric(float64(st.Delivered+st.TotalLost())/float64(b.N), "delivered/pair")
				if c.cfg.Mode == event.Stream {
					b.ReportMetric(float64((st.Delivered+st.TotalLost())*ringRecordSize)/float64(b.N), "ring-B/pair")
				}
			}
		})
	}
}

// ringRecordSize is what one event takes in the ring: a struct event and
// the ring's record header.
const ringRecordSize = uint64(unsafe.Sizeof(heapscopeEvent{})) + 8

// attachFloor puts empty programs where the tracer probes malloc (entry and
// return, or a session) and free (entry) in pid.
func attachFloor(b *testing.B, pid int, session bool) {
	objs := loadTrapForBench(b)
	tgs, err := findTargets(pid)
	if err != nil {
		b.Fatal(err)
	}
	n := 0
	for _, tg := range tgs {
		ex, err := link.OpenExecutable(tg.open)
		if err != nil {
			b.Fatal(err)
		}
		for _, s := range tg.sites {
			if s.Func != event.FuncMalloc && s.Func != event.FuncFree {
				continue
			}
			n++
			addrs := []uint64{s.ProbeOffset()}
			opts := &link.UprobeMultiOptions{PID: uint32(pid), Addresses: addrs}
			var ls []link.Link
			switch {
			case s.Func == event.FuncMalloc && session:
				l, err := uprobeSession(tg.open, objs.TrapSession, pid, addrs, []uint64{0})
				if err != nil {
					b.Fatal(err)
				}
				ls = append(ls, l)
			case s.Func == event.FuncMalloc:
				l, err := ex.UretprobeMulti(nil, objs.TrapExit, opts)
				if err != nil {
					b.Fatal(err)
				}
				ls = append(ls, l)
				fallthrough
			default:
				l, err := ex.UprobeMulti(nil, objs.TrapEnter, opts)
				if err != nil {
					b.Fatal(err)
				}
				ls = append(ls, l)
			}
			b.Cleanup(func() { closeLinks(ls) })
		}
	}
	if n != 2 {
		b.Fatalf("found %d of malloc and free", n)
	}
}

// loadTrapForBench loads the empty programs, without the session's where the
// kernel has no uprobe sessions.
func loadTrapForBench(b *testing.B) *trapObjects {
	b.Helper()
	spec, err := loadTrap()
	if err != nil {
		b.Fatal(err)
	}
	if haveUprobeSession() != nil {
		delete(spec.Programs, "trap_session")
	}
	var objs trapObjects
	if err := spec.LoadAndAssign(&objs, nil); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { objs.Close() })
	return &objs
}

// symbolOffset is the file offset of the function sym in the ELF file bin.
func symbolOffset(bin, sym string) (uint64, error) {
	f, err := elf.Open(bin)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		return 0, err
	}
	for _, s := range syms {
		if s.Name == sym {
			if off, ok := fileOffset(f, s.Value); ok {
				return off, nil
			}
		}
	}
	return 0, fmt.Errorf("%s: no function %s", bin, sym)
}

var bpfStats = flag.Bool("bpfstats", false, "BenchmarkTracer: report each BPF program's own run time (the kernel's statistics add to the cost per call)")

// bpfRuntime turns on the kernel's BPF run-time statistics and returns a
// function that reports, for each of progs that ran since, its own run time
// per run as bpf-ns/NAME, and its runs per malloc+free pair as
// runs/NAME: the programs' share of the cost per pair, apart from the
// traps. (The statistics add two clock reads to each run.)
func bpfRuntime(b *testing.B, progs map[string]*ebpf.Program) func() {
	b.Helper()
	st, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if err != nil {
		b.Fatalf("enabling BPF statistics: %v", err)
	}
	type sample struct {
		rt time.Duration
		n  uint64
	}
	read := func() map[string]sample {
		m := map[string]sample{}
		for name, p := range progs {
			s, err := p.Stats()
			if err != nil {
				b.Fatal(err)
			}
			m[name] = sample{s.Runtime, s.RunCount}
		}
		return m
	}
	before := read()
	return func() {
		after := read()
		st.Close()
		for name, a := range after {
			n := a.n - before[name].n
			if n == 0 {
				continue
			}
			b.ReportMetric(float64(a.rt-before[name].rt)/float64(n), "bpf-ns/"+name)
			b.ReportMetric(float64(n)/float64(b.N), "runs/"+name)
		}
	}
}

// selfCPU is this process's CPU time, user and system, in nanoseconds.
func selfCPU() int64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return ru.Utime.Nano() + ru.Stime.Nano()
}
