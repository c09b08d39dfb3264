// Command exportbench measures what exporting one interval heap profile
// costs: the CPU time to build and encode it and the bytes it puts on the
// wire, for an interval with N live stacks (issue 24's goal: 10,000 stacks
// in at most 50 ms of CPU and 2 MiB).
//
//	go run ./bench/exportbench [-stacks 10000] [-depth 14] [-reps 9] [-o bench/RESULTS-export.md]
//
// The interval is real: testdata/workloads/export_stacks.c leaves N blocks
// live, each from a stack of its own 2*DEPTH+2 frames deep (plus the C
// runtime's), recorded with the preload provider as `heapscope run` records
// and read back with report.Load, whose symbolizer is then warm, as a
// session's is from its second interval on. Each repetition starts after a
// GC and counts the process's CPU time (getrusage: user and system, the
// encoder's garbage collection included).
//
// Variants: OTLP with every frame symbolized (functions, files, lines,
// inlined calls) or with addresses and mappings only (for a backend that
// symbolizes by build-id), as the protobuf body of one
// /v1development/profiles request (and, for information, its gzip size);
// pprof, gzipped as Pyroscope's /ingest takes it; and FromProfile, the
// mapping of a trace's model onto an interval (`heapscope export`'s path,
// not a session's).
package main

import (
	"bytes"
	"compress/gzip"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/heapscope/heapscope/bench/internal/benchutil"
	"github.com/heapscope/heapscope/export"
	"github.com/heapscope/heapscope/internal/preload"
	"github.com/heapscope/heapscope/internal/testutil"
	"github.com/heapscope/heapscope/report"
	"github.com/heapscope/heapscope/symbolize"
)

func main() {
	stacks := flag.Int("stacks", 10000, "live stacks in the interval")
	depth := flag.Int("depth", 14, "levels of the call tree (2 frames each)")
	reps := flag.Int("reps", 9, "repetitions of each measurement")
	out := flag.String("o", "bench/RESULTS-export.md", "results file ('' for none)")
	flag.Parse()
	if err := run(*stacks, *depth, *reps, *out); err != nil {
		fmt.Fprintln(os.Stderr, "exportbench:", err)
		os.Exit(1)
	}
}

type result struct {
	name      string
	cpu, wall []float64 // ms
	bytes, gz int
}

func run(nstacks, depth, reps int, out string) error {
	defer testutil.Cleanup()
	bin, err := testutil.Build("export_stacks", testutil.Options{})
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "exportbench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "stacks.hst")
	if err := record(path, bin, fmt.Sprint(nstacks), fmt.Sprint(depth)); err != nil {
		return err
	}
	rep, err := report.Load(path, report.LoadOptions{})
	if err != nil {
		return err
	}
	clock := export.Clock{MonoStart: rep.Trace.Start, WallStart: rep.Trace.WallStart}
	host := export.Host{Name: "bench", Arch: runtime.GOARCH}
	iv := export.FromProfile(rep.Profile, clock, host)
	live, frames := 0, 0
	for _, p := range iv.Processes {
		for _, s := range p.Stacks {
			if s.LiveObjects > 0 {
				live++
			}
			frames += len(s.Frames)
		}
	}
	if live < nstacks {
		return fmt.Errorf("the trace has %d live stacks, want at least %d", live, nstacks)
	}
	sym := export.Options{Resolver: rep.Resolver(), Trim: symbolize.TrimAllocator, Version: "bench"}

	var results []result
	measure := func(name string, f func() ([]byte, error)) error {
		r := result{name: name}
		for i := 0; i < reps+1; i++ { // the first warms up, and is not counted
			runtime.GC()
			c0, w0 := cpu(), time.Now()
			b, err := f()
			c1, w1 := cpu(), time.Now()
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			if i == 0 {
				r.bytes = len(b)
				r.gz = gzipLen(b)
				continue
			}
			r.cpu = append(r.cpu, float64(c1-c0)/1e6)
			r.wall = append(r.wall, float64(w1.Sub(w0))/1e6)
		}
		results = append(results, r)
		return nil
	}
	otlp := func(o export.Options) func() ([]byte, error) {
		return func() ([]byte, error) { return export.MarshalOTLP(iv, o) }
	}
	if err := measure("OTLP, symbolized", otlp(sym)); err != nil {
		return err
	}
	if err := measure("OTLP, addresses only", otlp(export.Options{Version: "bench"})); err != nil {
		return err
	}
	if err := measure("pprof (gzipped), symbolized", func() ([]byte, error) {
		var buf bytes.Buffer
		err := export.WritePprof(&buf, iv, 0, sym)
		return buf.Bytes(), err
	}); err != nil {
		return err
	}
	if err := measure("FromProfile (trace model to interval)", func() ([]byte, error) {
		export.FromProfile(rep.Profile, clock, host)
		return nil, nil
	}); err != nil {
		return err
	}

	var b strings.Builder
	fmt.Fprintf(&b, "# The cost of an interval export\n\n")
	fmt.Fprintf(&b, "Written by `go run ./bench/exportbench -stacks %d -depth %d -reps %d` on %s. Machine: %s.\n\n",
		nstacks, depth, reps, time.Now().UTC().Format("2006-01-02"), benchutil.Machine())
	fmt.Fprintf(&b, "The interval: `testdata/workloads/export_stacks.c` with %d live blocks, each from a stack of its own; "+
		"%d stacks in the trace, %d of them live, %d frames in all (%.1f per stack), recorded with the preload provider. "+
		"CPU is the process's user+system time around one export (after a GC; the encoder's own collections count), "+
		"median and range of %d repetitions after one to warm up; the symbolizer is warm (as a session's is from its second "+
		"interval on). Goal (issue 24): 10,000 live stacks in at most 50 ms of CPU and 2 MiB on the wire.\n\n",
		nstacks, countStacks(iv), live, frames, float64(frames)/float64(max(countStacks(iv), 1)), reps)
	fmt.Fprintf(&b, "| variant | CPU ms (median, range) | wall ms (median) | bytes on the wire | gzipped |\n|---|---|---|---|---|\n")
	for _, r := range results {
		wire, gz := "–", "–"
		if r.bytes > 0 {
			wire = fmt.Sprintf("%d (%.2f MiB)", r.bytes, float64(r.bytes)/(1<<20))
			gz = fmt.Sprintf("%d", r.gz)
		}
		fmt.Fprintf(&b, "| %s | %.1f (%.1f–%.1f) | %.1f | %s | %s |\n", r.name, benchutil.Median(r.cpu),
			slices.Min(r.cpu), slices.Max(r.cpu), benchutil.Median(r.wall), wire, gz)
	}
	fmt.Print(b.String())
	if out != "" {
		return os.WriteFile(out, []byte(b.String()), 0o644)
	}
	return nil
}

func countStacks(iv *export.Interval) (n int) {
	for _, p := range iv.Processes {
		n += len(p.Stacks)
	}
	return n
}

func gzipLen(b []byte) int {
	if len(b) == 0 {
		return 0
	}
	var buf bytes.Buffer
	w := gzip.NewWriter(&buf)
	w.Write(b)
	w.Close()
	return buf.Len()
}

// cpu is the process's user and system time, in ns.
func cpu() int64 {
	var ru unix.Rusage
	unix.Getrusage(unix.RUSAGE_SELF, &ru)
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// record runs bin under the preload provider into a trace file at path.
func record(path, bin string, args ...string) error {
	return benchutil.Record(path, "exportbench", preload.Config{}, exec.Command(bin, args...))
}
