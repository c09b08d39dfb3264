// Command leaksbench measures heapscope's leak checks through the command
// line, in one run:
//
//   - a running process's pause: scan_heap builds -mib MiB of heap under
//     `heapscope run --no-leak-check` (each provider), and `heapscope leaks
//     NAME --json` checks it -reps times: the pause it reports (the process
//     stopped, from the first thread's stop until its memory is read) and
//     the whole check;
//   - the check at exit: the same program under `heapscope run` (the check
//     on, as by default) and `--no-leak-check`, let go at once: the time from
//     the line that ends it to heapscope's exit, and the pause and check the
//     trace's verdict records;
//   - LeakSanitizer's check of the same program (scan_heap built with
//     -fsanitize=leak times its __lsan_do_leak_check), the anchor;
//   - what a watch (ptrace) costs a program while it runs: watch_cost's
//     malloc+free pair, signal, thread and fork, untraced, under `heapscope
//     run --no-leak-check` and under `heapscope run` (the exit's watch); with
//     eBPF, under `run --provider ebpf --no-leak-check`, whose watch holds
//     the children it follows unseen, and with --no-follow-fork (no watch).
//
// Usage (repo root, as root for ebpf): go run ./bench/leaksbench [-mib 100]
// [-reps 5] [-cost-only] [-o bench/RESULTS-leaks.md].
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/heapscope/heapscope"
	"github.com/heapscope/heapscope/bench/internal/benchutil"
	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/internal/ebpf"
	"github.com/heapscope/heapscope/internal/registry"
	"github.com/heapscope/heapscope/internal/testutil"
	"github.com/heapscope/heapscope/tracefile"
)

