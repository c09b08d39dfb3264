// Command usdtcost measures what tracing through OpenTelemetry's
// otel_memory USDT probes (heapscope attach --source usdt) costs per
// sampled event (issue 24: at most 4.7 µs per allocation, its stack
// unwound, and 0.6 µs per free, the design document's figures; nothing per
// unsampled call).
//
// testdata/workloads/usdt_cost.c fires the probes N times each from a
// stack DEPTH frames deep, timing its alloc and free loops apart, then
// times malloc+free pairs that only read the semaphore (unsampled calls).
// Each rep runs it three times, interleaved: alone ("none": its semaphores
// stay 0, no probe fires), with a BPF program that does nothing on each
// probe ("floor": the kernel's traps alone, which no tracer of USDTs
// avoids), and with `heapscope attach --source usdt --sample 512KiB -o
// FILE --no-census` attached ("usdt"). The cost in the target is the
// difference of usdt and none, per event; the cost in heapscope's own process
// is its CPU time from the workload's start to the events' delivery (a
// flush interval later), per event.
//
// Usage (repo root): go run ./bench/usdtcost [-n 200000] [-depth 16]
// [-pairs 2000000] [-reps 5] [-fp=true]
package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/heapscope/heapscope/bench/internal/benchutil"
	"github.com/heapscope/heapscope/internal/usdt"
)

