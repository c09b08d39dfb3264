// Command bench measures heapscope's cost per malloc+free pair against an
// untraced run and heaptrack, in one run, interleaved, over several
// repetitions, and writes the medians to bench/RESULTS.md.
//
//	go run ./bench [-n 2000000] [-reps 5] [-threads 1,2] [-modes all] [-o bench/RESULTS.md]
//
// See bench/README.md.
package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/heapscope/heapscope/bench/internal/benchutil"

	"github.com/heapscope/heapscope/internal/testutil"
)

// A mode is one way of running the churn workload.
type mode struct {
	name string
	// run runs the workload (bin with args) under this mode and returns its
	// standard output and the CPU time, in ns, of the processes the mode
	// started (the tracer with everything it waited for: the workload too,
	// unless the tracer attached to it).
	run func(env *benchEnv, args []string) (out []byte, cpu float64, err error)
}

// output runs cmd and returns its standard output and the CPU time (user
// and system, in ns) of it and of the children it waited for.
func output(cmd *exec.Cmd) ([]byte, float64, error) {
	out, err := cmd.Output()
	return out, cpuNs(cmd.ProcessState), err
}

func cpuNs(ps *os.ProcessState) float64 {
	if ps == nil {
		return 0
	}
	return float64(ps.UserTime()+ps.SystemTime()) / float64(time.Nanosecond)
}

// benchEnv is what modes share: built binaries and a scratch directory.
type benchEnv struct {
	churn     string // the workload, with frame pointers
	heapscope string // the heapscope binary
	tmp       string
	// afterReady leaves out of an attach's CPU what the tracer spent
	// before its session was up (the probes, the census): the cost of
	// the pairs alone.
	afterReady bool
}

var modes = []mode{
	{"untraced", func(e *benchEnv, args []string) ([]byte, float64, error) {
		return output(exec.Command(e.churn, args...))
	}},
	{"heaptrack", func(e *benchEnv, args []string) ([]byte, float64, error) {
		out := filepath.Join(e.tmp, "heaptrack")
		defer benchutil.RemoveGlob(out + "*")
		return output(exec.Command("heaptrack", append([]string{"-o", out, e.churn}, args...)...))
	}},
	{"heapscope run (preload, default: tables)", func(e *benchEnv, args []string) ([]byte, float64, error) {
		return e.run(args)
	}},
	{"heapscope run (preload, fp)", func(e *benchEnv, args []string) ([]byte, float64, error) {
		return e.run(args, "--unwind", "fp")
	}},
	{"heapscope run (preload, dwarf)", func(e *benchEnv, args []string) ([]byte, float64, error) {
		return e.run(args, "--unwind", "dwarf")
	}},
	{"heapscope run (preload, --sample 512KiB)", func(e *benchEnv, args []string) ([]byte, float64, error) {
		return e.run(args, "--sample", "512KiB")
	}},
	// jemalloc's own sampled heap profiler, for side by side with sampling
	// mode: the same workload under jemalloc, without and with profiling at
	// one sample per 2^19 bytes (512 KiB) on average.
	{"jemalloc (untraced)", func(e *benchEnv, args []string) ([]byte, float64, error) {
		return e.jemalloc(args, "")
	}},
	{"jemalloc prof (lg_prof_sample:19)", func(e *benchEnv, args []string) ([]byte, float64, error) {
		return e.jemalloc(args, "prof:true,lg_prof_sample:19")
	}},
	{"heapscope attach (ebpf, stream)", func(e *benchEnv, args []string) ([]byte, float64, error) {
		return e.attach(args, "--mode", "stream")
	}},
	{"heapscope attach (ebpf, aggregate)", func(e *benchEnv, args []string) ([]byte, float64, error) {
		return e.attach(args, "--mode", "aggregate")
	}},
	// Against the stream mode above, which takes a census of the heap at
	// the attach (before the workload starts its pairs): what the census
	// leaves behind costs the pairs after it nothing.
	{"heapscope attach (ebpf, stream, --no-census)", func(e *benchEnv, args []string) ([]byte, float64, error) {
		return e.attach(args, "--mode", "stream", "--no-census")
	}},
}

// jemallocLib is Debian's libjemalloc2, built with profiling (config.prof).
const jemallocLib = "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"

// jemalloc runs the workload with jemalloc preloaded and MALLOC_CONF conf.
func (e *benchEnv) jemalloc(args []string, conf string) ([]byte, float64, error) {
	cmd := exec.Command(e.churn, args...)
	cmd.Env = append(os.Environ(), "LD_PRELOAD="+jemallocLib, "MALLOC_CONF="+conf)
	cmd.Dir = e.tmp // where a profile dump would go
	return output(cmd)
}

// run traces the workload with `heapscope run`.
func (e *benchEnv) run(args []string, flags ...string) ([]byte, float64, error) {
	out := filepath.Join(e.tmp, "run.hst")
	defer os.Remove(out)
	argv := append([]string{"run", "-q", "-o", out}, flags...)
	argv = append(append(argv, "--", e.churn), args...)
	return output(exec.Command(e.heapscope, argv...))
}

