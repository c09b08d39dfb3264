// Command scanbench measures the heap scan on a real process against
// LeakSanitizer's scan of the same program: testdata/workloads/scan_heap.c
// builds a heap of -mib MiB (blocks of 16 to 1024 bytes, -ptr percent of
// their words pointers to other blocks, one block in ten lost), then
//
//   - heapscope: the process is stopped with internal/stopped, its roots
//     gathered (scan/roots) and its blocks (from its own list) scanned with
//     Memcheck's and LeakSanitizer's rules; it reports the pause the
//     process saw, the scan's wall and CPU time and its throughput over
//     heap plus roots;
//   - LeakSanitizer: the same source built with -fsanitize=leak times its
//     own __lsan_do_leak_check (stopping the world, scanning, classifying),
//     with symbolize=0 and max_leaks=1 so that its report costs little.
//
// Usage (repo root): go run ./bench/scanbench [-mib 256] [-ptr 5,25]
// [-reps 3] [-o bench/RESULTS-scan.md]. Root is needed (ptrace).
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/heapscope/heapscope/bench/internal/benchutil"
	"github.com/heapscope/heapscope/internal/stopped"
	"github.com/heapscope/heapscope/internal/testutil"
	"github.com/heapscope/heapscope/scan"
	"github.com/heapscope/heapscope/scan/roots"
)

