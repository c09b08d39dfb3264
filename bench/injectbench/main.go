// Command injectbench measures `heapscope attach --inject` on running
// processes, against an untraced run of the same process and `heaptrack -p`
// (gdb injecting heaptrack's interposer), in one run, and writes
// bench/RESULTS-inject.md:
//
//   - the cost per malloc+free pair of a running churn workload
//     (testdata/workloads/inject_target.c, its "time N" command), at 1 and
//     2 threads, untraced and then traced in the same process: the
//     target's CPU, its wall time, and the tracer's CPU over the same
//     pairs; exact and with --sample 512KiB;
//
//   - the time from the command to the first traced event for a process
//     that has 100 modules loaded (the first event's time in the trace
//     against CLOCK_MONOTONIC read before the command started), and
//     heaptrack -p's time to "injection finished" on the same program;
//
//   - an 8-thread target attached and stopped 20 times: its cost per pair
//     after the last stop against before the first, beside a target
//     stopped and resumed as often with ptrace and one never touched; and
//     what the process holds of heapscope after the last stop (threads,
//     mappings, words of its memory that point into the interposer).
//
//     go run ./bench/injectbench [-n 1000000] [-reps 5] [-threads 1,2] [-modules 100] [-cycles 20] [-cycle-runs 9] [-pin 0] [-o bench/RESULTS-inject.md]
//
// It needs root (ptrace), gcc, heaptrack, gdb and taskset.
package main

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/heapscope/heapscope/bench/internal/benchutil"
	"github.com/heapscope/heapscope/internal/proc"
	"github.com/heapscope/heapscope/internal/stopped"
	"github.com/heapscope/heapscope/internal/testutil"
)

func main() {
	n := flag.Int("n", 1_000_000, "malloc+free pairs per thread in each timed run")
	reps := flag.Int("reps", 5, "repetitions")
	threadList := flag.String("threads", "1,2", "thread counts of the overhead runs")
	modules := flag.Int("modules", 100, "modules the first-event target loads")
	cycles := flag.Int("cycles", 20, "attach/stop cycles of the 8-thread target")
	outFile := flag.String("o", "bench/RESULTS-inject.md", "results file ('' for none)")
	flag.StringVar(&cycleFlags, "cycle-flags", "", "more flags of the cycles' attaches (space-separated)")
	flag.StringVar(&parts, "parts", "overhead,first,cycles", "the parts to run")
	flag.IntVar(&cycleRuns, "cycle-runs", 9, "timed runs of each target before and after the cycles")
	flag.StringVar(&cyclePin, "pin", "0", "the CPU the cycles' targets run on ('' for any)")
	flag.Parse()
	if err := run(*n, *reps, *threadList, *modules, *cycles, *outFile); err != nil {
		fmt.Fprintln(os.Stderr, "injectbench:", err)
		os.Exit(1)
	}
}

// parts is -parts, cycleFlags -cycle-flags.
var parts, cycleFlags string

func part(name string) bool { return strings.Contains(","+parts+",", ","+name+",") }

type env struct {
	heapscope, target, tmp string
}

func run(n, reps int, threadList string, modules, cycles int, outFile string) error {
	var threads []int
	for _, s := range strings.Split(threadList, ",") {
		t, err := strconv.Atoi(s)
		if err != nil || t <= 0 {
			return fmt.Errorf("bad thread count %q", s)
		}
		threads = append(threads, t)
	}
	tmp, err := os.MkdirTemp("", "heapscope-injectbench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	e := &env{heapscope: filepath.Join(tmp, "heapscope"), tmp: tmp}
	if b, err := exec.Command("go", "build", "-o", e.heapscope, "./cmd/heapscope").CombinedOutput(); err != nil {
		return fmt.Errorf("go build: %v\n%s", err, b)
	}
	if e.target, err = testutil.Build("inject_target", testutil.Options{}); err != nil {
		return err
	}
	defer testutil.Cleanup()

	var out bytes.Buffer
	w := io.MultiWriter(&out, os.Stdout)
	fmt.Fprintf(w, "# attach --inject: cost per pair, time to the first event\n\n")
	fmt.Fprintf(w, "%s, %s\n\n", time.Now().UTC().Format("2006-01-02 15:04 UTC"), benchutil.Machine())
	fmt.Fprintf(w, "Command: `go run ./bench/injectbench -n %d -reps %d -threads %s -modules %d -cycles %d -cycle-runs %d -pin '%s' -parts %s`\n\n", n, reps, threadList, modules, cycles, cycleRuns, cyclePin, parts)

	if part("overhead") {
		if err := overhead(w, e, n, reps, threads); err != nil {
			return err
		}
	}
	if part("first") {
		if err := firstEvent(w, e, reps, modules); err != nil {
			return err
		}
	}
	if part("cycles") {
		if err := cyclesAfter(w, e, n, cycles); err != nil {
			return err
		}
	}
	if outFile != "" {
		return os.WriteFile(outFile, out.Bytes(), 0o644)
	}
	return nil
}

// target is a running inject_target.
type target struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Reader
}

