// Command servebench measures `heapscope serve` against `heapscope report` on
// the same trace: the time to the first complete page (the answers the page
// asks for on load of the whole trace: summary, timeline, flame graph of the
// leaks, sites) against the report's wall time, the time until the windowed
// index is built (the window classes answered), the server's memory, and
// the latency of a click (a new window's classes and flame graph, a zoomed
// timeline).
//
//	go run ./bench/servebench -trace FILE [-reps 3] [-clicks 20] [-cache cold|warm] [-map auto|always|never] [-bin HEAPSCOPE] [-o bench/RESULTS-serve.md]
//
// -bin measures a heapscope binary built elsewhere (another commit) instead
// of building ./cmd/heapscope.
//
// A trace of the python3 workload of bench/reportbench is made by
// `go run ./bench/reportbench -workloads python -reps 1 -keep DIR` (DIR/python.hst).
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/heapscope/heapscope/bench/internal/benchutil"
)

func main() {
	trace := flag.String("trace", "", "the trace file")
	reps := flag.Int("reps", 3, "repetitions of each load, interleaved")
	clicks := flag.Int("clicks", 20, "clicks (new windows) per repetition")
	out := flag.String("o", "bench/RESULTS-serve.md", "results file")
	bin := flag.String("bin", "", "the heapscope binary to measure (default: build ./cmd/heapscope)")
	cache := flag.String("cache", "cold", "the index file: cold (none: every serve builds the index) or warm (written by an untimed serve first)")
	indexMap := flag.String("map", "", "HEAPSCOPE_INDEX_MAP for the servers: auto, always (the index file mapped) or never (read into memory); \"\": as the environment says")
	flag.Parse()
	if *indexMap != "" {
		os.Setenv("HEAPSCOPE_INDEX_MAP", *indexMap)
	}
	if *trace == "" {
		fmt.Fprintln(os.Stderr, "servebench: -trace FILE is needed")
		os.Exit(2)
	}
	if *cache != "cold" && *cache != "warm" {
		fmt.Fprintln(os.Stderr, "servebench: -cache: cold or warm")
		os.Exit(2)
	}
	if err := run(*trace, *reps, *clicks, *bin, *cache == "warm", *out); err != nil {
		fmt.Fprintln(os.Stderr, "servebench:", err)
		os.Exit(1)
	}
}

type serveRun struct {
	index, page time.Duration // to the URL; to every answer of the first page
	indexed     time.Duration // to the windowed index built: the window classes answered
	pageCPU     time.Duration // the server's user+system CPU time to the first page
	clickCPU    time.Duration // its CPU time per click
	rssKB       int64         // the server's max RSS, at its end
	anonKB      int64         // its resident anonymous memory at its end (the rest is files: the index file, the binary)
	clicks      []time.Duration
	summary     struct{ Events, Blocks, Sites int }
}

