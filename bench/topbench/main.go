// Command topbench measures what `heapscope top`'s totals cost a session:
// the CPU of a preload session (the collector in this process and the
// traced program, its child: churn, or -prog a real program of
// bench/programs) in four variants, interleaved in each rep:
//
//	off     no Top client: the session as `heapscope run` runs it
//	on      one Top query at the start and no more: the totals kept for
//	        the whole run, as an always-on aggregate would be
//	polled  a Top query every -interval (top's default, 1s), as `top`
//	        asks: the totals kept, and each query answered
//	late    polled, from one interval after the start: the first query
//	        reads back what the trace file holds then (a top joining a
//	        running session)
//
// Usage (repo root): go run ./bench/topbench [-n 20000000] [-threads 1]
// [-prog churn|sqlite3|python3] [-reps 3] [-variants off,on,polled,late]
// [-cpuprofile file]. The
// shell script beside it (run.sh) measures the whole CLI (`top --`, a
// joined `top NAME`) and eBPF's aggregate mode.
package main

import (
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/heapscope/heapscope"
	"github.com/heapscope/heapscope/bench/internal/benchutil"
)

func main() {
	n := flag.Int("n", 20000000, "malloc+free pairs of churn, per thread")
	threads := flag.Int("threads", 1, "churn's threads")
	prog := flag.String("prog", "churn", "the workload: churn, or a real program of bench/programs (sqlite3, python3)")
	reps := flag.Int("reps", 3, "repetitions of each variant")
	interval := flag.Duration("interval", time.Second, "the polled variant's query interval")
	only := flag.String("variants", "off,on,polled,late", "the variants to run, in this order")
	cpuprofile := flag.String("cpuprofile", "", "write the session process's CPU profile over all runs to this file")
	flag.Parse()
	defer benchutil.CPUProfile(*cpuprofile)()
	dir, err := os.MkdirTemp("", "topbench-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	var argv, env []string
	switch *prog {
	case "churn":
		churn := filepath.Join(dir, "churn")
		if out, err := exec.Command("gcc", "-O2", "-g", "-fno-omit-frame-pointer", "-pthread", "-o", churn, "testdata/workloads/churn.c").CombinedOutput(); err != nil {
			log.Fatalf("gcc: %v: %s (run from the repository's root)", err, out)
		}
		argv = []string{churn, fmt.Sprint(*n), fmt.Sprint(*threads)}
	default:
		for _, p := range benchutil.Programs {
			if p.Name == *prog {
				argv, env = p.Argv, p.Env
			}
		}
		if argv == nil {
			log.Fatalf("-prog %q: not churn or a program of bench/programs", *prog)
		}
	}
	variants := strings.Split(*only, ",")
	cpu := map[string][]float64{}
	what := *prog + " (bench/programs)"
	if *prog == "churn" {
		what = fmt.Sprintf("churn %d pairs in each of %d threads", *n, *threads)
	}
	fmt.Printf("%s; CPU seconds (user+sys) of the session's process and of the program\n\n", what)
	fmt.Println("| rep | variant | session CPU | program CPU | total | wall |")
	fmt.Println("|---|---|---|---|---|---|")
	for rep := 1; rep <= *reps; rep++ {
		for _, v := range variants {
			sess, child, wall, err := measure(argv, env, v, *interval, filepath.Join(dir, v+".hst"))
			if err != nil {
				log.Fatal(err)
			}
			cpu[v] = append(cpu[v], sess+child)
			fmt.Printf("| %d | %s | %.2fs | %.2fs | %.2fs | %.2fs |\n", rep, v, sess, child, sess+child, wall.Seconds())
		}
	}
	fmt.Println("\n| variant | median total CPU | added to off |")
	fmt.Println("|---|---|---|")
	base := median(cpu["off"])
	for _, v := range variants {
		m := median(cpu[v])
		if base == 0 {
			fmt.Printf("| %s | %.2fs | |\n", v, m)
			continue
		}
		fmt.Printf("| %s | %.2fs | %+.1f%% |\n", v, m, 100*(m-base)/base)
	}
}

// measure runs the program under a session in variant v and returns the CPU
// seconds of this process and of its children over the run.
func measure(argv, env []string, v string, interval time.Duration, trace string) (sess, child float64, wall time.Duration, err error) {
	os.Remove(trace)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	runtime.GC() // the previous run's garbage is not this one's cost
	self0, kids0 := usage()
	start := time.Now()
	s, err := heapscope.Launch(fmt.Sprintf("topbench-%d", os.Getpid()), heapscope.Properties{File: trace}, cmd)
	if err != nil {
		return 0, 0, 0, err
	}
	if v == "on" || v == "polled" {
		if _, err := s.Top(heapscope.TopQuery{Client: "bench", N: 10}); err != nil {
			return 0, 0, 0, err
		}
	}
	if v == "polled" || v == "late" {
		t := time.NewTicker(interval)
	poll:
		for {
			select {
			case <-t.C:
				if _, err := s.Top(heapscope.TopQuery{Client: "bench", N: 10}); err != nil {
					return 0, 0, 0, err
				}
			case <-s.Done():
				break poll
			}
		}
		t.Stop()
	}
	if err := s.Wait(); err != nil {
		return 0, 0, 0, err
	}
	exited, _ := s.ProgramExited()
	<-exited
	wall = time.Since(start)
	self1, kids1 := usage()
	return self1 - self0, kids1 - kids0, wall, nil
}

// usage returns the CPU seconds of this process and of its waited-for
// children.
func usage() (self, children float64) {
	sec := func(who int) float64 {
		var ru syscall.Rusage
		syscall.Getrusage(who, &ru)
		return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
	}
	return sec(syscall.RUSAGE_SELF), sec(syscall.RUSAGE_CHILDREN)
}

func median(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s) == 0 {
		return 0
	}
	return s[len(s)/2]
}