func startTarget(bin string, args ...string) (*target, error) {
	cmd := exec.Command(bin, args...)
	in, out, err := testutil.OpenPipes(cmd)
	if err != nil {
		return nil, err
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	t := &target{cmd: cmd, in: in, out: bufio.NewReader(out)}
	if l, err := t.out.ReadString('\n'); err != nil || !strings.HasPrefix(l, "ready") {
		t.kill()
		return nil, fmt.Errorf("%s: %q %v", bin, l, err)
	}
	return t, nil
}

func (t *target) pid() int { return t.cmd.Process.Pid }

func (t *target) say(s string) (string, error) {
	if _, err := fmt.Fprintln(t.in, s); err != nil {
		return "", err
	}
	l, err := t.out.ReadString('\n')
	return strings.TrimSpace(l), err
}

// timed runs "time n": the target's CPU and wall ns per pair.
func (t *target) timed(n int) (cpu, wall float64, err error) {
	l, err := t.say(fmt.Sprintf("time %d", n))
	if err != nil {
		return 0, 0, err
	}
	if _, err := fmt.Sscanf(l, "cpu_ns_per_pair %g wall_ns_per_pair %g", &cpu, &wall); err != nil {
		return 0, 0, fmt.Errorf("target said %q", l)
	}
	return cpu, wall, nil
}

func (t *target) kill() {
	t.cmd.Process.Kill()
	t.cmd.Wait()
}

// quit asks the target to exit and waits for it.
func (t *target) quit() {
	fmt.Fprintln(t.in, "quit")
	t.in.Close()
	done := make(chan struct{})
	go func() { t.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.kill()
	}
}

// tracer is a running heapscope attach or heaptrack -p.
type tracer struct {
	cmd    *exec.Cmd
	output *syncBuf
	// ready is when it said its session was up (CLOCK_MONOTONIC ns)
	ready  int64
	exited chan struct{} // closed once it has exited; err is its wait's
	err    error
}

type syncBuf struct {
	ch chan struct{}
	b  bytes.Buffer
}

func newSyncBuf() *syncBuf { return &syncBuf{ch: make(chan struct{}, 1)} }

func (s *syncBuf) Write(p []byte) (int, error) {
	s.ch <- struct{}{}
	defer func() { <-s.ch }()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.ch <- struct{}{}
	defer func() { <-s.ch }()
	return s.b.String()
}

func mono() int64 {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}

// startTracer starts cmd and waits until its output says word.
func startTracer(cmd *exec.Cmd, word string) (*tracer, error) {
	tr := &tracer{cmd: cmd, output: newSyncBuf(), exited: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = tr.output, tr.output
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	exited := tr.exited
	go func() { tr.err = cmd.Wait(); close(exited) }()
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if strings.Contains(tr.output.String(), word) {
			tr.ready = mono()
			return tr, nil
		}
		select {
		case <-exited:
			return nil, fmt.Errorf("%s exited: %s", cmd.Path, tr.output.String())
		default:
		}
	}
	cmd.Process.Kill()
	return nil, fmt.Errorf("%s did not say %q: %s", cmd.Path, word, tr.output.String())
}

// wait waits for the tracer's end.
func (tr *tracer) wait() error {
	select {
	case <-tr.exited:
		if tr.err != nil {
			return fmt.Errorf("%s: %v: %s", tr.cmd.Path, tr.err, tr.output.String())
		}
		return nil
	case <-time.After(60 * time.Second):
		tr.cmd.Process.Kill()
		return fmt.Errorf("%s did not end: %s", tr.cmd.Path, tr.output.String())
	}
}

func (e *env) inject(pid int, trace string, flags ...string) (*tracer, error) {
	args := append([]string{"attach", "--inject", "-q", "-o", trace, "--overwrite", "-p", strconv.Itoa(pid)}, flags...)
	return startTracer(exec.Command(e.heapscope, args...), "tracing pid")
}

func (e *env) heaptrack(pid int) (*tracer, error) {
	cmd := exec.Command("heaptrack", "-o", filepath.Join(e.tmp, "ht"), "-p", strconv.Itoa(pid))
	cmd.Dir = e.tmp
	return startTracer(cmd, "injection finished")
}

// treeCPU is the CPU time, in ns, of process root and its descendants.
func treeCPU(root int) float64 {
	type st struct {
		ppid int
		cpu  float64
	}
	all := map[int]st{}
	ents, _ := os.ReadDir("/proc")
	for _, d := range ents {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + d.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 13 {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		ut, _ := strconv.ParseFloat(f[11], 64)
		stime, _ := strconv.ParseFloat(f[12], 64)
		all[pid] = st{ppid, (ut + stime) * 1e7} // 100 ticks a second
	}
	in := func(pid int) bool {
		for hops := 0; pid > 1 && hops < 64; hops++ {
			if pid == root {
				return true
			}
			pid = all[pid].ppid
		}
		return false
	}
	var sum float64
	for pid, s := range all {
		if in(pid) {
			sum += s.cpu
		}
	}
	return sum
}

// sample is one traced run of a mode against the same process untraced.
type sample struct {
	cpu0, wall0, cpu1, wall1, tracer float64
}

type modeDef struct {
	name  string
	start func(e *env, pid int) (*tracer, error)
}

var modes = []modeDef{
	{"heaptrack -p", func(e *env, pid int) (*tracer, error) { return e.heaptrack(pid) }},
	{"heapscope attach --inject", func(e *env, pid int) (*tracer, error) {
		return e.inject(pid, filepath.Join(e.tmp, "o.hst"))
	}},
	// the workload keeps frame pointers (heaptrack does not need them)
	{"heapscope attach --inject --unwind fp", func(e *env, pid int) (*tracer, error) {
		return e.inject(pid, filepath.Join(e.tmp, "f.hst"), "--unwind", "fp")
	}},
	{"heapscope attach --inject --sample 512KiB", func(e *env, pid int) (*tracer, error) {
		return e.inject(pid, filepath.Join(e.tmp, "s.hst"), "--sample", "512KiB")
	}},
}

// measure runs one mode on a fresh target of t threads: n pairs untraced,
// then attached, n pairs traced (the tracer's CPU read around them).
func measure(e *env, m modeDef, t, n int) (sample, error) {
	var s sample
	tg, err := startTarget(e.target, strconv.Itoa(t))
	if err != nil {
		return s, err
	}
	defer tg.kill()
	if _, _, err := tg.timed(n / 10); err != nil { // warm
		return s, err
	}
	if s.cpu0, s.wall0, err = tg.timed(n); err != nil {
		return s, err
	}
	tr, err := m.start(e, tg.pid())
	if err != nil {
		return s, err
	}
	if _, _, err := tg.timed(n / 100); err != nil { // the tracer's first stacks
		return s, err
	}
	c0 := treeCPU(tr.cmd.Process.Pid)
	if s.cpu1, s.wall1, err = tg.timed(n); err != nil {
		return s, err
	}
	s.tracer = (treeCPU(tr.cmd.Process.Pid) - c0) / float64(n*t)
	tg.quit() // both tracers end with the target
	if err := tr.wait(); err != nil {
		return s, err
	}
	benchutil.RemoveGlob(filepath.Join(e.tmp, "ht*"))
	return s, nil
}

func overhead(w io.Writer, e *env, n, reps int, threads []int) error {
	res := map[string]map[int][]sample{}
	for rep := 0; rep < reps; rep++ {
		for _, t := range threads {
			for i := range modes {
				m := modes[(i+rep)%len(modes)] // the order turns with each repetition
				s, err := measure(e, m, t, n)
				if err != nil {
					return fmt.Errorf("%s, %d threads: %w", m.name, t, err)
				}
				fmt.Fprintf(os.Stderr, "rep %d, %d threads, %s: %+v\n", rep, t, m.name, s)
				if res[m.name] == nil {
					res[m.name] = map[int][]sample{}
				}
				res[m.name][t] = append(res[m.name][t], s)
			}
		}
	}
	med := func(ss []sample, f func(sample) float64) float64 {
		var xs []float64
		for _, s := range ss {
			xs = append(xs, f(s))
		}
		return benchutil.Median(xs)
	}
	fmt.Fprintf(w, "## Cost per malloc+free pair on a running process\n\n")
	fmt.Fprintf(w, "Each run starts a fresh `inject_target THREADS`, times %d pairs per thread untraced, attaches, times %d more traced; %d repetitions, modes interleaved, medians. "+
		"Overhead = traced − untraced of the same process. Target CPU is the process's CPU per pair (its threads and the tracer's threads in it); tracer CPU is the tracer's processes' CPU over the same pairs "+
		"(heapscope: its collector; heaptrack: heaptrack_interpret and zstd); total = target overhead + tracer CPU.\n\n", n, n, reps)
	fmt.Fprintf(w, "| mode | threads | untraced CPU ns/pair | traced CPU ns/pair | target overhead ns/pair | tracer CPU ns/pair | total overhead ns/pair | wall overhead ns/pair | × heaptrack (target overhead) | × heaptrack (total) |\n")
	fmt.Fprintf(w, "|---|---|---|---|---|---|---|---|---|---|\n")
	for _, t := range threads {
		ht := res["heaptrack -p"][t]
		htOver := med(ht, func(s sample) float64 { return s.cpu1 - s.cpu0 })
		htTotal := med(ht, func(s sample) float64 { return s.cpu1 - s.cpu0 + s.tracer })
		for _, m := range modes {
			ss := res[m.name][t]
			over := med(ss, func(s sample) float64 { return s.cpu1 - s.cpu0 })
			total := med(ss, func(s sample) float64 { return s.cpu1 - s.cpu0 + s.tracer })
			fmt.Fprintf(w, "| %s | %d | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.3f | %.3f |\n", m.name, t,
				med(ss, func(s sample) float64 { return s.cpu0 }), med(ss, func(s sample) float64 { return s.cpu1 }),
				over, med(ss, func(s sample) float64 { return s.tracer }), total,
				med(ss, func(s sample) float64 { return s.wall1 - s.wall0 }), over/htOver, total/htTotal)
		}
	}
	fmt.Fprintln(w)
	return nil
}

// modsTarget writes and builds the first-event target: a program that
// dlopens count libraries, each calling malloc, and then calls them all in
// a loop.
func modsTarget(dir string, count int) (string, error) {
	for i := 0; i < count; i++ {
		src := filepath.Join(dir, fmt.Sprintf("m%03d.c", i))
		code := fmt.Sprintf("#include <stdlib.h>\nvoid *f%03d(size_t n) { return malloc(n + %d); }\n", i, i)
		if err := os.WriteFile(src, []byte(code), 0o644); err != nil {
			return "", err
		}
		if b, err := exec.Command("gcc", "-O2", "-shared", "-fPIC", "-o", filepath.Join(dir, fmt.Sprintf("libm%03d.so", i)), src).CombinedOutput(); err != nil {
			return "", fmt.Errorf("gcc: %v\n%s", err, b)
		}
	}
	main := `#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
void *volatile sink;
int main(int argc, char **argv) {
	int n = atoi(argv[2]);
	void *(**fs)(size_t) = calloc(n, sizeof *fs);
	for (int i = 0; i < n; i++) {
		char path[4096], name[16];
		snprintf(path, sizeof path, "%s/libm%03d.so", argv[1], i);
		snprintf(name, sizeof name, "f%03d", i);
		void *h = dlopen(path, RTLD_NOW);
		if (!h || !(fs[i] = (void *(*)(size_t))dlsym(h, name))) {
			fprintf(stderr, "%s: %s\n", path, dlerror());
			return 1;
		}
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	printf("ready\n");
	for (unsigned long k = 0;; k++) {
		void *p = fs[k % n](16);
		sink = p;
		free(p);
	}
}
`
	src := filepath.Join(dir, "mods.c")
	if err := os.WriteFile(src, []byte(main), 0o644); err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "mods")
	if b, err := exec.Command("gcc", "-O2", "-o", bin, src, "-ldl").CombinedOutput(); err != nil {
		return "", fmt.Errorf("gcc: %v\n%s", err, b)
	}
	return bin, nil
}

// fileModules counts the distinct files process pid maps.
func fileModules(pid int) int {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	seen := map[string]bool{}
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) >= 6 && strings.HasPrefix(f[5], "/") {
			seen[f[5]] = true
		}
	}
	return len(seen)
}