func main() {
	mib := flag.Int("mib", 100, "live heap to build, MiB")
	reps := flag.Int("reps", 5, "repetitions")
	out := flag.String("o", "", "append the tables to this file")
	costOnly := flag.Bool("cost-only", false, "measure only what a watch costs a program (the watch_cost table)")
	flag.Parse()
	log.SetFlags(0)
	defer testutil.Cleanup()

	dir, err := os.MkdirTemp("", "leaksbench-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	hs := filepath.Join(dir, "heapscope")
	if err := benchutil.BuildHeapscope(hs); err != nil {
		log.Fatal(err)
	}
	heap := benchutil.MustBuild("scan_heap", testutil.Options{})
	lsanHeap := benchutil.MustBuild("scan_heap", testutil.Options{Flags: []string{"-fsanitize=leak"}})
	cost := benchutil.MustBuild("watch_cost", testutil.Options{})
	env := append(os.Environ(), registry.DirEnv+"="+dir)
	b := &bench{hs: hs, dir: dir, env: env, mib: *mib}

	var md strings.Builder
	if *costOnly {
		fmt.Fprintf(&md, "\n## %s: `go run ./bench/leaksbench -cost-only -reps %d`\n\n", time.Now().Format("2006-01-02"), *reps)
	} else {
		fmt.Fprintf(&md, "\n## %s: `go run ./bench/leaksbench -mib %d -reps %d`\n\n", time.Now().Format("2006-01-02"), *mib, *reps)
	}
	fmt.Fprintf(&md, "Machine: %s. Load before: %s.\n\n", benchutil.Machine(), benchutil.LoadAvg())

	providers := []string{"preload"}
	if ebpf.Available() == nil {
		providers = append(providers, "ebpf")
	}
	if !*costOnly {
		b.checks(&md, providers, heap, lsanHeap, *reps)
	}
	b.costs(&md, providers, cost, *reps)
	fmt.Print(md.String())
	if *out != "" {
		f, err := os.OpenFile(*out, os.O_APPEND|os.O_WRONLY|os.O_CREATE, 0o644)
		if err != nil {
			log.Fatal(err)
		}
		defer f.Close()
		io.WriteString(f, md.String())
	}
}

// checks measures the leak checks of a running process and at its exit,
// with each provider, and LeakSanitizer's.
func (b *bench) checks(md *strings.Builder, providers []string, heap, lsanHeap string, reps int) {
	fmt.Fprintf(md, "| provider | blocks known | pause ms (median, min–max) | check ms (median) | exit: run's end after the line, no check / check ms | exit check: pause / whole ms | LSan check ms | check / LSan |\n|---|---|---|---|---|---|---|---|\n")
	var lsan []float64
	for i := 0; i < reps; i++ {
		lsan = append(lsan, b.lsanCheck(lsanHeap))
	}
	for _, prov := range providers {
		var pause, check []float64
		var blocks uint64
		for i := 0; i < reps; i++ {
			p, c, n := b.running(heap, prov)
			pause, check, blocks = append(pause, p), append(check, c...), n
		}
		var off, on, exitPause, exitCheck []float64
		for i := 0; i < reps; i++ {
			off = append(off, b.atExit(heap, prov, false, nil))
			var v event.Verdict
			on = append(on, b.atExit(heap, prov, true, &v))
			exitPause, exitCheck = append(exitPause, float64(v.Pause)/1e6), append(exitCheck, float64(v.Elapsed)/1e6)
		}
		fmt.Fprintf(md, "| %s | %d | %.1f (%.1f–%.1f) | %.1f | %.0f / %.0f | %.1f / %.1f | %.1f | %.2f× |\n", prov, blocks,
			benchutil.Median(pause), slices.Min(pause), slices.Max(pause), benchutil.Median(check), benchutil.Median(off), benchutil.Median(on),
			benchutil.Median(exitPause), benchutil.Median(exitCheck), benchutil.Median(lsan), benchutil.Median(check)/benchutil.Median(lsan))
	}
	fmt.Fprintf(md, "\nMedians of %d. pause: what `heapscope leaks` reports (the process stopped: the threads interrupted, its events delivered, the live set taken, the roots gathered, its memory read); check: the whole check, the classification after the process went on included. exit: from the line that lets scan_heap return from main to heapscope's own exit (`run -q`), without and with the check at exit; exit check: the verdict's pause and time (the process held at its end).\n\n", reps)
}

// costs measures what watch_cost pays per operation, untraced and traced,
// watched or not.
func (b *bench) costs(md *strings.Builder, providers []string, cost string, reps int) {
	fmt.Fprintf(md, "| watch_cost | N | malloc+free pair ns | signal µs | thread create+join µs | fork+exit+wait µs |\n|---|---|---|---|---|---|\n")
	trace := filepath.Join(b.dir, "c.hst")
	type row struct {
		name string
		n    string
		args []string
	}
	rows := []row{
		{"untraced", "200000", nil},
		{"run --no-leak-check", "200000", []string{"run", "-q", "--no-leak-check", "-o", trace, "--overwrite", "--"}},
		{"run (leak check at exit: watched)", "200000", []string{"run", "-q", "-o", trace, "--overwrite", "--"}},
	}
	if slices.Contains(providers, "ebpf") {
		// Fewer: each fork's child is held until its probes are in.
		rows = append(rows,
			row{"untraced", "20000", nil},
			row{"run --provider ebpf --no-leak-check --no-follow-fork (not watched)", "20000",
				[]string{"run", "-q", "--provider", "ebpf", "--no-leak-check", "--no-follow-fork", "-o", trace, "--overwrite", "--"}},
			row{"run --provider ebpf --no-leak-check (children followed: watched)", "20000",
				[]string{"run", "-q", "--provider", "ebpf", "--no-leak-check", "-o", trace, "--overwrite", "--"}})
	}
	for _, c := range rows {
		var pair, sig, thr, frk []float64
		for i := 0; i < reps; i++ {
			var cmd *exec.Cmd
			if c.args == nil {
				cmd = exec.Command(cost, c.n)
			} else {
				cmd = exec.Command(b.hs, append(c.args, cost, c.n)...)
				cmd.Env = b.env
			}
			o, err := cmd.Output()
			if err != nil {
				log.Fatalf("%s: %v", c.name, err)
			}
			var p, s, t, f float64
			if _, err := fmt.Sscanf(string(o), "pair_ns %g signal_ns %g thread_ns %g fork_ns %g", &p, &s, &t, &f); err != nil {
				log.Fatalf("%s said %q", c.name, o)
			}
			pair, sig, thr, frk = append(pair, p), append(sig, s/1e3), append(thr, t/1e3), append(frk, f/1e3)
		}
		fmt.Fprintf(md, "| %s | %s | %.0f | %.1f | %.1f | %.0f |\n", c.name, c.n, benchutil.Median(pair), benchutil.Median(sig), benchutil.Median(thr), benchutil.Median(frk))
	}
	fmt.Fprintf(md, "\nMedians of %d (watch_cost N: N malloc+free pairs, N/10 signals, N/100 threads, N/1000 forks); load after: %s.\n", reps, benchutil.LoadAvg())
}

type bench struct {
	hs, dir string
	env     []string
	mib     int
	n       int
}

// started runs scan_heap under heapscope with args and waits for its ready
// line; it returns the command, its stdin and the pid.
func (b *bench) started(heap string, args ...string) (*exec.Cmd, io.WriteCloser, int) {
	cmd := exec.Command(b.hs, append(args, "--", heap, strconv.Itoa(b.mib), "5")...)
	cmd.Env = b.env
	cmd.Stderr = os.Stderr
	in, out := benchutil.StartPiped(cmd)
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if p, ok := strings.CutPrefix(sc.Text(), "ready "); ok {
			pid, _ := strconv.Atoi(p)
			go io.Copy(io.Discard, out)
			return cmd, in, pid
		}
	}
	log.Fatalf("scan_heap under %v ended: %v", args, cmd.Wait())
	return nil, nil, 0
}

