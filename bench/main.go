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
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/heapscope/heapscope/internal/testutil"
)

// A mode is one way of running the churn workload.
type mode struct {
	name string
	// start runs the workload (bin with args) under this mode and returns its
	// standard output.
	run func(env *benchEnv, args []string) ([]byte, error)
}

// benchEnv is what modes share: built binaries and a scratch directory.
type benchEnv struct {
	churn     string // the workload, with frame pointers
	heapscope string // the heapscope binary
	tmp       string
}

var modes = []mode{
	{"untraced", func(e *benchEnv, args []string) ([]byte, error) {
		return exec.Command(e.churn, args...).Output()
	}},
	{"heaptrack", func(e *benchEnv, args []string) ([]byte, error) {
		out := filepath.Join(e.tmp, "heaptrack")
		defer removeGlob(out + "*")
		return exec.Command("heaptrack", append([]string{"-o", out, e.churn}, args...)...).Output()
	}},
	{"heapscope run (preload, fp)", func(e *benchEnv, args []string) ([]byte, error) {
		return e.run(args, "--unwind", "fp")
	}},
	{"heapscope run (preload, dwarf)", func(e *benchEnv, args []string) ([]byte, error) {
		return e.run(args, "--unwind", "dwarf")
	}},
	{"heapscope attach (ebpf, stream)", func(e *benchEnv, args []string) ([]byte, error) {
		return e.attach(args, "--mode", "stream")
	}},
	{"heapscope attach (ebpf, aggregate)", func(e *benchEnv, args []string) ([]byte, error) {
		return e.attach(args, "--mode", "aggregate")
	}},
}

// run traces the workload with `heapscope run`.
func (e *benchEnv) run(args []string, flags ...string) ([]byte, error) {
	out := filepath.Join(e.tmp, "run.hst")
	defer os.Remove(out)
	argv := append([]string{"run", "-q", "-o", out}, flags...)
	argv = append(append(argv, "--", e.churn), args...)
	return exec.Command(e.heapscope, argv...).Output()
}