func startMods(bin, dir string, count int) (*exec.Cmd, error) {
	cmd := exec.Command(bin, dir, strconv.Itoa(count))
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	if l, err := bufio.NewReader(out).ReadString('\n'); err != nil || l != "ready\n" {
		cmd.Process.Kill()
		cmd.Wait()
		return nil, fmt.Errorf("mods: %q %v", l, err)
	}
	return cmd, nil
}

func firstEvent(w io.Writer, e *env, reps, count int) error {
	dir := filepath.Join(e.tmp, "mods")
	if err := os.Mkdir(dir, 0o755); err != nil {
		return err
	}
	bin, err := modsTarget(dir, count)
	if err != nil {
		return err
	}
	var first, ready []float64
	files := 0
	for rep := 0; rep < reps; rep++ {
		cmd, err := startMods(bin, dir, count)
		if err != nil {
			return err
		}
		files = fileModules(cmd.Process.Pid)
		trace := filepath.Join(e.tmp, "first.hst")
		t0 := mono()
		tr, err := e.inject(cmd.Process.Pid, trace, "--duration", "500ms")
		if err != nil {
			cmd.Process.Kill()
			cmd.Wait()
			return err
		}
		err = tr.wait()
		cmd.Process.Kill()
		cmd.Wait()
		if err != nil {
			return err
		}
		ft, err := benchutil.FirstEvent(trace)
		if err != nil {
			return err
		}
		first = append(first, float64(ft-t0)/1e6)
		ready = append(ready, float64(tr.ready-t0)/1e6)
		fmt.Fprintf(os.Stderr, "first event: rep %d: %.1f ms (said tracing at %.1f ms)\n", rep, first[rep], ready[rep])
	}
	// heaptrack -p on the same program, for comparison
	var htReady []float64
	for rep := 0; rep < min(reps, 3); rep++ {
		cmd, err := startMods(bin, dir, count)
		if err != nil {
			return err
		}
		t0 := mono()
		tr, err := e.heaptrack(cmd.Process.Pid)
		if err != nil {
			cmd.Process.Kill()
			cmd.Wait()
			return err
		}
		htReady = append(htReady, float64(tr.ready-t0)/1e6)
		cmd.Process.Kill()
		cmd.Wait()
		tr.wait()
		benchutil.RemoveGlob(filepath.Join(e.tmp, "ht*"))
	}
	fmt.Fprintf(w, "## Time from the command to the first event, %d modules\n\n", count)
	fmt.Fprintf(w, "A program dlopens %d libraries (each calls malloc; the process maps %d files in all) and then calls them in a loop; "+
		"a fresh process each time (the interposer not loaded yet). Time from just before `heapscope attach --inject --duration 500ms -p PID` is started "+
		"to the first event in its trace (CLOCK_MONOTONIC, the trace's clock), and to its \"tracing pid\" line; heaptrack -p: to its \"injection finished\" line. "+
		"The first repetition is the first injection of this heapscope binary (its interposer file written, unwind tables of these new libraries built).\n\n", count, files)
	fmt.Fprintf(w, "| tool | runs (ms) | median ms |\n|---|---|---|\n")
	row := func(name string, xs []float64) {
		var s []string
		for _, x := range xs {
			s = append(s, fmt.Sprintf("%.1f", x))
		}
		fmt.Fprintf(w, "| %s | %s | %.1f |\n", name, strings.Join(s, ", "), benchutil.Median(xs))
	}
	row("heapscope attach --inject: first event", first)
	row("heapscope attach --inject: \"tracing pid\"", ready)
	row("heaptrack -p: \"injection finished\"", htReady)
	fmt.Fprintln(w)
	return nil
}

