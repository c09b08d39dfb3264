// Command exportsession measures what --export adds to a traced program's
// cost per malloc+free pair (issue 24: within 2% at a 10 s interval): churn
// (testdata/workloads/churn.c) launched under a preload session that writes
// a trace, in two variants interleaved in each rep:
//
//	off     the session as `heapscope run -o FILE --no-leak-check` runs it
//	export  the same with Export otlp=http://… (ExportInterval -interval):
//	        the totals kept for the whole run, an interval cut and sent
//	        every interval and at the end
//
// The exports go to an HTTP server in this process that reads each request
// and answers 200 (the session's process pays for it too: a collector's
// own cost is not the session's, so this overstates the export's). Per
// pair: churn's own figures (the wall time of its timed loop, and its CPU),
// and the CPU of both processes (the session's and the program's) over the
// whole run.
//
// Usage (repo root): go run ./bench/exportsession [-n 100000000] [-reps 5]
// [-interval 10s] [-sample 0]
package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/heapscope/heapscope"
)

func main() {
	n := flag.Int("n", 100000000, "malloc+free pairs of churn")
	reps := flag.Int("reps", 5, "repetitions of each variant")
	interval := flag.Duration("interval", 10*time.Second, "the export interval")
	sample := flag.String("sample", "0", "the sessions' --sample (0: every event)")
	flag.Parse()
	rate, err := heapscope.ParseSize(*sample)
	if err != nil {
		log.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "exportsession-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	churn := filepath.Join(dir, "churn")
	if out, err := exec.Command("gcc", "-O2", "-g", "-fno-omit-frame-pointer", "-pthread", "-o", churn, "testdata/workloads/churn.c").CombinedOutput(); err != nil {
		log.Fatalf("gcc: %v: %s (run from the repository's root)", err, out)
	}

	var received, bytesIn atomic.Int64
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	go http.Serve(l, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		k, _ := io.Copy(io.Discard, r.Body)
		received.Add(1)
		bytesIn.Add(k)
	}))
	target := "otlp=http://" + l.Addr().String()

	fmt.Printf("churn %d pairs, 1 thread, preload provider, trace file written, sample %v, export interval %v; %s %s/%s\n\n",
		*n, rate, *interval, runtime.Version(), runtime.GOOS, runtime.GOARCH)
	fmt.Println("| rep | variant | churn ns/pair (wall) | churn CPU ns/pair | session CPU s | program CPU s | total CPU ns/pair | wall s | exports |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|")
	type res struct{ wall, cpu, total []float64 }
	results := map[string]*res{"off": {}, "export": {}}
	for rep := 1; rep <= *reps; rep++ {
		for _, v := range []string{"off", "export"} {
			// No leak check at the exit: it would read the trace file back in
			// one variant and use the exported totals in the other.
			p := heapscope.Properties{File: filepath.Join(dir, v+".hst"), Sample: rate, LeakCheck: heapscope.LeakCheckOff}
			if v == "export" {
				p.Export, p.ExportInterval = []string{target}, *interval
			}
			before := received.Load()
			m, err := measure(churn, *n, p)
			if err != nil {
				log.Fatal(err)
			}
			r := results[v]
			r.wall = append(r.wall, m.nsPerPair)
			r.cpu = append(r.cpu, m.cpuPerPair)
			total := (m.sess + m.child) * 1e9 / float64(*n)
			r.total = append(r.total, total)
			fmt.Printf("| %d | %s | %.1f | %.1f | %.2f | %.2f | %.1f | %.2f | %d |\n", rep, v, m.nsPerPair, m.cpuPerPair,
				m.sess, m.child, total, m.wall.Seconds(), received.Load()-before)
		}
	}
	fmt.Println("\n| per pair (median) | off | export | export vs off | median of the reps' export/off |")
	fmt.Println("|---|---|---|---|---|")
	for _, row := range []struct {
		name string
		get  func(*res) []float64
	}{
		{"churn wall ns", func(r *res) []float64 { return r.wall }},
		{"churn CPU ns", func(r *res) []float64 { return r.cpu }},
		{"session + program CPU ns", func(r *res) []float64 { return r.total }},
	} {
		offs, exps := row.get(results["off"]), row.get(results["export"])
		a, b := median(offs), median(exps)
		// Each rep's pair ran one after the other: their ratio cancels
		// the machine's slower and faster spells better than the medians.
		var ratios []float64
		for i := range offs {
			ratios = append(ratios, 100*(exps[i]/offs[i]-1))
		}
		fmt.Printf("| %s | %.1f | %.1f | %+.1f%% | %+.1f%% |\n", row.name, a, b, 100*(b-a)/a, median(ratios))
	}
	fmt.Printf("\n%d exports received, %d bytes\n", received.Load(), bytesIn.Load())
}

type measurement struct {
	nsPerPair, cpuPerPair float64
	sess, child           float64
	wall                  time.Duration
}

// measure runs churn under a session with properties p.
func measure(churn string, n int, p heapscope.Properties) (measurement, error) {
	var m measurement
	os.Remove(p.File)
	cmd := exec.Command(churn, strconv.Itoa(n), "1")
	var out bytes.Buffer
	cmd.Stdout = &out
	runtime.GC()
	self0, kids0 := usage()
	start := time.Now()
	s, err := heapscope.Launch(fmt.Sprintf("exportsession-%d", os.Getpid()), p, cmd)
	if err != nil {
		return m, err
	}
	if err := s.Wait(); err != nil {
		return m, err
	}
	exited, _ := s.ProgramExited()
	<-exited
	m.wall = time.Since(start)
	self1, kids1 := usage()
	m.sess, m.child = self1-self0, kids1-kids0
	for _, e := range s.Status().Exports {
		if e.Dropped != 0 {
			return m, fmt.Errorf("exports dropped: %+v", e)
		}
	}
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 2 {
			continue
		}
		v, _ := strconv.ParseFloat(f[1], 64)
		switch f[0] {
		case "ns_per_pair":
			m.nsPerPair = v
		case "cpu_ns_per_pair":
			m.cpuPerPair = v
		}
	}
	if m.nsPerPair == 0 {
		return m, fmt.Errorf("churn said %q", out.String())
	}
	return m, nil
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
