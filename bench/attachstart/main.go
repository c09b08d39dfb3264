// Command attachstart measures how long `heapscope attach -p PID` (eBPF)
// takes to start tracing a running process: from the command to the first
// event traced (the first event's time in the trace, against the clock
// read just before the command started) and to its "tracing pid" line
// (after the census), with the page cache and heapscope's caches warm, or
// cold (-cold: caches dropped before each run, as root). With -phases it
// also starts the eBPF tracer in this process and prints where its start
// goes (ebpf.Tracer.Phases). It also attaches to a program of one second
// a tenth of a second after its start, and says whether it was traced.
//
//	go run ./bench/attachstart [-reps 5] [-cold] [-phases] [-heapscope [LABEL=]BIN,...] [-o bench/RESULTS-attach-start.md]
//
// Several binaries (-heapscope before=A,after=B) are run in turn in each
// repetition, so that they see the same load.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/heapscope/heapscope/bench/internal/benchutil"
	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/internal/ebpf"
	"github.com/heapscope/heapscope/internal/testutil"
)

func main() {
	reps := flag.Int("reps", 5, "repetitions")
	cold := flag.Bool("cold", false, "drop the page cache (and heapscope's unwind cache) before each run")
	phases := flag.Bool("phases", false, "also start the tracer in this process and print its phases")
	bins := flag.String("heapscope", "", "heapscope binaries, [LABEL=]PATH comma-separated (default: built from ./cmd/heapscope)")
	out := flag.String("o", "", "append the results to this file")
	flag.Parse()
	if err := run(*reps, *cold, *phases, *bins, *out); err != nil {
		fmt.Fprintln(os.Stderr, "attachstart:", err)
		os.Exit(1)
	}
}