// attach starts the workload waiting on its stdin, attaches `heapscope
// attach` to it, waits until the session is live, then lets the workload run.
// The CPU time returned is the workload's and the tracer's.
func (e *benchEnv) attach(args []string, flags ...string) ([]byte, float64, error) {
	out := filepath.Join(e.tmp, "attach.hst")
	defer os.Remove(out)
	w := exec.Command(e.churn, append(args, "wait")...)
	stdin, err := w.StdinPipe()
	if err != nil {
		return nil, 0, err
	}
	var stdout bytes.Buffer
	w.Stdout = &stdout
	if err := w.Start(); err != nil {
		return nil, 0, err
	}
	defer w.Process.Kill()
	name := fmt.Sprintf("bench-%d", w.Process.Pid)
	argv := append([]string{"attach", "-q", "--name", name, "-o", out, "-p", strconv.Itoa(w.Process.Pid)}, flags...)
	tracer := exec.Command(e.heapscope, argv...)
	var tracerErr syncBuffer
	tracer.Stderr = &tracerErr
	if err := tracer.Start(); err != nil {
		return nil, 0, err
	}
	defer tracer.Process.Kill()
	for i := 0; ; i++ {
		// The session answers queries while its census is taken; it says
		// it traces once the census is done.
		if strings.Contains(tracerErr.String(), "tracing pid") && exec.Command(e.heapscope, "query", name).Run() == nil {
			break
		}
		if i == 1500 {
			return nil, 0, fmt.Errorf("session never came up: %s", tracerErr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	var setup float64
	if e.afterReady {
		setup = procCPUNs(tracer.Process.Pid)
	}
	stdin.Write([]byte{'\n'})
	stdin.Close()
	if err := w.Wait(); err != nil {
		return nil, 0, err
	}
	if err := tracer.Wait(); err != nil {
		return nil, 0, fmt.Errorf("heapscope attach: %v: %s", err, tracerErr.String())
	}
	return stdout.Bytes(), cpuNs(w.ProcessState) + cpuNs(tracer.ProcessState) - setup, nil
}

// procCPUNs is the CPU time process pid has used so far (utime + stime of
// /proc/PID/stat, in clock ticks of 10 ms), in ns.
func procCPUNs(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) * 1e7
}

// syncBuffer is a bytes.Buffer safe for a writer and a reader at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// afterReady is -after-ready.
var afterReady bool

func main() {
	n := flag.Int("n", 2_000_000, "malloc+free pairs per thread and run")
	reps := flag.Int("reps", 5, "repetitions of each measurement")
	threadList := flag.String("threads", "1,2", "comma-separated thread counts")
	only := flag.String("modes", "all", "comma-separated modes to run, or all")
	outFile := flag.String("o", "bench/RESULTS.md", "results file to write ('' for none)")
	bin := flag.String("heapscope", "", "a heapscope binary to measure instead of building ./cmd/heapscope (to compare two builds, run them in turn)")
	flag.BoolVar(&afterReady, "after-ready", false, "attach modes: leave out the tracer's CPU before its session was up (probes, census)")
	flag.Parse()

	if err := run(*n, *reps, *threadList, *only, *outFile, *bin); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run(n, reps int, threadList, only, outFile, bin string) error {
	var threads []int
	for _, s := range strings.Split(threadList, ",") {
		t, err := strconv.Atoi(s)
		if err != nil || t <= 0 {
			return fmt.Errorf("bad thread count %q", s)
		}
		threads = append(threads, t)
	}
	selected := modes
	if only != "all" {
		selected = nil
		for _, name := range splitModes(only) {
			found := false
			for _, m := range modes {
				if m.name == name {
					selected = append(selected, m)
					found = true
				}
			}
			if !found {
				return fmt.Errorf("unknown mode %q", name)
			}
		}
	}

	tmp, err := os.MkdirTemp("", "heapscope-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	defer testutil.Cleanup()
	env := &benchEnv{tmp: tmp, afterReady: afterReady}
	if env.churn, err = testutil.Build("churn", testutil.Options{}); err != nil {
		return err
	}
	if bin != "" {
		if env.heapscope, err = filepath.Abs(bin); err != nil {
			return err
		}
	} else {
		env.heapscope = filepath.Join(tmp, "heapscope")
		if err := benchutil.BuildHeapscope(env.heapscope); err != nil {
			return err
		}
	}

	// samples[mode][threads] holds one measurement per repetition.
	samples := map[string]map[int][]sample{}
	for _, m := range selected {
		samples[m.name] = map[int][]sample{}
	}
	for r := 0; r < reps; r++ {
		for _, t := range threads {
			for _, m := range selected {
				out, cpu, err := m.run(env, []string{strconv.Itoa(n), strconv.Itoa(t)})
				if err != nil {
					return fmt.Errorf("%s, %d threads: %w", m.name, t, err)
				}
				s, err := parseChurn(out)
				if err != nil {
					return fmt.Errorf("%s, %d threads: %w", m.name, t, err)
				}
				// What the tracer spent: all the CPU the mode's processes
				// used but the workload's own (its interposer included),
				// per event (a malloc and a free per pair).
				s.tracerCPU = max(cpu-s.totalCPU, 0) / float64(2*n*t)
				samples[m.name][t] = append(samples[m.name][t], s)
				fmt.Fprintf(os.Stderr, "rep %d/%d  %-34s %d thr  %8.1f ns/pair  %6.1f cpu-ns/pair  %6.1f tracer-cpu-ns/event\n",
					r+1, reps, m.name, t, s.ns, s.cpu, s.tracerCPU)
			}
		}
	}

	var table bytes.Buffer
	writeTable(&table, selected, threads, samples)
	os.Stdout.Write(table.Bytes())
	if outFile == "" {
		return nil
	}
	var doc bytes.Buffer
	fmt.Fprintf(&doc, "# Benchmark results\n\nWritten by `go run ./bench -n %d -reps %d -threads %s -modes %s`.\n\n", n, reps, threadList, only)
	fmt.Fprintf(&doc, "- date: %s\n", time.Now().UTC().Format("2006-01-02 15:04 UTC"))
	fmt.Fprintf(&doc, "- machine: %s\n", benchutil.Machine())
	fmt.Fprintf(&doc, "- workload: `churn N T`: N pairs of malloc(16..527)+free in each of T threads; the workload times its own loop\n")
	fmt.Fprintf(&doc, "- target CPU: the workload's CPU time (all threads, interposer included) in its timed loop, per pair; "+
		"the same at 1 and 2 threads means the traced threads do not slow each other down\n")
	fmt.Fprintf(&doc, "- tracer CPU: the CPU time of every process the mode started but the workload, per event (2 per pair)\n\n")
	doc.Write(table.Bytes())
	return os.WriteFile(outFile, doc.Bytes(), 0o644)
}

// A sample is one run's measurements.
type sample struct {
	ns        float64 // wall ns per pair, per thread
	cpu       float64 // the workload's CPU ns per pair in its timed loop
	totalCPU  float64 // the workload's CPU ns, start to end
	tracerCPU float64 // the tracer's CPU ns per event
}

// medianOf returns the median of one field over samples.
func medianOf(ss []sample, field func(sample) float64) float64 {
	xs := make([]float64, len(ss))
	for i, s := range ss {
		xs[i] = field(s)
	}
	return benchutil.Median(xs)
}

// writeTable prints medians and ratios as a Markdown table.
func writeTable(w io.Writer, selected []mode, threads []int, samples map[string]map[int][]sample) {
	ns := func(s sample) float64 { return s.ns }
	fmt.Fprintf(w, "| mode | threads | median ns/pair | overhead ns/pair | × heaptrack (time) | × heaptrack (overhead) | target CPU ns/pair | tracer CPU ns/event |\n")
	fmt.Fprintf(w, "|---|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, t := range threads {
		base := medianOf(samples["untraced"][t], ns)
		ht := medianOf(samples["heaptrack"][t], ns)
		for _, m := range selected {
			ss := samples[m.name][t]
			med := medianOf(ss, ns)
			fmt.Fprintf(w, "| %s | %d | %.1f | %s | %s | %s | %.1f | %.1f |\n", m.name, t, med,
				fmtOpt(med-base, base > 0), fmtRatio(med, ht), fmtRatio(med-base, ht-base),
				medianOf(ss, func(s sample) float64 { return s.cpu }),
				medianOf(ss, func(s sample) float64 { return s.tracerCPU }))
		}
	}
}

func fmtOpt(v float64, ok bool) string {
	if !ok {
		return "–"
	}
	return fmt.Sprintf("%.1f", v)
}

func fmtRatio(a, b float64) string {
	if b <= 0 {
		return "–"
	}
	return fmt.Sprintf("%.3f", a/b)
}

// splitModes splits a comma-separated list of mode names, leaving alone
// the commas inside a name's parentheses ("heapscope run (preload, fp)").
func splitModes(list string) []string {
	var names []string
	depth, start := 0, 0
	for i, c := range list {
		switch c {
		case '(':
			depth++
		case ')':
			depth--
		case ',':
			if depth == 0 {
				names = append(names, strings.TrimSpace(list[start:i]))
				start = i + 1
			}
		}
	}
	return append(names, strings.TrimSpace(list[start:]))
}

// parseChurn reads churn's output: ns_per_pair, cpu_ns_per_pair and
// cpu_total_ns.
func parseChurn(out []byte) (sample, error) {
	var s sample
	fields := map[string]*float64{"ns_per_pair": &s.ns, "cpu_ns_per_pair": &s.cpu, "cpu_total_ns": &s.totalCPU}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 2 || fields[f[0]] == nil {
			continue
		}
		v, err := strconv.ParseFloat(f[1], 64)
		if err != nil {
			return s, fmt.Errorf("%s: %w", f[0], err)
		}
		*fields[f[0]] = v
		delete(fields, f[0])
	}
	if len(fields) > 0 {
		return s, fmt.Errorf("churn's output %q lacks %d of its 3 lines", out, len(fields))
	}
	return s, nil
}