// cyclesAfter attaches to an 8-thread target and stops, cycles times,
// while its threads allocate, then compares its cost per pair with before.
// Two controls run beside it, their threads allocating as long: one is
// stopped and resumed with ptrace (internal/stopped) as often and nothing
// else, the other is never touched. The three are timed in turn, so that
// what the machine's load does to one it does to the others; with -pin
// all three run on one CPU, so that a pair's cost does not depend on
// whether the scheduler ran two of a target's threads at once (their
// shared counter's cache line then moves between the CPUs: 35 against
// 75 ns here).
func cyclesAfter(w io.Writer, e *env, n, cycles int) error {
	const threads = 8
	per := n / 4
	names := []string{fmt.Sprintf("attached and stopped %d times", cycles), fmt.Sprintf("stopped and resumed %d times (ptrace, no injection)", cycles), "control (never touched)"}
	var tgs [3]*target
	for i := range tgs {
		args := []string{strconv.Itoa(threads)}
		bin := e.target
		if cyclePin != "" {
			bin, args = "taskset", append([]string{"-c", cyclePin, e.target}, args...)
		}
		tg, err := startTarget(bin, args...)
		if err != nil {
			return err
		}
		defer tg.kill()
		tgs[i] = tg
	}
	timed := func() ([3][]float64, error) {
		var xs [3][]float64
		for r := 0; r < cycleRuns; r++ {
			for i, tg := range tgs {
				c, _, err := tg.timed(per)
				if err != nil {
					return xs, err
				}
				xs[i] = append(xs[i], c)
			}
		}
		return xs, nil
	}
	say := func(cmd, want string) error {
		for _, tg := range tgs {
			if l, err := tg.say(cmd); err != nil || !strings.HasPrefix(l, want) {
				return fmt.Errorf("target: %s: %q %v", cmd, l, err)
			}
		}
		return nil
	}
	for _, tg := range tgs {
		tg.timed(per / 10)
	}
	before, err := timed()
	if err != nil {
		return err
	}
	res0 := readResidue(tgs[0].pid())
	if err := say("run", "running"); err != nil {
		return err
	}
	start := time.Now()
	var took, paused []float64
	for i := 0; i < cycles; i++ {
		t0 := time.Now()
		tr, err := e.inject(tgs[0].pid(), filepath.Join(e.tmp, "c.hst"), append([]string{"--on-full", "block"}, strings.Fields(cycleFlags)...)...)
		if err != nil {
			return fmt.Errorf("cycle %d: %w", i, err)
		}
		time.Sleep(50 * time.Millisecond)
		tr.cmd.Process.Signal(syscall.SIGINT)
		if err := tr.wait(); err != nil {
			return fmt.Errorf("cycle %d: %w", i, err)
		}
		took = append(took, float64(time.Since(t0))/1e6)
		// the no-op control: one stop and resume of every thread
		p, err := stopped.Stop(tgs[1].pid(), stopped.Options{})
		if err != nil {
			return fmt.Errorf("cycle %d: stopping the control: %w", i, err)
		}
		time.Sleep(2 * time.Millisecond)
		if err := p.Resume(); err != nil {
			return fmt.Errorf("cycle %d: resuming the control: %w", i, err)
		}
		paused = append(paused, float64(p.Paused())/1e6)
	}
	spent := time.Since(start)
	if err := say("pause", "paused"); err != nil {
		return err
	}
	res1 := readResidue(tgs[0].pid())
	after, err := timed()
	if err != nil {
		return err
	}
	sort.Float64s(took)
	pin := "unpinned"
	if cyclePin != "" {
		pin = "all three pinned to CPU " + cyclePin + " (`taskset -c " + cyclePin + "`)"
	}
	fmt.Fprintf(w, "## Cost per pair after %d attach/stop cycles, %d threads\n\n", cycles, threads)
	fmt.Fprintf(w, "Three `inject_target %d`, %s, timed in turn (%d pairs per thread, %d times each, CPU ns per pair) before and after; between, the three's loops run %.1f s, "+
		"while the first is attached and stopped %d times (`%s`, 50 ms traced, SIGINT), the second is stopped and resumed with ptrace as often "+
		"(internal/stopped, %.1f ms stopped median), and the third is never touched.\n\n",
		threads, pin, per, cycleRuns, spent.Seconds(), cycles, strings.TrimSpace("heapscope attach --inject --on-full block "+cycleFlags), benchutil.Median(paused))
	fmt.Fprintf(w, "| target | before: CPU ns/pair (runs) | median | after (runs) | median | after/before |\n|---|---|---|---|---|---|\n")
	fmtRuns := func(xs []float64) string {
		var s []string
		for _, x := range xs {
			s = append(s, fmt.Sprintf("%.1f", x))
		}
		return strings.Join(s, ", ")
	}
	ratio := func(i int) float64 { return benchutil.Median(after[i]) / benchutil.Median(before[i]) }
	for i, name := range names {
		fmt.Fprintf(w, "| %s | %s | %.1f | %s | %.1f | %.3f |\n", name, fmtRuns(before[i]), benchutil.Median(before[i]), fmtRuns(after[i]), benchutil.Median(after[i]), ratio(i))
	}
	fmt.Fprintf(w, "\nAttached against the untouched control: %.3f; against the ptrace control: %.3f (goal: after the last stop within 10%% of untraced). "+
		"A cycle (command to heapscope's exit) took %.0f ms median, %.0f ms at most.\n\n",
		ratio(0)/ratio(2), ratio(0)/ratio(1), benchutil.Median(took), took[len(took)-1])
	fmt.Fprintf(w, "What the attached process holds of heapscope, before the first attach and after the last stop:\n\n")
	fmt.Fprintf(w, "| | threads | threads named heapscope | interposer mappings | their KiB | other heapscope mappings (control blocks, unwind tables) | their KiB | words pointing into the interposer: in other files' writable mappings | in the heap and anonymous mappings |\n|---|---|---|---|---|---|---|---|---|\n")
	for i, r := range []residue{res0, res1} {
		fmt.Fprintf(w, "| %s | %d | %d | %d | %d | %d | %d | %d | %d |\n", []string{"before", "after"}[i], r.threads, r.named, r.maps, r.kib, r.others, r.otherKiB, r.fileWords, r.anonWords)
	}
	fmt.Fprintln(w)
	if len(res1.where) > 0 {
		var ws []string
		for k, v := range res1.where {
			ws = append(ws, fmt.Sprintf("%s: %d", k, v))
		}
		sort.Strings(ws)
		fmt.Fprintf(w, "Where those words are after: %s.\n\n", strings.Join(ws, "; "))
	}
	return nil
}