func run(reps int, cold, phases bool, binList, out string) error {
	tmp, err := os.MkdirTemp("", "attachstart-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	defer testutil.Cleanup()
	bins, err := benchutil.Builds(binList, tmp)
	if err != nil {
		return err
	}
	target, err := testutil.Build("attach_start", testutil.Options{})
	if err != nil {
		return err
	}
	var rep bytes.Buffer
	w := io.MultiWriter(os.Stdout, &rep)
	mode := "warm"
	if cold {
		mode = "cold (page cache dropped before each run)"
	}
	fmt.Fprintf(w, "\n## %s, %s\n\n", time.Now().UTC().Format("2006-01-02 15:04 MST"), mode)
	fmt.Fprintf(w, "Machine: %s; load average %s\n\n", benchutil.Machine(), benchutil.LoadAvg())
	fmt.Fprintf(w, "Command: `go run ./bench/attachstart -reps %d%s%s -heapscope %s`\n\n", reps, flagIf(cold, " -cold"), flagIf(phases, " -phases"), labels(bins))

	if phases {
		if err := inProcess(w, target, reps, cold); err != nil {
			return err
		}
	}

	first := make([][]float64, len(bins))
	line := make([][]float64, len(bins))
	for i := 0; i < reps; i++ {
		for j, b := range bins {
			f, l, err := oneAttach(b.Path, target, tmp, 5, 300*time.Millisecond, cold)
			if err != nil {
				return fmt.Errorf("%s: %w", b.Label, err)
			}
			first[j], line[j] = append(first[j], f), append(line[j], l)
		}
	}
	fmt.Fprintf(w, "`heapscope attach -p PID -o T --duration 1s -q` to a running `attach_start 5`, %d runs of each build, in turn (ms):\n\n", reps)
	fmt.Fprintf(w, "| build | command → first event traced: median | min | max | command → \"tracing pid\" (after the census): median | min | max |\n|---|---|---|---|---|---|---|\n")
	for j, b := range bins {
		fmt.Fprintf(w, "| %s | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f |\n", b.Label,
			benchutil.Median(first[j]), slices.Min(first[j]), slices.Max(first[j]), benchutil.Median(line[j]), slices.Min(line[j]), slices.Max(line[j]))
	}
	fmt.Fprintln(w)

	for _, b := range bins {
		traced := 0
		for i := 0; i < reps; i++ {
			f, _, err := oneAttach(b.Path, target, tmp, 1, 100*time.Millisecond, cold)
			if err == nil && f > 0 {
				traced++
			} else if err != nil {
				fmt.Fprintf(w, "%s, run %d: %v\n", b.Label, i, err)
			}
		}
		fmt.Fprintf(w, "%s: a program of one second attached 0.1 s after its start traced in %d of %d runs.\n\n", b.Label, traced, reps)
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

func labels(bins []benchutil.Build) string {
	var s []string
	for _, b := range bins {
		s = append(s, b.Label+"=BIN")
	}
	return strings.Join(s, ",")
}

func flagIf(b bool, s string) string {
	if b {
		return s
	}
	return ""
}

// oneAttach starts the target for secs seconds, attaches to it after wait,
// and returns the milliseconds from the command to the first event in the
// trace (0 if none) and to the "tracing pid" line (0 if none came).
func oneAttach(bin, target, tmp string, secs int, wait time.Duration, cold bool) (float64, float64, error) {
	if cold {
		dropCaches()
	}
	tg := exec.Command(target, fmt.Sprint(secs))
	if err := tg.Start(); err != nil {
		return 0, 0, err
	}
	defer tg.Wait()
	time.Sleep(wait)
	trace := filepath.Join(tmp, fmt.Sprintf("t-%d.hst", tg.Process.Pid))
	defer os.Remove(trace)
	cmd := exec.Command(bin, "attach", "-p", fmt.Sprint(tg.Process.Pid), "-o", trace, "--duration", "1s", "-q")
	pr, pw, err := os.Pipe()
	if err != nil {
		return 0, 0, err
	}
	cmd.Stderr = pw
	start := monotonic()
	if err := cmd.Start(); err != nil {
		return 0, 0, err
	}
	pw.Close()
	var line float64
	var stderr bytes.Buffer
	buf := make([]byte, 4096)
	for {
		n, err := pr.Read(buf)
		if n > 0 {
			if line == 0 && bytes.Contains(append(stderr.Bytes(), buf[:n]...), []byte("tracing pid")) {
				line = float64(monotonic()-start) / 1e6
			}
			stderr.Write(buf[:n])
		}
		if err != nil {
			break
		}
	}
	pr.Close()
	if err := cmd.Wait(); err != nil {
		if secs > 1 { // a short program may end first: that is measured
			return 0, 0, fmt.Errorf("heapscope attach: %v: %s", err, stderr.String())
		}
	}
	t0, err := benchutil.FirstEvent(trace)
	if err != nil || t0 == 0 {
		if secs == 1 {
			return 0, line, fmt.Errorf("no event traced (%v): %s", err, strings.TrimSpace(stderr.String()))
		}
		return 0, line, fmt.Errorf("%s: %v", trace, err)
	}
	return float64(t0-start) / 1e6, line, nil
}

// inProcess starts the eBPF tracer here, attaches it to the target, and
// prints the median of each phase (ebpf.Tracer.Phases) over reps starts.
func inProcess(w io.Writer, target string, reps int, cold bool) error {
	took := map[string][]float64{}
	var order []string
	var total []float64
	for i := 0; i < reps; i++ {
		if cold {
			dropCaches()
		}
		tg := exec.Command(target, "3")
		if err := tg.Start(); err != nil {
			return err
		}
		time.Sleep(100 * time.Millisecond)
		start := time.Now()
		t, err := ebpf.New(ebpf.Config{UnwindTables: true}, event.Discard)
		if err != nil {
			tg.Process.Kill()
			tg.Wait()
			return err
		}
		err = t.Attach(tg.Process.Pid)
		total = append(total, float64(time.Since(start).Microseconds())/1000)
		ph := t.Phases()
		t.Close()
		tg.Process.Kill()
		tg.Wait()
		if err != nil {
			return err
		}
		for _, p := range ph {
			if _, ok := took[p.Name]; !ok {
				order = append(order, p.Name)
			}
			took[p.Name] = append(took[p.Name], float64(p.Took.Microseconds())/1000)
		}
	}
	fmt.Fprintf(w, "Phases of `ebpf.New(Config{UnwindTables: true})` + `Attach(pid of attach_start)` in one process, median of %d (ms; phases may overlap):\n\n", reps)
	fmt.Fprintf(w, "| phase | ms |\n|---|---|\n")
	for _, n := range order {
		fmt.Fprintf(w, "| %s | %.1f |\n", n, benchutil.Median(took[n]))
	}
	fmt.Fprintf(w, "| **New + Attach** | **%.1f** |\n\n", benchutil.Median(total))
	return nil
}

// dropCaches empties the page cache (root) and heapscope's unwind cache.
func dropCaches() {
	unix.Sync()
	os.WriteFile("/proc/sys/vm/drop_caches", []byte("3\n"), 0)
	if d, err := os.UserCacheDir(); err == nil {
		os.RemoveAll(filepath.Join(d, "heapscope", "unwind"))
	}
}

func monotonic() int64 {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}