func run(trace string, reps, clicks int, bin string, warm bool, outFile string) error {
	tmp, err := os.MkdirTemp("", "servebench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	hs := bin
	if hs == "" {
		hs = filepath.Join(tmp, "heapscope")
		if err := benchutil.BuildHeapscope(hs); err != nil {
			return err
		}
	}
	var reportWall, reportRSS, reportCPU, indexT, pageT, indexedT, pageCPU, clickCPU, rss, anon []float64
	var allClicks []time.Duration
	var last *serveRun
	cacheDir := filepath.Join(tmp, "cache")
	if warm {
		// One untimed serve writes the index file.
		os.Setenv("XDG_CACHE_HOME", cacheDir)
		if _, err := serve(hs, trace, 0, 0, filepath.Join(cacheDir, "heapscope", "index")); err != nil {
			return err
		}
	}
	for i := 0; i < reps; i++ {
		if !warm {
			os.Setenv("XDG_CACHE_HOME", filepath.Join(tmp, fmt.Sprintf("cache-%d", i)))
		}
		w, r, cpu, err := report(hs, trace)
		if err != nil {
			return err
		}
		reportWall, reportRSS, reportCPU = append(reportWall, w.Seconds()), append(reportRSS, float64(r)), append(reportCPU, cpu.Seconds())
		s, err := serve(hs, trace, clicks, int64(i), "")
		if err != nil {
			return err
		}
		indexT, pageT, rss = append(indexT, s.index.Seconds()), append(pageT, s.page.Seconds()), append(rss, float64(s.rssKB))
		indexedT, anon = append(indexedT, s.indexed.Seconds()), append(anon, float64(s.anonKB))
		allClicks = append(allClicks, s.clicks...)
		pageCPU, clickCPU = append(pageCPU, s.pageCPU.Seconds()), append(clickCPU, s.clickCPU.Seconds())
		last = s
		fmt.Fprintf(os.Stderr, "rep %d: report %s (cpu %s), serve URL %s, first page %s (cpu %s), indexed %s, clicks median %s (cpu %s a click), rss %d KiB (anon %d KiB)\n", i, w, cpu, s.index, s.page, s.pageCPU, s.indexed, pctl(s.clicks, 0.5), s.clickCPU, s.rssKB, s.anonKB)
	}
	st, _ := os.Stat(trace)
	var doc bytes.Buffer
	mode := "cold"
	if warm {
		mode = "warm"
	}
	if m := os.Getenv("HEAPSCOPE_INDEX_MAP"); m != "" {
		mode += " -map " + m
	}
	fmt.Fprintf(&doc, "# `heapscope serve` against `heapscope report`\n\nWritten by `go run ./bench/servebench -trace %s -reps %d -clicks %d -cache %s`.\n\n", filepath.Base(trace), reps, clicks, mode)
	fmt.Fprintf(&doc, "- date: %s\n- machine: %s\n", time.Now().UTC().Format("2006-01-02 15:04 UTC"), benchutil.Machine())
	fmt.Fprintf(&doc, "- trace: %s (%d bytes): %d heap events, %d blocks and calls, %d sites in the index\n", filepath.Base(trace), st.Size(), last.summary.Events, last.summary.Blocks, last.summary.Sites)
	fmt.Fprintf(&doc, "- method: `heapscope report --format json TRACE` (output to /dev/null) and `heapscope serve TRACE` run in turn, %d times. \"First page\" is from starting `serve` to the answers of the whole trace's summary, timeline of 1400 points, flame graph of the leaks and sites (top 50), over HTTP on loopback, without the browser's drawing; \"URL\" to the URL printed; \"indexed\" to the windowed index built (`/api/index?wait=1`, then the whole trace's window classes answered). A click is a new random window: its classes, its flame graph by a cost that changes each click, and the timeline zoomed to it, in turn (all three answered). Medians; max RSS from wait4 (report) and /proc VmHWM (serve); CPU time is user+system, from wait4 (report) and /proc/PID/stat (serve: to the first page, and over the clicks divided by their number), less sensitive than wall time to the other work on the machine. The machine (2 cores) is shared with several engineers' builds and tests: wall times are noisy.\n\n", reps)
	fmt.Fprintf(&doc, "| measure | median | goal |\n|---|---:|---|\n")
	rw := benchutil.Median(reportWall)
	pw := benchutil.Median(pageT)
	fmt.Fprintf(&doc, "| `heapscope report --format json` wall | %.2fs | |\n", rw)
	fmt.Fprintf(&doc, "| `heapscope serve`: URL printed | %.2fs | |\n", benchutil.Median(indexT))
	fmt.Fprintf(&doc, "| `heapscope serve`: first complete page | %.2fs (%.2f× the report) | ≤ 1.5× the report: %s |\n", pw, pw/rw, yes(pw <= 1.5*rw))
	fmt.Fprintf(&doc, "| `heapscope serve`: index built, window classes answered | %.2fs | |\n", benchutil.Median(indexedT))
	fmt.Fprintf(&doc, "| click: median / p95 / max | %s / %s / %s | ≤ 300 ms: %s |\n", pctl(allClicks, 0.5), pctl(allClicks, 0.95), pctl(allClicks, 1), yes(pctl(allClicks, 0.95) <= 300*time.Millisecond))
	rc, pc := benchutil.Median(reportCPU), benchutil.Median(pageCPU)
	fmt.Fprintf(&doc, "| CPU time: report / serve to the first page | %.2fs / %.2fs (%.2f×) | |\n", rc, pc, pc/rc)
	fmt.Fprintf(&doc, "| CPU time of the server per click | %.0fms | |\n", benchutil.Median(clickCPU)*1000)
	fmt.Fprintf(&doc, "| max RSS: report / serve | %.1f MiB / %.1f MiB | |\n", benchutil.Median(reportRSS)/1024, benchutil.Median(rss)/1024)
	fmt.Fprintf(&doc, "| serve's resident anonymous memory at its end (RssAnon; the rest of its RSS is mapped files) | %.1f MiB | |\n", benchutil.Median(anon)/1024)
	return os.WriteFile(outFile, doc.Bytes(), 0o644)
}

// waitIndexFile waits until dir holds an index file (one not named
// .tmp-…): serve writes it after its index is built.
func waitIndexFile(dir string) error {
	for end := time.Now().Add(5 * time.Minute); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		es, _ := os.ReadDir(dir)
		for _, e := range es {
			if strings.HasSuffix(e.Name(), ".hsi") {
				return nil
			}
		}
	}
	return fmt.Errorf("no index file in %s", dir)
}

