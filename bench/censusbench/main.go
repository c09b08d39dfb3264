// Command censusbench measures the census of glibc's heap (package census):
// how long it takes and how long the process stays stopped, per million
// chunks, on heaps of testdata/workloads/census_bench.c (N blocks of a size
// mix, from T threads, one in four freed) and, with -python, Debian's
// python3.11 after it built a dict of N/3 str of 600 to 1000 bytes (malloc's,
// not pymalloc's). Each configuration is
// censused -reps times; the table gives medians.
//
//	read     what Read took: reading the arenas, heaps, mmapped chunks
//	         and tcaches while the process is stopped
//	pause    how long the process was stopped: the stop (every thread
//	         seized and interrupted), Read, and the resume
//	finish   what Finish took, after the resume: the free lists followed
//	         through what Read kept, each chunk's state
//	CPU      this process's CPU time over the census (the stop, Take, the
//	         Go runtime's work during it): steadier than wall time on a
//	         shared machine
//	read (last column) bytes of the process's memory read
//
// Usage (repo root, as root): go run ./bench/censusbench [-n 1000000]
// [-mixes small,mixed,large] [-threads 1,4] [-reps 5] [-python].
package main

import (
	"bufio"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/heapscope/heapscope/bench/internal/benchutil"
	"github.com/heapscope/heapscope/census"
	"github.com/heapscope/heapscope/internal/testutil"
)

func main() {
	n := flag.Int("n", 1000000, "blocks the workload allocates")
	mixes := flag.String("mixes", "small,mixed,large", "size mixes of census_bench.c")
	threads := flag.String("threads", "1,4", "thread counts")
	reps := flag.Int("reps", 5, "censuses of each heap")
	python := flag.Bool("python", true, "also python3.11 with a dict")
	rss := flag.Bool("rss", false, "also read smaps and pagemap (TakeOptions.RSS)")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the censuses to this file")
	flag.Parse()
	defer benchutil.CPUProfile(*cpuprofile)()
	defer testutil.Cleanup()
	bin := benchutil.MustBuild("census_bench", testutil.Options{})
	fmt.Printf("machine: %s\n\n", benchutil.Machine())
	fmt.Printf("| heap | chunks | read: median (min) | pause: median (min) | finish: median | CPU: median | per M chunks: pause (min), read + finish, CPU | read |\n|---|---|---|---|---|---|---|---|\n")
	for _, mix := range strings.Split(*mixes, ",") {
		for _, ts := range strings.Split(*threads, ",") {
			row(fmt.Sprintf("census_bench %s, %s thread(s)", mix, ts), *reps, *rss,
				exec.Command(bin, strconv.Itoa(*n), mix, ts))
		}
	}
	if *python {
		// str of more than 512 bytes come from malloc, not pymalloc.
		script := fmt.Sprintf("import os\nd = {i: ('%%d-' %% i) * (100 + i %% 60) for i in range(%d)}\nos.write(1, b'ready\\n')\nos.read(0, 1)\n", *n/3)
		row(fmt.Sprintf("python3.11, a dict of %d str of 600-1000 bytes", *n/3), *reps, *rss, exec.Command("/usr/bin/python3.11", "-c", script))
	}
}

// row runs cmd until it says "ready", takes its census reps times, and
// prints a line of the table.
func row(name string, reps int, rss bool, cmd *exec.Cmd) {
	stdin, out := benchutil.StartPiped(cmd)
	defer func() {
		stdin.Close()
		cmd.Wait()
	}()
	if l, err := bufio.NewReader(out).ReadString('\n'); err != nil || l != "ready\n" {
		log.Fatalf("%s: %q %v", name, l, err)
	}
	var took, paused, cpu, finish []float64
	var chunks int
	var bytes uint64
	for i := 0; i < reps; i++ {
		before := cpuTime()
		c, err := census.TakeProcess(cmd.Process.Pid, census.ProcessOptions{TakeOptions: census.TakeOptions{RSS: rss}})
		if err != nil {
			log.Fatalf("%s: %v", name, err)
		}
		cpu = append(cpu, float64(cpuTime()-before))
		if len(c.Problems) > 0 {
			log.Fatalf("%s: %v", name, c.Problems)
		}
		took = append(took, float64(c.Took))
		finish = append(finish, float64(c.Finish))
		paused = append(paused, float64(c.Paused))
		chunks, bytes = len(c.Chunks), c.Bytes
	}
	d := func(x float64) time.Duration { return time.Duration(x).Round(10 * time.Microsecond) }
	m := float64(chunks) / 1e6
	t, p, u, f := benchutil.Median(took), benchutil.Median(paused), benchutil.Median(cpu), benchutil.Median(finish)
	tmin, pmin := slices.Min(took), slices.Min(paused)
	fmt.Printf("| %s | %d | %v (%v) | %v (%v) | %v | %v | %v (%v), %v, %v | %.1f MiB |\n", name, chunks, d(t), d(tmin), d(p), d(pmin), d(f), d(u),
		d(p/m), d(pmin/m), d((t+f)/m), d(u/m), float64(bytes)/(1<<20))
	os.Stdout.Sync()
}

// cpuTime is this process's CPU time, user and system, all threads: the
// census's, the Go runtime's (GC) during it, and the stop's.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
