// Command serveattack measures what `heapscope serve` holds under the
// attacks of issue 27 #5, each against a fresh server of a trace of many
// sites: three /api/sites?top=0 at once, 200 distinct windows at once, and
// 15,000 idle connections. It reports the server's peak resident memory
// (VmHWM) for each, the answers' sizes and statuses, the connections it
// still holds, and how long the user's own request takes meanwhile.
//
//	go run ./bench/serveattack [-sites 100000] [-frames 30] [-bin HEAPSCOPE] [-o bench/RESULTS-serve-limits.md]
//
// The trace is synthetic (written with package tracefile): each site one
// stack of its own of -frames frames, in a module that is not on disk (the
// frames stay module+offset), allocating blocks spread over 10 s of which
// some are freed, so that windows differ.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/heapscope/heapscope/bench/internal/benchutil"
	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/tracefile"
)

func main() {
	sites := flag.Int("sites", 100000, "sites (distinct stacks) of the trace")
	frames := flag.Int("frames", 30, "frames per stack")
	bin := flag.String("bin", "", "the heapscope binary (default: build ./cmd/heapscope)")
	out := flag.String("o", "", "append the results to this file (default: standard output only)")
	label := flag.String("label", "", "what the binary is (e.g. a commit), for the results")
	flag.IntVar(&maxRSS, "max-rss", 3<<10, "MiB: a server whose resident memory passes this is killed, as in a memory cgroup of that size (and so as not to take the machine's memory)")
	flag.Parse()
	if err := run(*sites, *frames, *bin, *label, *out); err != nil {
		fmt.Fprintln(os.Stderr, "serveattack:", err)
		os.Exit(1)
	}
}

// maxRSS is the -max-rss limit, in MiB.
var maxRSS int

func run(sites, frames int, bin, label, out string) error {
	var lim syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim) == nil {
		lim.Cur = lim.Max
		syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim) // serve inherits it
	}
	dir, err := os.MkdirTemp("", "serveattack-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if bin == "" {
		bin = filepath.Join(dir, "heapscope")
		if err := benchutil.BuildHeapscope(bin); err != nil {
			return err
		}
	}
	trace := filepath.Join(dir, "many.hst")
	if err := writeTrace(trace, sites, frames); err != nil {
		return err
	}
	var doc strings.Builder
	fmt.Fprintf(&doc, "\n## %s\n\n`go run ./bench/serveattack -sites %d -frames %d -max-rss %d -bin ... -label %q`, %s, GOMAXPROCS of the server: the machine's (%d cores here). A server past %d MiB resident is killed, as in a memory cgroup of that size.\n\n",
		label, sites, frames, maxRSS, label, time.Now().UTC().Format("2006-01-02 15:04 UTC"), runtime.NumCPU(), maxRSS)
	fmt.Fprintf(&doc, "| attack | server's peak RSS (VmHWM) | answers | notes |\n|---|---|---|---|\n")

	phase := func(name string, attack func(s *server) (string, string, error)) error {
		s, err := start(bin, trace, dir)
		if err != nil {
			return err
		}
		defer s.stop()
		base := s.hwm()
		answers, notes, err := attack(s)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		peak := fmt.Sprintf("%d MiB", s.hwm()>>10)
		if s.killed.Load() {
			peak = fmt.Sprintf("over %d MiB: killed", maxRSS)
		}
		fmt.Fprintf(&doc, "| %s | %s (%d MiB before it) | %s | %s |\n", name, peak, base>>10, answers, notes)
		fmt.Fprintf(os.Stderr, "%s: %s (before %d MiB), %s; %s\n", name, peak, base>>10, answers, notes)
		return nil
	}
	if err := phase("3 × `/api/sites?top=0` at once", func(s *server) (string, string, error) {
		res := s.many(3, func(int) string { return "api/sites?top=0" })
		return res.String(), "", nil
	}); err != nil {
		return err
	}
	if err := phase("200 distinct `/api/window?top=0` at once", func(s *server) (string, string, error) {
		rng := rand.New(rand.NewPCG(1, 2))
		res := s.many(200, func(int) string {
			a := rng.Int64N(9e9)
			return fmt.Sprintf("api/window?top=0&from_ns=%d&to_ns=%d", a, a+1+rng.Int64N(1e9))
		})
		return res.String(), "", nil
	}); err != nil {
		return err
	}
	if err := phase("15,000 idle connections", func(s *server) (string, string, error) {
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		refused := 0
		for range 15000 {
			c, err := net.DialTimeout("tcp", s.addr, 2*time.Second)
			if err != nil {
				refused++
				continue
			}
			conns = append(conns, c)
		}
		time.Sleep(2 * time.Second)
		held2 := s.sockets()
		t0 := time.Now()
		err := s.get("api/summary", io.Discard)
		own := time.Since(t0)
		if err != nil {
			return "", "", fmt.Errorf("the user's own request: %w", err)
		}
		time.Sleep(33 * time.Second)
		held35 := s.sockets()
		return fmt.Sprintf("%d connected (%d not)", len(conns), refused),
			fmt.Sprintf("sockets the server holds: %d after 2 s, %d after 35 s; the user's /api/summary meanwhile: %s", held2, held35, own.Round(time.Millisecond)), nil
	}); err != nil {
		return err
	}
	fmt.Print(doc.String())
	if out != "" {
		f, err := os.OpenFile(out, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = f.WriteString(doc.String())
		return err
	}
	return nil
}

