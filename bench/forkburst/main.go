// Command forkburst measures whether a burst of forks in one traced process
// stalls the forks of another (issue 27, item 8): under `heapscope attach`
// (eBPF, children followed), process B forks a child every 10 ms and times
// each fork and wait, while process A forks N children at once. It reports
// B's median and worst fork+wait, and A's burst's wall time, untraced and
// under each heapscope build given, in turn.
//
//	go run ./bench/forkburst [-n 1000] [-ms 3000] [-reps 3] [-heapscope [LABEL=]BIN,...] [-o bench/RESULTS-fork-burst.md]
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
	"strings"
	"syscall"
	"time"

	"github.com/heapscope/heapscope/bench/internal/benchutil"
	"github.com/heapscope/heapscope/internal/testutil"
)

func main() {
	n := flag.Int("n", 1000, "forks of the burst")
	ms := flag.Int("ms", 3000, "how long the other process forks, every 10 ms")
	reps := flag.Int("reps", 3, "repetitions")
	bins := flag.String("heapscope", "", "heapscope binaries, [LABEL=]PATH comma-separated (default: built from ./cmd/heapscope)")
	out := flag.String("o", "", "append the results to this file")
	flag.Parse()
	if err := run(*n, *ms, *reps, *bins, *out); err != nil {
		fmt.Fprintln(os.Stderr, "forkburst:", err)
		os.Exit(1)
	}
}

type result struct{ median, max, burst float64 }

func run(n, ms, reps int, binList, out string) error {
	defer testutil.Cleanup()
	tmp, err := os.MkdirTemp("", "forkburst-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	bins, err := benchutil.Builds(binList, tmp)
	if err != nil {
		return err
	}
	builds := append([]benchutil.Build{{Label: "untraced"}}, bins...)
	work, err := testutil.Build("fork_burst", testutil.Options{})
	if err != nil {
		return err
	}
	res := make([][]result, len(builds))
	for r := 0; r < reps; r++ {
		for i, b := range builds {
			x, err := once(work, b.Path, tmp, n, ms)
			if err != nil {
				return fmt.Errorf("%s: %w", b.Label, err)
			}
			res[i] = append(res[i], x)
		}
	}
	var rep bytes.Buffer
	w := io.MultiWriter(os.Stdout, &rep)
	fmt.Fprintf(w, "\n## %s\n\nMachine: %s; load average %s\n\n", time.Now().UTC().Format("2006-01-02 15:04 MST"), benchutil.Machine(), benchutil.LoadAvg())
	fmt.Fprintf(w, "Command: `go run ./bench/forkburst -n %d -ms %d -reps %d`; B forks every 10 ms for %d ms while A forks %d children at once, both traced by one `heapscope attach -p B,A --no-census` (children followed); medians of %d runs (each run's figure: B's median and worst fork+wait, A's burst from its first fork to its last child reaped):\n\n",
		n, ms, reps, ms, n, reps)
	fmt.Fprintf(w, "| build | B's median fork+wait (ms) | B's worst fork+wait (ms) | worst of all runs (ms) | A's burst (ms) |\n|---|---|---|---|---|\n")
	for i, b := range builds {
		var med, mx, burst []float64
		worst := 0.0
		for _, x := range res[i] {
			med, mx, burst = append(med, x.median), append(mx, x.max), append(burst, x.burst)
			worst = max(worst, x.max)
		}
		fmt.Fprintf(w, "| %s | %.2f | %.0f | %.0f | %.0f |\n", b.Label, benchutil.Median(med), benchutil.Median(mx), worst, benchutil.Median(burst))
	}
	if out != "" {
		f, err := os.OpenFile(out, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = f.Write(rep.Bytes())
		return err
	}
	return nil
}

type proc struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Reader
}

func start(bin string, args ...string) (*proc, error) {
	cmd := exec.Command(bin, args...)
	in, out, err := testutil.OpenPipes(cmd)
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &proc{cmd, in, bufio.NewReader(out)}
	if l, _ := p.out.ReadString('\n'); strings.TrimSpace(l) != "ready" {
		cmd.Process.Kill()
		cmd.Wait()
		return nil, fmt.Errorf("workload said %q", l)
	}
	return p, nil
}

// once runs B and A, traced by heapscope (unless bin is ""), and returns
// B's figures and A's burst time.
func once(work, bin, tmp string, n, ms int) (result, error) {
	b, err := start(work, "probe", fmt.Sprint(ms))
	if err != nil {
		return result{}, err
	}
	defer func() { b.cmd.Process.Kill(); b.cmd.Wait() }()
	a, err := start(work, "burst", fmt.Sprint(n))
	if err != nil {
		return result{}, err
	}
	defer func() { a.cmd.Process.Kill(); a.cmd.Wait() }()
	var hs *exec.Cmd
	if bin != "" {
		trace := filepath.Join(tmp, "t.hst")
		defer os.Remove(trace)
		hs = exec.Command(bin, "attach", "-p", fmt.Sprintf("%d,%d", b.cmd.Process.Pid, a.cmd.Process.Pid), "--no-census", "-o", trace, "-q")
		stderr, err := hs.StderrPipe()
		if err != nil {
			return result{}, err
		}
		if err := hs.Start(); err != nil {
			return result{}, err
		}
		defer func() { hs.Process.Signal(syscall.SIGINT); hs.Wait() }()
		sc := bufio.NewScanner(stderr)
		ok := false
		for sc.Scan() {
			if strings.Contains(sc.Text(), "tracing pid") {
				ok = true
				break
			}
		}
		if !ok {
			return result{}, fmt.Errorf("heapscope did not start")
		}
		go io.Copy(io.Discard, stderr)
	}
	fmt.Fprintln(b.in, "go")
	time.Sleep(200 * time.Millisecond) // B is forking when A's burst begins
	fmt.Fprintln(a.in, "go")
	var r result
	var x float64
	l, _ := b.out.ReadString('\n')
	if _, err := fmt.Sscanf(l, "forks %f median_ms %f max_ms %f", &x, &r.median, &r.max); err != nil {
		return r, fmt.Errorf("the forking process said %q", l)
	}
	l, _ = a.out.ReadString('\n')
	if _, err := fmt.Sscanf(l, "forks %f median_ms %f", &x, &r.burst); err != nil {
		return r, fmt.Errorf("the bursting process said %q", l)
	}
	return r, nil
}
