// Command programs measures heapscope against heaptrack on real programs
// (sqlite3 and python3): wall time of the traced run against an untraced
// one, and the size of each tracer's trace per event, in one run,
// interleaved, over several repetitions. It writes bench/RESULTS-programs.md.
//
//	go run ./bench/programs [-reps 5] [-o bench/RESULTS-programs.md]
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
	"strings"
	"time"

	"github.com/heapscope/heapscope/bench/internal/benchutil"

	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/tracefile"
)

// A mode runs a program and returns the trace it left ("" for none).
type mode struct {
	name string
	run  func(e *env, p benchutil.Program) (trace string, err error)
}

type env struct {
	heapscope string
	tmp       string
}

var modes = []mode{
	{"untraced", func(e *env, p benchutil.Program) (string, error) {
		return "", e.exec(p, p.Argv)
	}},
	{"heaptrack", func(e *env, p benchutil.Program) (string, error) {
		out := filepath.Join(e.tmp, "ht-"+p.Name)
		err := e.exec(p, append([]string{"heaptrack", "-o", out}, p.Argv...))
		return out + ".zst", err
	}},
	{"heapscope run (default: tables)", func(e *env, p benchutil.Program) (string, error) {
		out := filepath.Join(e.tmp, "hs-tables-"+p.Name+".hst")
		return out, e.exec(p, append([]string{e.heapscope, "run", "-q", "-o", out, "--"}, p.Argv...))
	}},
	{"heapscope run (fp)", func(e *env, p benchutil.Program) (string, error) {
		out := filepath.Join(e.tmp, "hs-fp-"+p.Name+".hst")
		return out, e.exec(p, append([]string{e.heapscope, "run", "-q", "--unwind", "fp", "-o", out, "--"}, p.Argv...))
	}},
	{"heapscope run (dwarf)", func(e *env, p benchutil.Program) (string, error) {
		out := filepath.Join(e.tmp, "hs-dwarf-"+p.Name+".hst")
		return out, e.exec(p, append([]string{e.heapscope, "run", "-q", "--unwind", "dwarf", "-o", out, "--"}, p.Argv...))
	}},
}

func (e *env) exec(p benchutil.Program, argv []string) error {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), p.Env...)
	cmd.Stdout = io.Discard
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%q: %v: %s", argv, err, stderr.String())
	}
	return nil
}

type result struct {
	walls         []float64 // seconds
	bytes, events uint64    // of the last trace
}

func main() {
	reps := flag.Int("reps", 5, "repetitions of each measurement")
	outFile := flag.String("o", "bench/RESULTS-programs.md", "results file to write ('' for none)")
	flag.Parse()
	if err := run(*reps, *outFile); err != nil {
		fmt.Fprintln(os.Stderr, "programs:", err)
		os.Exit(1)
	}
}