// attach starts the workload waiting on its stdin, attaches `heapscope
// attach` to it, waits until the session is live, then lets the workload run.
func (e *benchEnv) attach(args []string, flags ...string) ([]byte, error) {
	out := filepath.Join(e.tmp, "attach.hst")
	defer os.Remove(out)
	w := exec.Command(e.churn, append(args, "wait")...)
	stdin, err := w.StdinPipe()
	if err != nil {
		return nil, err
	}
	var stdout bytes.Buffer
	w.Stdout = &stdout
	if err := w.Start(); err != nil {
		return nil, err
	}
	defer w.Process.Kill()
	name := fmt.Sprintf("bench-%d", w.Process.Pid)
	argv := append([]string{"attach", "-q", "--name", name, "-o", out, "-p", strconv.Itoa(w.Process.Pid)}, flags...)
	tracer := exec.Command(e.heapscope, argv...)
	var tracerErr bytes.Buffer
	tracer.Stderr = &tracerErr
	if err := tracer.Start(); err != nil {
		return nil, err
	}
	defer tracer.Process.Kill()
	for i := 0; ; i++ {
		if exec.Command(e.heapscope, "query", name).Run() == nil {
			break
		}
		if i == 300 {
			return nil, fmt.Errorf("session never came up: %s", tracerErr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	stdin.Write([]byte{'\n'})
	stdin.Close()
	if err := w.Wait(); err != nil {
		return nil, err
	}
	if err := tracer.Wait(); err != nil {
		return nil, fmt.Errorf("heapscope attach: %v: %s", err, tracerErr.String())
	}
	return stdout.Bytes(), nil
}

func main() {
	n := flag.Int("n", 2_000_000, "malloc+free pairs per thread and run")
	reps := flag.Int("reps", 5, "repetitions of each measurement")
	threadList := flag.String("threads", "1,2", "comma-separated thread counts")
	only := flag.String("modes", "all", "comma-separated modes to run, or all")
	outFile := flag.String("o", "bench/RESULTS.md", "results file to write ('' for none)")
	flag.Parse()

	if err := run(*n, *reps, *threadList, *only, *outFile); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run(n, reps int, threadList, only, outFile string) error {
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
		for _, name := range strings.Split(only, ",") {
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
	env := &benchEnv{tmp: tmp}
	if env.churn, err = testutil.Build("churn", testutil.Options{}); err != nil {
		return err
	}
	root, err := testutil.Root()
	if err != nil {
		return err
	}
	env.heapscope = filepath.Join(tmp, "heapscope")
	build := exec.Command("go", "build", "-o", env.heapscope, "./cmd/heapscope")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("building heapscope: %v\n%s", err, out)
	}

	// samples[mode][threads] holds ns per pair, one per repetition.
	samples := map[string]map[int][]float64{}
	for _, m := range selected {
		samples[m.name] = map[int][]float64{}
	}
	for r := 0; r < reps; r++ {
		for _, t := range threads {
			for _, m := range selected {
				out, err := m.run(env, []string{strconv.Itoa(n), strconv.Itoa(t)})
				if err != nil {
					return fmt.Errorf("%s, %d threads: %w", m.name, t, err)
				}
				ns, err := parseNsPerPair(out)
				if err != nil {
					return fmt.Errorf("%s, %d threads: %w", m.name, t, err)
				}
				samples[m.name][t] = append(samples[m.name][t], ns)
				fmt.Fprintf(os.Stderr, "rep %d/%d  %-28s %d thr  %8.1f ns/pair\n", r+1, reps, m.name, t, ns)
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
	fmt.Fprintf(&doc, "- machine: %s\n", machine())
	fmt.Fprintf(&doc, "- workload: `churn N T`: N pairs of malloc(16..527)+free in each of T threads; the workload times its own loop\n\n")
	doc.Write(table.Bytes())
	return os.WriteFile(outFile, doc.Bytes(), 0o644)
}

// writeTable prints medians and ratios as a Markdown table.
func writeTable(w io.Writer, selected []mode, threads []int, samples map[string]map[int][]float64) {
	fmt.Fprintf(w, "| mode | threads | median ns/pair | overhead ns/pair | × heaptrack (time) | × heaptrack (overhead) |\n")
	fmt.Fprintf(w, "|---|---:|---:|---:|---:|---:|\n")
	for _, t := range threads {
		base := median(samples["untraced"][t])
		ht := median(samples["heaptrack"][t])
		for _, m := range selected {
			med := median(samples[m.name][t])
			fmt.Fprintf(w, "| %s | %d | %.1f | %s | %s | %s |\n", m.name, t, med,
				fmtOpt(med-base, base > 0), fmtRatio(med, ht), fmtRatio(med-base, ht-base))
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

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func parseNsPerPair(out []byte) (float64, error) {
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 2 && f[0] == "ns_per_pair" {
			return strconv.ParseFloat(f[1], 64)
		}
	}
	return 0, fmt.Errorf("no ns_per_pair line in output %q", out)
}

// machine describes the host: CPU, cores, kernel, libc, Go, heaptrack.
func machine() string {
	cpu := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "model name") {
				if i := strings.Index(l, ":"); i >= 0 {
					cpu = strings.TrimSpace(l[i+1:])
				}
				break
			}
		}
	}
	kernel := strings.TrimSpace(cmdOut("uname", "-r"))
	libc := firstLine(cmdOut("ldd", "--version"))
	ht := firstLine(cmdOut("heaptrack", "--version"))
	return fmt.Sprintf("%s, %d CPUs, kernel %s, %s, %s, %s", cpu, runtime.NumCPU(), kernel, libc, runtime.Version(), ht)
}

func cmdOut(name string, args ...string) string {
	out, _ := exec.Command(name, args...).CombinedOutput()
	return string(out)
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

func removeGlob(pattern string) {
	matches, _ := filepath.Glob(pattern)
	for _, m := range matches {
		os.Remove(m)
	}
}