// running checks a running scan_heap: the pause and the whole check, ms.
func (b *bench) running(heap, prov string) (float64, []float64, uint64) {
	b.n++
	name := fmt.Sprintf("leaksbench-%d-%d", os.Getpid(), b.n)
	cmd, in, _ := b.started(heap, "run", "-q", "--no-leak-check", "--provider", prov, "--name", name,
		"-o", filepath.Join(b.dir, name+".hst"))
	defer func() { io.WriteString(in, "go\n"); cmd.Wait() }()
	var checks []float64
	var pause float64
	var blocks uint64
	for i := 0; i < 2; i++ { // the first reads the trace back
		c := exec.Command(b.hs, "leaks", "--json", name)
		c.Env = b.env
		o, err := c.Output()
		if err != nil {
			log.Fatalf("heapscope leaks: %v", err)
		}
		var r heapscope.LeaksResult
		if err := json.Unmarshal(o, &r); err != nil || len(r.Processes) != 1 || r.Processes[0].Error != "" {
			log.Fatalf("heapscope leaks said %s (%v)", o, err)
		}
		p := r.Processes[0]
		pause, blocks = float64(p.Paused)/1e6, p.Blocks
		if i == 1 {
			checks = append(checks, float64(p.Elapsed)/1e6)
		}
	}
	return pause, checks, blocks
}

// atExit lets scan_heap end at once under heapscope run, with or without
// the check at exit: the time from the line to heapscope's exit, ms, and
// the verdict.
func (b *bench) atExit(heap, prov string, check bool, v *event.Verdict) float64 {
	b.n++
	trace := filepath.Join(b.dir, fmt.Sprintf("exit-%d.hst", b.n))
	args := []string{"run", "-q", "--provider", prov, "-o", trace}
	if !check {
		args = append(args, "--no-leak-check")
	}
	cmd, in, _ := b.started(heap, args...)
	t0 := time.Now()
	io.WriteString(in, "go\n")
	if err := cmd.Wait(); err != nil {
		log.Fatalf("heapscope run: %v", err)
	}
	d := time.Since(t0)
	if v != nil {
		r, err := tracefile.Open(trace)
		if err != nil {
			log.Fatal(err)
		}
		s := testutil.NewNoteSink()
		if err := r.Replay(s, tracefile.Window{}); err != nil {
			log.Fatal(err)
		}
		r.Close()
		vs := testutil.NotesOf[event.Verdict](s)
		if len(vs) == 0 {
			log.Fatal("no verdict at exit in the trace")
		}
		*v = vs[len(vs)-1]
	}
	os.Remove(trace)
	return float64(d) / 1e6
}

// lsanCheck runs scan_heap built with LeakSanitizer: its own check, ms.
func (b *bench) lsanCheck(bin string) float64 {
	cmd := exec.Command(bin, strconv.Itoa(b.mib), "5")
	cmd.Env = append(os.Environ(), "LSAN_OPTIONS=exitcode=0:symbolize=0:max_leaks=1")
	cmd.Stdin = strings.NewReader("go\n")
	o, err := cmd.Output()
	if err != nil {
		log.Fatalf("scan_heap (LeakSanitizer): %v", err)
	}
	for _, l := range strings.Split(string(o), "\n") {
		if s, ok := strings.CutPrefix(l, "lsan_check_ns "); ok {
			ns, _ := strconv.ParseFloat(s, 64)
			return ns / 1e6
		}
	}
	log.Fatal("scan_heap (LeakSanitizer) printed no lsan_check_ns")
	return 0
}