func main() {
	n := flag.Int("n", 200000, "probe firings of each kind")
	depth := flag.Int("depth", 16, "frames between main and the probes' loops")
	pairs := flag.Int("pairs", 2000000, "unsampled malloc+free pairs")
	reps := flag.Int("reps", 5, "repetitions of each variant")
	fp := flag.Bool("fp", true, "build the workload with frame pointers (false: unwound with its .eh_frame tables)")
	stats := flag.Bool("bpfstats", true, "also read the USDT programs' own run time from the kernel's BPF statistics (which add two clock reads to each run)")
	flag.Parse()
	if *stats {
		st, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
		if err != nil {
			log.Fatalf("enabling BPF statistics: %v", err)
		}
		defer st.Close()
	}
	dir, err := os.MkdirTemp("", "usdtcost-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "usdt_cost")
	fpFlag := "-fno-omit-frame-pointer"
	if !*fp {
		fpFlag = "-fomit-frame-pointer"
	}
	if out, err := exec.Command("gcc", "-O2", "-g", fpFlag, "-o", bin, "testdata/workloads/usdt_cost.c").CombinedOutput(); err != nil {
		log.Fatalf("gcc: %v: %s (run from the repository's root)", err, out)
	}
	hs := filepath.Join(dir, "heapscope")
	if out, err := exec.Command("go", "build", "-o", hs, "./cmd/heapscope").CombinedOutput(); err != nil {
		log.Fatalf("go build: %v: %s", err, out)
	}
	fmt.Printf("%s\n\nusdt_cost %d %d %d (%s), heapscope attach --source usdt --sample 512KiB -o FILE --no-census\n\n",
		benchutil.Machine(), *n, *depth, *pairs, fpFlag)
	fmt.Println("| rep | variant | alloc ns (wall) | alloc CPU ns | free ns (wall) | free CPU ns | unsampled pair ns (wall) | unsampled CPU ns | heapscope CPU µs/event | BPF ns/run: usdt_alloc (runs) | usdt_free (runs) | semaphores |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|---|---|")
	cols := map[string]map[string][]float64{"none": {}, "floor": {}, "usdt": {}}
	for rep := 1; rep <= *reps; rep++ {
		for _, v := range []string{"none", "floor", "usdt"} {
			r, err := run(bin, hs, dir, *n, *depth, *pairs, v)
			if err != nil {
				log.Fatal(err)
			}
			for k, x := range r.vals {
				cols[v][k] = append(cols[v][k], x)
			}
			hsCPU, bpfA, bpfF := "–", "–", "–"
			if ps, ok := r.progs["usdt_alloc"]; ok && ps.n > 0 {
				bpfA = fmt.Sprintf("%.0f (%d)", float64(ps.rt)/float64(ps.n), ps.n)
				cols[v]["bpf_alloc"] = append(cols[v]["bpf_alloc"], float64(ps.rt)/float64(ps.n))
			}
			if ps, ok := r.progs["usdt_free"]; ok && ps.n > 0 {
				bpfF = fmt.Sprintf("%.0f (%d)", float64(ps.rt)/float64(ps.n), ps.n)
				cols[v]["bpf_free"] = append(cols[v]["bpf_free"], float64(ps.rt)/float64(ps.n))
			}
			if v == "usdt" {
				hsCPU = fmt.Sprintf("%.2f", r.hsCPU*1e6/float64(2**n))
				cols[v]["hs"] = append(cols[v]["hs"], r.hsCPU*1e6/float64(2**n))
			}
			fmt.Printf("| %d | %s | %.1f | %.1f | %.1f | %.1f | %.2f | %.2f | %s | %s | %s | %s |\n", rep, v,
				r.vals["alloc_ns"], r.vals["alloc_cpu_ns"], r.vals["free_ns"], r.vals["free_cpu_ns"],
				r.vals["unsampled_ns"], r.vals["unsampled_cpu_ns"], hsCPU, bpfA, bpfF, r.sems)
		}
	}
	fmt.Println("\n| per event (median of reps) | none | floor | usdt | heapscope's cost in the target (usdt − none) | of which over the trap (usdt − floor) |")
	fmt.Println("|---|---|---|---|---|---|")
	for _, k := range []string{"alloc_ns", "alloc_cpu_ns", "free_ns", "free_cpu_ns", "unsampled_ns", "unsampled_cpu_ns"} {
		a, f, b := benchutil.Median(cols["none"][k]), benchutil.Median(cols["floor"][k]), benchutil.Median(cols["usdt"][k])
		fmt.Printf("| %s | %.2f | %.2f | %.2f | %+.2f ns | %+.2f ns |\n", k, a, f, b, b-a, b-f)
	}
	fmt.Printf("\nheapscope's own CPU per event (alloc or free; median): %.2f µs\n", benchutil.Median(cols["usdt"]["hs"]))
	if *stats {
		fmt.Printf("the BPF programs' own run time (median): usdt_alloc %.0f ns, usdt_free %.0f ns\n",
			benchutil.Median(cols["usdt"]["bpf_alloc"]), benchutil.Median(cols["usdt"]["bpf_free"]))
	}
}

type result struct {
	vals  map[string]float64
	progs map[string]progStat // the USDT programs' runs over the events
	sems  string
	hsCPU float64 // heapscope's CPU seconds from the release to the delivery
}

// run runs the workload once: alone (variant "none"), with empty BPF
// programs on its probes ("floor": the kernel's uprobe traps, the
// semaphores raised), or traced through its probes by heapscope ("usdt").
func run(bin, hs, dir string, n, depth, pairs int, variant string) (result, error) {
	attach := variant == "usdt"
	r := result{vals: map[string]float64{}, progs: map[string]progStat{}}
	old := map[ebpf.ProgramID]bool{}
	for id := range progStats(nil) {
		old[id] = true
	}
	w := exec.Command(bin, strconv.Itoa(n), strconv.Itoa(depth), strconv.Itoa(pairs))
	in, _ := w.StdinPipe()
	outp, _ := w.StdoutPipe()
	if err := w.Start(); err != nil {
		return r, err
	}
	defer w.Wait()
	defer in.Close()
	out := bufio.NewReader(outp)
	if l, _ := out.ReadString('\n'); l != "ready\n" {
		return r, fmt.Errorf("usdt_cost said %q", l)
	}
	var h *exec.Cmd
	var errb bytes.Buffer
	if attach {
		trace := filepath.Join(dir, "u.hst")
		os.Remove(trace)
		h = exec.Command(hs, "attach", "-q", "--no-census", "--source", "usdt", "--sample", "512KiB", "-o", trace,
			"-p", strconv.Itoa(w.Process.Pid))
		h.Stderr = &syncWriter{b: &errb}
		if err := h.Start(); err != nil {
			return r, err
		}
		defer h.Wait()
		for deadline := time.Now().Add(60 * time.Second); !strings.Contains(h.Stderr.(*syncWriter).String(), "tracing pid"); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				h.Process.Kill()
				return r, fmt.Errorf("attach did not start: %s", h.Stderr.(*syncWriter).String())
			}
		}
	}
	if variant == "floor" {
		links, err := floor(bin, w.Process.Pid)
		if err != nil {
			return r, err
		}
		defer func() {
			for _, l := range links {
				l.Close()
			}
		}()
	}
	cpu0 := procCPU(h)
	before := progStats(old)
	io.WriteString(in, "\n")
	line, err := out.ReadString('\n')
	if err != nil {
		return r, fmt.Errorf("usdt_cost: %v", err)
	}
	f := strings.Fields(line)
	for i := 0; i+1 < len(f); i += 2 {
		r.vals[f[i]], _ = strconv.ParseFloat(f[i+1], 64)
	}
	sems, _ := out.ReadString('\n')
	r.sems = strings.TrimPrefix(strings.TrimSpace(sems), "semaphores ")
	if attach {
		time.Sleep(1500 * time.Millisecond) // a flush interval: the events delivered
		r.hsCPU = procCPU(h) - cpu0
		for id, a := range progStats(old) {
			b := before[id]
			p := r.progs[a.name]
			p.name, p.rt, p.n = a.name, p.rt+a.rt-b.rt, p.n+a.n-b.n
			r.progs[a.name] = p
		}
	}
	io.WriteString(in, "\n")
	if attach {
		if err := h.Wait(); err != nil {
			return r, fmt.Errorf("attach: %v: %s", err, h.Stderr.(*syncWriter).String())
		}
	}
	return r, nil
}