// writeTrace writes the synthetic trace of n sites.
func writeTrace(path string, n, frames int) error {
	const start = int64(1e9)
	w, err := tracefile.Create(path, tracefile.Header{Session: "many", Provider: "preload", MonoStart: start,
		WallStart: time.Unix(1700000000, 0), Clock: "CLOCK_MONOTONIC"}, tracefile.Options{})
	if err != nil {
		return err
	}
	if err := w.Process(event.Process{PID: 10, PPID: 1, Time: start, Exe: "/nonexistent/many", Cmdline: []string{"many"}}); err != nil {
		return err
	}
	if err := w.Module(event.Module{PID: 10, Time: start, Start: 0x400000, End: 0x7fff0000, Path: "/nonexistent/many"}); err != nil {
		return err
	}
	rng := rand.New(rand.NewPCG(3, 4))
	step := int64(10e9) / int64(4*n)
	var evs []event.Event
	tm := start
	for i := range n {
		fs := make([]uint64, frames)
		for j := range fs {
			fs[j] = 0x400000 + uint64(rng.Int64N(0x7fb00000))&^15
		}
		if err := w.Stack(event.Stack{PID: 10, ID: event.StackID(i + 1), Frames: fs}); err != nil {
			return err
		}
		for k := range 2 {
			addr := uint64(0x10000000 + (2*i+k)*64)
			tm += step
			evs = append(evs, event.Event{Time: tm, PID: 10, TID: 10, Kind: event.KindAlloc, Func: event.FuncMalloc,
				Stack: event.StackID(i + 1), Addr: addr, Size: uint64(16 + rng.IntN(4000))})
			if k == 1 {
				tm += step
				evs = append(evs, event.Event{Time: tm, PID: 10, TID: 10, Kind: event.KindFree, Func: event.FuncFree, Addr: addr})
			}
		}
		if len(evs) >= 1<<14 {
			if err := w.Events(evs); err != nil {
				return err
			}
			evs = evs[:0]
		}
	}
	if err := w.Events(evs); err != nil {
		return err
	}
	if err := w.Exit(event.Exit{PID: 10, Time: tm + 1, Status: 0}); err != nil {
		return err
	}
	return w.Close()
}

type server struct {
	cmd    *exec.Cmd
	url    string // http://HOST:PORT/
	addr   string
	token  string
	hwmKB  atomic.Int64 // the last VmHWM read
	killed atomic.Bool  // past maxRSS
	done   chan struct{}
}