func run(reps int, outFile string) error {
	tmp, err := os.MkdirTemp("", "heapscope-bench-programs-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	e := &env{tmp: tmp, heapscope: filepath.Join(tmp, "heapscope")}
	if err := benchutil.BuildHeapscope(e.heapscope); err != nil {
		return err
	}

	results := map[string]map[string]*result{}
	for _, p := range benchutil.Programs {
		results[p.Name] = map[string]*result{}
		for _, m := range modes {
			results[p.Name][m.name] = &result{}
		}
	}
	for r := 0; r < reps; r++ {
		for _, p := range benchutil.Programs {
			for _, m := range modes {
				start := time.Now()
				trace, err := m.run(e, p)
				wall := time.Since(start).Seconds()
				if err != nil {
					return fmt.Errorf("%s under %s: %w", p.Name, m.name, err)
				}
				res := results[p.Name][m.name]
				res.walls = append(res.walls, wall)
				if trace != "" {
					if res.bytes, res.events, err = traceSize(trace); err != nil {
						return fmt.Errorf("%s under %s: %w", p.Name, m.name, err)
					}
					os.Remove(trace)
				}
				fmt.Fprintf(os.Stderr, "rep %d/%d  %-8s %-22s %7.3fs\n", r+1, reps, p.Name, m.name, wall)
			}
		}
	}

	var table bytes.Buffer
	fmt.Fprintf(&table, "| program | mode | median wall | × untraced | × heaptrack (wall) | trace bytes | events | bytes/event | × heaptrack (bytes/event) |\n")
	fmt.Fprintf(&table, "|---|---|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, p := range benchutil.Programs {
		base := benchutil.Median(results[p.Name]["untraced"].walls)
		ht := results[p.Name]["heaptrack"]
		htWall := benchutil.Median(ht.walls)
		htBPE := perEvent(ht.bytes, ht.events)
		for _, m := range modes {
			res := results[p.Name][m.name]
			w := benchutil.Median(res.walls)
			size, events, bpe, ratio := "–", "–", "–", "–"
			if res.events > 0 {
				size, events = fmt.Sprint(res.bytes), fmt.Sprint(res.events)
				bpe = fmt.Sprintf("%.3f", perEvent(res.bytes, res.events))
				ratio = fmt.Sprintf("%.2f", perEvent(res.bytes, res.events)/htBPE)
			}
			fmt.Fprintf(&table, "| %s | %s | %.3fs | %.2f | %.3f | %s | %s | %s | %s |\n",
				p.Name, m.name, w, w/base, w/htWall, size, events, bpe, ratio)
		}
	}
	os.Stdout.Write(table.Bytes())
	if outFile == "" {
		return nil
	}
	var doc bytes.Buffer
	fmt.Fprintf(&doc, "# Real programs: heapscope run against heaptrack\n\nWritten by `go run ./bench/programs -reps %d`.\n\n", reps)
	fmt.Fprintf(&doc, "- date: %s\n- machine: %s\n", time.Now().UTC().Format("2006-01-02 15:04 UTC"), benchutil.Machine())
	fmt.Fprintf(&doc, "- method: each program runs untraced, under `heaptrack`, and under `heapscope run` (its default unwind tables, frame-pointer and DWARF stacks), interleaved, %d times; wall times are medians and include the tracer's start and end (heaptrack's interpreter, heapscope's collector and file), not heapscope's summary (`-q`)\n", reps)
	fmt.Fprintf(&doc, "- events: heaptrack's are the `+` (allocation) and `-` (free) records of its trace; heapscope's are the events in its trace (it keeps a time, thread and address for each)\n\n")
	for _, p := range benchutil.Programs {
		fmt.Fprintf(&doc, "- %s: `%s`", p.Name, strings.Join(p.Env, " "))
		fmt.Fprintf(&doc, " `%q`\n", p.Argv)
	}
	fmt.Fprintln(&doc)
	doc.Write(table.Bytes())
	return os.WriteFile(outFile, doc.Bytes(), 0o644)
}

// traceSize returns a trace's size and number of events.
func traceSize(path string) (size, events uint64, err error) {
	fi, err := os.Stat(path)
	if err != nil {
		return 0, 0, err
	}
	if strings.HasSuffix(path, ".zst") {
		events, err = heaptrackEvents(path)
		return uint64(fi.Size()), events, err
	}
	r, err := tracefile.Open(path)
	if err != nil {
		return 0, 0, err
	}
	defer r.Close()
	c := &counter{Sink: event.Discard}
	err = r.Replay(c, tracefile.Window{})
	return uint64(fi.Size()), c.n, err
}

type counter struct {
	event.Sink
	n uint64
}

func (c *counter) Events(evs []event.Event) error { c.n += uint64(len(evs)); return nil }

// heaptrackEvents counts the allocation and free records of a heaptrack trace.
func heaptrackEvents(path string) (uint64, error) {
	cmd := exec.Command("zstd", "-dc", path)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return 0, err
	}
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("zstd (apt-get install zstd): %w", err)
	}
	var n uint64
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 1<<20), 1<<26)
	for sc.Scan() {
		if l := sc.Bytes(); len(l) > 1 && (l[0] == '+' || l[0] == '-') && l[1] == ' ' {
			n++
		}
	}
	if err := cmd.Wait(); err != nil {
		return 0, err
	}
	return n, sc.Err()
}

func perEvent(bytes, events uint64) float64 {
	if events == 0 {
		return 0
	}
	return float64(bytes) / float64(events)
}