// cycleRuns, cyclePin are -cycle-runs and -pin.
var (
	cycleRuns int
	cyclePin  string
)

// residue is what process pid holds of heapscope's interposer: its
// threads, the interposer's mappings, and the 8-byte words elsewhere in
// its writable memory whose value is an address inside the interposer (a
// GOT entry left redirected would be one; so would a function pointer the
// program took while traced, or stale bytes).
type residue struct {
	threads, named, maps, kib int
	others, otherKiB          int // heapscope's other mappings: control blocks, unwind tables
	fileWords, anonWords      int
	where                     map[string]int // mapping path (or "[heap]", "anonymous"): words
}

func isOurs(path string) bool {
	return strings.Contains(filepath.Base(path), "heapscope_preload") || strings.HasPrefix(path, "/memfd:heapscope-preload")
}

func readResidue(pid int) residue {
	r := residue{where: map[string]int{}}
	tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	r.threads = len(tasks)
	for _, t := range tasks {
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/comm", pid, t.Name())); err == nil && strings.TrimSpace(string(b)) == "heapscope" {
			r.named++
		}
	}
	maps, err := proc.ReadMaps(pid)
	if err != nil {
		return r
	}
	var lo, hi uint64 // the interposer's span
	for _, m := range maps {
		if isOurs(m.Path) {
			r.maps++
			r.kib += int((m.End - m.Start) / 1024)
			if lo == 0 || m.Start < lo {
				lo = m.Start
			}
			hi = max(hi, m.End)
		} else if strings.HasPrefix(m.Path, "/memfd:heapscope-") {
			r.others++
			r.otherKiB += int((m.End - m.Start) / 1024)
		}
	}
	if lo == 0 {
		return r
	}
	mem, err := os.Open(fmt.Sprintf("/proc/%d/mem", pid))
	if err != nil {
		return r
	}
	defer mem.Close()
	for _, m := range maps {
		if isOurs(m.Path) || !strings.HasPrefix(m.Perms, "rw") || m.End-m.Start > 256<<20 || strings.HasPrefix(m.Path, "[v") || m.Path == "[stack]" {
			continue
		}
		b := make([]byte, m.End-m.Start)
		k, _ := mem.ReadAt(b, int64(m.Start))
		words := 0
		for i := 0; i+8 <= k; i += 8 {
			if v := binary.LittleEndian.Uint64(b[i:]); v >= lo && v < hi {
				words++
			}
		}
		if words == 0 {
			continue
		}
		name := m.Path
		if strings.HasPrefix(m.Path, "/") {
			r.fileWords += words
		} else {
			if name == "" {
				name = "anonymous"
			}
			r.anonWords += words
		}
		r.where[name] += words
	}
	return r
}