func start(bin, trace, dir string) (*server, error) {
	cmd := exec.Command(bin, "serve", "--no-index-cache", trace)
	cmd.Env = append(os.Environ(), "XDG_CACHE_HOME="+dir)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		return nil, fmt.Errorf("serve printed no URL: %v", err)
	}
	u, tok, _ := strings.Cut(strings.TrimSpace(line), "?token=")
	s := &server{cmd: cmd, url: u, token: tok, addr: strings.TrimSuffix(strings.TrimPrefix(u, "http://"), "/"), done: make(chan struct{})}
	go s.watch()
	// The index built, and the first page answered, before the attack.
	for _, p := range []string{"api/index?wait=1", "api/summary", "api/sites?top=50", "api/window?top=100"} {
		if err := s.get(p, io.Discard); err != nil {
			s.stop()
			return nil, err
		}
	}
	return s, nil
}

func (s *server) stop() {
	close(s.done)
	s.cmd.Process.Signal(os.Interrupt)
	s.cmd.Wait()
}

// watch reads the server's memory every 10 ms, and kills it past maxRSS.
func (s *server) watch() {
	for {
		select {
		case <-s.done:
			return
		case <-time.After(10 * time.Millisecond):
		}
		rss, hwm := s.status("VmRSS:"), s.status("VmHWM:")
		if hwm > 0 {
			s.hwmKB.Store(hwm)
		}
		if rss > int64(maxRSS)<<10 {
			s.killed.Store(true)
			s.cmd.Process.Kill()
			return
		}
	}
}

func (s *server) get(path string, w io.Writer) error {
	req, err := http.NewRequest(http.MethodGet, s.url+path, nil)
	if err != nil {
		return err
	}
	if s.token != "" {
		req.Header.Set("Authorization", "Bearer "+s.token)
	}
	r, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer r.Body.Close()
	if _, err := io.Copy(w, r.Body); err != nil {
		return err
	}
	if r.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", path, r.Status)
	}
	return nil
}

// results counts the answers of many requests.
type results struct {
	mu     sync.Mutex
	status map[string]int
	bytes  int64 // of the largest answer
	took   time.Duration
}

func (r *results) String() string {
	var parts []string
	for k, v := range r.status {
		parts = append(parts, fmt.Sprintf("%d × %s", v, k))
	}
	return fmt.Sprintf("%s; the largest %.1f MB; all answered in %s", strings.Join(parts, ", "), float64(r.bytes)/1e6, r.took.Round(100*time.Millisecond))
}

// many sends n requests at once, the i-th for path(i), and counts the
// answers by status.
func (s *server) many(n int, path func(int) string) *results {
	res := &results{status: map[string]int{}}
	var wg sync.WaitGroup
	t0 := time.Now()
	client := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 0, MaxIdleConnsPerHost: n}}
	for i := range n {
		p := path(i)
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequest(http.MethodGet, s.url+p, nil)
			req.Header.Set("Authorization", "Bearer "+s.token)
			r, err := client.Do(req)
			st := ""
			var size int64
			if err != nil {
				st = "error"
			} else {
				size, _ = io.Copy(io.Discard, r.Body)
				r.Body.Close()
				st = strconv.Itoa(r.StatusCode)
			}
			res.mu.Lock()
			res.status[st]++
			res.bytes = max(res.bytes, size)
			res.mu.Unlock()
		}()
	}
	wg.Wait()
	res.took = time.Since(t0)
	return res
}

// hwm is the server's peak resident memory, in KiB (the last read, if it
// is gone).
func (s *server) hwm() int64 {
	if n := s.status("VmHWM:"); n > 0 {
		s.hwmKB.Store(n)
	}
	return s.hwmKB.Load()
}

// status reads a field of the server's /proc/PID/status, in KiB.
func (s *server) status(field string) int64 {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", s.cmd.Process.Pid))
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == field {
			n, _ := strconv.ParseInt(f[1], 10, 64)
			return n
		}
	}
	return 0
}

// sockets counts the server's open sockets.
func (s *server) sockets() int {
	dir := fmt.Sprintf("/proc/%d/fd", s.cmd.Process.Pid)
	fds, _ := os.ReadDir(dir)
	n := 0
	for _, fd := range fds {
		if l, err := os.Readlink(filepath.Join(dir, fd.Name())); err == nil && strings.HasPrefix(l, "socket:") {
			n++
		}
	}
	return n
}