func yes(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func pctl(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := int(p*float64(len(s)-1) + 0.5)
	return s[i].Round(time.Millisecond)
}

func report(hs, trace string) (time.Duration, int64, time.Duration, error) {
	cmd := exec.Command(hs, "report", "--format", "json", trace)
	var errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = io.Discard, &errb
	start := time.Now()
	if err := cmd.Run(); err != nil {
		return 0, 0, 0, fmt.Errorf("report: %v\n%s", err, errb.Bytes())
	}
	d := time.Since(start)
	ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	return d, ru.Maxrss, cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime(), nil
}

// cpuTime returns the user+system CPU time of process pid so far, from
// /proc/PID/stat (in clock ticks of 10 ms, as Linux counts them).
func cpuTime(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 {
		s = s[i+1:]
	}
	f := strings.Fields(s) // from field 3 (state) on
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond
}

// bearer is the token of the serve measured (its URL's ?token=).
var bearer string

// httpGet gets url with the token, as a script does.
func httpGet(url string) (*http.Response, error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	return http.DefaultClient.Do(req)
}

func get(url string) error {
	r, err := httpGet(url)
	if err != nil {
		return err
	}
	defer r.Body.Close()
	if _, err := io.Copy(io.Discard, r.Body); err != nil {
		return err
	}
	if r.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, r.Status)
	}
	return nil
}

// serve measures one serve of trace; with waitDir, it ends it only once
// an index file is in waitDir.
func serve(hs, trace string, clicks int, seed int64, waitDir string) (*serveRun, error) {
	cmd := exec.Command(hs, "serve", trace)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	defer func() {
		cmd.Process.Signal(os.Interrupt)
		cmd.Wait()
	}()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		return nil, fmt.Errorf("serve printed no URL: %v", err)
	}
	s := &serveRun{index: time.Since(start)}
	// http://HOST:PORT/?token=SECRET (an older serve printed no token).
	u, tok, _ := strings.Cut(strings.TrimSpace(line), "?token=")
	bearer = tok
	for _, p := range []string{"api/summary", "api/timeline?points=1400", "api/flame?cost=leaks&invert=0&min_share=0.001", "api/sites?top=50"} {
		if err := get(u + p); err != nil {
			return nil, err
		}
	}
	s.page = time.Since(start)
	s.pageCPU = cpuTime(cmd.Process.Pid)
	// A server without /api/index (an older one) built its index before
	// printing the URL: its 404 is not waited for.
	r, err := httpGet(u + "api/index?wait=1")
	if err != nil {
		return nil, err
	}
	io.Copy(io.Discard, r.Body)
	r.Body.Close()
	if err := get(u + "api/window?top=100"); err != nil {
		return nil, err
	}
	s.indexed = time.Since(start)
	cpuIndexed := cpuTime(cmd.Process.Pid)
	// The span, for the clicks.
	r, err = httpGet(u + "api/summary")
	if err != nil {
		return nil, err
	}
	var sum struct {
		StartNs int64 `json:"start_ns"`
		EndNs   int64 `json:"end_ns"`
		Index   struct{ Events, Blocks, Sites int }
	}
	err = decode(r, &sum)
	if err != nil {
		return nil, err
	}
	s.summary = sum.Index
	rng := rand.New(rand.NewPCG(uint64(seed), 1))
	costs := []string{"leaks", "peak", "bytes", "calls", "temporary", "net", "aifo"}
	span := sum.EndNs - sum.StartNs
	for i := 0; i < clicks; i++ {
		a := sum.StartNs + rng.Int64N(span)
		b := a + 1 + rng.Int64N(sum.EndNs-a+1)
		q := fmt.Sprintf("from_ns=%d&to_ns=%d", a, b)
		t0 := time.Now()
		for _, p := range []string{"api/window?top=100&" + q, fmt.Sprintf("api/flame?cost=%s&min_share=0.001&%s", costs[i%len(costs)], q), fmt.Sprintf("api/timeline?points=1400&from_ns=%d&to_ns=%d", a, b)} {
			if err := get(u + p); err != nil {
				return nil, err
			}
		}
		s.clicks = append(s.clicks, time.Since(t0))
	}
	if clicks > 0 {
		s.clickCPU = (cpuTime(cmd.Process.Pid) - cpuIndexed) / time.Duration(clicks)
	}
	if waitDir != "" {
		if err := waitIndexFile(waitDir); err != nil {
			return nil, err
		}
	}
	// Max RSS over the whole run: the index and the clicks included.
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", cmd.Process.Pid)); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmHWM:" {
				s.rssKB, _ = strconv.ParseInt(f[1], 10, 64)
			}
			if f := strings.Fields(l); len(f) >= 2 && f[0] == "RssAnon:" {
				s.anonKB, _ = strconv.ParseInt(f[1], 10, 64)
			}
		}
	}
	return s, nil
}

func decode(r *http.Response, v any) error {
	defer r.Body.Close()
	b, err := io.ReadAll(r.Body)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}