// procCPU is the CPU seconds process h has used so far (0 without one).
func procCPU(h *exec.Cmd) float64 {
	if h == nil {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", h.Process.Pid))
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / 100 // USER_HZ
}

// syncWriter is a buffer written by one goroutine and read by another.
type syncWriter struct {
	mu sync.Mutex
	b  *bytes.Buffer
}

func (w *syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *syncWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// progStat is a BPF program's statistics.
type progStat struct {
	name string
	rt   time.Duration
	n    uint64
}

// progStats returns the statistics of the machine's BPF programs but those
// in old (loaded before the run: not this run's heapscope's).
func progStats(old map[ebpf.ProgramID]bool) map[ebpf.ProgramID]progStat {
	out := map[ebpf.ProgramID]progStat{}
	for id := ebpf.ProgramID(0); ; {
		next, err := ebpf.ProgramGetNextID(id)
		if err != nil {
			return out
		}
		id = next
		if old[id] {
			continue
		}
		p, err := ebpf.NewProgramFromID(id)
		if err != nil {
			continue
		}
		info, err := p.Info()
		st, err2 := p.Stats()
		if err == nil && err2 == nil {
			out[id] = progStat{info.Name, st.Runtime, st.RunCount}
		}
		p.Close()
	}
}

// floor attaches a program that does nothing to each otel_memory probe of
// bin in process pid, with its semaphore as the uprobe's reference counter,
// as heapscope attaches its own.
func floor(bin string, pid int) ([]link.Link, error) {
	ps, err := usdt.Open(bin)
	if err != nil {
		return nil, err
	}
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.Kprobe, License: "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()}})
	if err != nil {
		return nil, fmt.Errorf("the empty program: %w", err)
	}
	defer prog.Close() // the links hold it
	ex, err := link.OpenExecutable(bin)
	if err != nil {
		return nil, err
	}
	var links []link.Link
	for _, p := range ps {
		if p.Provider != "otel_memory" {
			continue
		}
		l, err := ex.Uprobe("", prog, &link.UprobeOptions{Address: p.Offset, PID: pid, RefCtrOffset: p.SemaphoreOffset})
		if err != nil {
			for _, l := range links {
				l.Close()
			}
			return nil, err
		}
		links = append(links, l)
	}
	return links, nil
}