func main() {
	mib := flag.Int("mib", 256, "live heap to build, MiB")
	ptrs := flag.String("ptr", "5,25", "percentages of pointer words to try")
	reps := flag.Int("reps", 3, "repetitions")
	only := flag.String("rules", "", "only these rules (Memcheck or LeakSanitizer)")
	out := flag.String("o", "", "append the table to this file")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the scans to this file")
	flag.Parse()
	defer benchutil.CPUProfile(*cpuprofile)()
	log.SetFlags(0)
	defer testutil.Cleanup()

	native := benchutil.MustBuild("scan_heap", testutil.Options{})
	lsan := benchutil.MustBuild("scan_heap", testutil.Options{Flags: []string{"-fsanitize=leak"}})

	var b strings.Builder
	fmt.Fprintf(&b, "\n## %s: `go run ./bench/scanbench -mib %d -ptr %s -reps %d`\n\n", time.Now().Format("2006-01-02"), *mib, *ptrs, *reps)
	fmt.Fprintf(&b, "Machine: %s.\n\n", benchutil.Machine())
	b.WriteString("| pointers | rules | blocks | heap+roots MiB | pause ms | scan wall s (read + classify) | scan CPU s | GiB/s (wall) | GiB/CPU-s | LSan check s | scan / LSan | stop to classes s | stop to classes / LSan |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, p := range strings.Split(*ptrs, ",") {
		type row struct{ pause, wall, cpu, read, classify, total, lsan []float64 }
		rows := map[scan.Rules]*row{scan.Memcheck: {}, scan.LeakSanitizer: {}}
		var nblocks int
		var bytes uint64
		for r := 0; r < *reps; r++ {
			for _, rules := range []scan.Rules{scan.Memcheck, scan.LeakSanitizer} {
				if *only != "" && rules.String() != *only {
					continue
				}
				res := runHeapscope(native, *mib, p, rules)
				nblocks, bytes = res.blocks, res.bytes
				rw := rows[rules]
				rw.pause = append(rw.pause, res.pause.Seconds()*1e3)
				rw.wall = append(rw.wall, res.wall.Seconds())
				rw.cpu = append(rw.cpu, res.cpu.Seconds())
				rw.read = append(rw.read, res.read.Seconds())
				rw.classify = append(rw.classify, res.classify.Seconds())
				rw.total = append(rw.total, res.total.Seconds())
			}
			l := runLSan(lsan, *mib, p)
			rows[scan.Memcheck].lsan = append(rows[scan.Memcheck].lsan, l.Seconds())
			rows[scan.LeakSanitizer].lsan = append(rows[scan.LeakSanitizer].lsan, l.Seconds())
		}
		for _, rules := range []scan.Rules{scan.Memcheck, scan.LeakSanitizer} {
			rw := rows[rules]
			if len(rw.wall) == 0 {
				continue
			}
			gib := float64(bytes) / (1 << 30)
			wall, cpu, ls := benchutil.Median(rw.wall), benchutil.Median(rw.cpu), benchutil.Median(rw.lsan)
			total := benchutil.Median(rw.total)
			fmt.Fprintf(&b, "| %s%% | %v | %d | %.0f | %.1f | %.3f (%.3f + %.3f) | %.3f | %.2f | %.2f | %.3f | %.2f× | %.3f | %.2f× |\n",
				p, rules, nblocks, float64(bytes)/(1<<20), benchutil.Median(rw.pause), wall,
				benchutil.Median(rw.read), benchutil.Median(rw.classify), cpu, gib/wall, gib/cpu, ls, wall/ls, total, total/ls)
		}
	}
	b.WriteString("\nMedians. pause: from the first thread's interrupt to the last detach: Stop, roots gathered, the " +
		"blocks and roots read (process_vm_readv into a buffer populated with huge pages), Resume (Options.AfterRead); the " +
		"classification runs after the process goes on. scan: scan.Scan, read and classify. stop to classes: from the call " +
		"to Stop to the classes (stop, roots, scan). LSan check: " +
		"__lsan_do_leak_check, which stops the threads, scans and classifies in the process.\n")
	fmt.Print(b.String())
	if *out != "" {
		f, err := os.OpenFile(*out, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
		if err != nil {
			log.Fatal(err)
		}
		f.WriteString(b.String())
		f.Close()
	}
}

type result struct {
	blocks         int
	bytes          uint64
	pause, wall    time.Duration
	cpu            time.Duration
	read, classify time.Duration
	total          time.Duration // from Stop to the classes
}

func cpuTime() time.Duration {
	var ru unix.Rusage
	unix.Getrusage(unix.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func start(bin string, env []string, args ...string) (*exec.Cmd, io.WriteCloser, *bufio.Reader) {
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = io.Discard
	in, out := benchutil.StartPiped(cmd)
	return cmd, in, bufio.NewReaderSize(out, 1<<20)
}

func runHeapscope(bin string, mib int, ptr string, rules scan.Rules) result {
	cmd, in, r := start(bin, nil, strconv.Itoa(mib), ptr)
	defer func() { in.Write([]byte("q\n")); cmd.Wait() }()
	var blocks []scan.Block
	pid := 0
	for pid == 0 {
		l, err := r.ReadString('\n')
		if err != nil {
			log.Fatalf("scan_heap: %v", err)
		}
		f := strings.Fields(l)
		switch {
		case len(f) == 3 && f[0] == "block":
			a, _ := strconv.ParseUint(strings.TrimPrefix(f[1], "0x"), 16, 64)
			s, _ := strconv.ParseUint(f[2], 10, 64)
			blocks = append(blocks, scan.Block{Addr: a, Size: s, ID: uint64(len(blocks))})
		case len(f) == 2 && f[0] == "ready":
			pid, _ = strconv.Atoi(f[1])
		}
	}
	tStop := time.Now()
	p, err := stopped.Stop(pid, stopped.Options{MaxPause: time.Minute})
	if err != nil {
		log.Fatal(err)
	}
	rs, _ := roots.Gather(p, roots.Options{})
	c0, t0 := cpuTime(), time.Now()
	res, err := scan.Scan(blocks, p, rs, scan.Options{Rules: rules, AfterRead: func() { p.Resume() }})
	wall, cpu, total := time.Since(t0), cpuTime()-c0, time.Since(tStop)
	p.Resume()
	if err != nil {
		log.Fatal(err)
	}
	if len(res.Unread) > 0 {
		log.Printf("unread: %+v", res.Unread[0])
	}
	var heap uint64
	for _, b := range blocks {
		heap += b.Size
	}
	var rootBytes uint64
	for _, rg := range rs.Ranges {
		rootBytes += rg.Size
	}
	return result{blocks: len(blocks), bytes: heap + rootBytes, pause: p.Paused(), wall: wall, cpu: cpu,
		read: res.ReadTime, classify: res.ClassifyTime, total: total}
}

func runLSan(bin string, mib int, ptr string) time.Duration {
	cmd, in, r := start(bin, []string{"LSAN_OPTIONS=exitcode=0:symbolize=0:max_leaks=1"}, strconv.Itoa(mib), ptr)
	defer func() { in.Write([]byte("q\n")); cmd.Wait() }()
	for {
		l, err := r.ReadString('\n')
		if err != nil {
			log.Fatalf("scan_heap (LeakSanitizer): %v", err)
		}
		if ns, ok := strings.CutPrefix(strings.TrimSpace(l), "lsan_check_ns "); ok {
			n, _ := strconv.ParseInt(ns, 10, 64)
			return time.Duration(n)
		}
	}
}
