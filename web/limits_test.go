package web

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/heapscope/heapscope/internal/testutil/tracetest"

	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/query"
	"github.com/heapscope/heapscope/report"
	"github.com/heapscope/heapscope/tracefile"
)

// manySitesTrace writes a trace of n sites, each a stack of its own of
// frames random frames in a module that is not on disk, allocating two
// blocks over the trace's 10 s, one of them freed.
func manySitesTrace(t *testing.T, n, frames int) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "many.hst")
	const start = int64(1e9)
	w, check := tracetest.Create(t, path, tracefile.Header{Session: "many", Provider: "preload", MonoStart: start,
		WallStart: time.Unix(1700000000, 0), Clock: "CLOCK_MONOTONIC"}, tracefile.Options{})
	check(w.Process(event.Process{PID: 10, PPID: 1, Time: start, Exe: "/nonexistent/many", Cmdline: []string{"many"}}))
	check(w.Module(event.Module{PID: 10, Time: start, Start: 0x400000, End: 0x7fff0000, Path: "/nonexistent/many"}))
	rng := rand.New(rand.NewPCG(1, 2))
	step := int64(10e9) / int64(3*n)
	tm := start
	var evs []event.Event
	for i := range n {
		fs := make([]uint64, frames)
		for j := range fs {
			fs[j] = 0x400000 + uint64(rng.Int64N(0x7fb00000))&^15
		}
		check(w.Stack(event.Stack{PID: 10, ID: event.StackID(i + 1), Frames: fs}))
		for k := range 2 {
			addr := uint64(0x10000000 + (2*i+k)*64)
			tm += step
			evs = append(evs, event.Event{Time: tm, PID: 10, TID: 10, Kind: event.KindAlloc, Func: event.FuncMalloc,
				Stack: event.StackID(i + 1), Addr: addr, Size: uint64(16 + i)})
			if k == 1 {
				tm += step
				evs = append(evs, event.Event{Time: tm, PID: 10, TID: 10, Kind: event.KindFree, Func: event.FuncFree, Addr: addr})
			}
		}
	}
	check(w.Events(evs))
	check(w.Exit(event.Exit{PID: 10, Time: tm + 1}))
	check(w.Close())
	return path
}

// No answer is without bound: top=0 (once "all") and a top above the
// limit get maxTop sites, functions or rows, max_nodes above its limit
// maxMaxNodes nodes, points above its limit maxPoints, and each answer
// says so ("capped") and how many it left out. Issue 27 #5: one
// /api/sites?top=0 built a 985 MB answer.
func TestAnswersCapped(t *testing.T) {
	const sites = maxTop + 500
	path := manySitesTrace(t, sites, 40)
	_, srv := serveTrace(t, path)
	for _, top := range []string{"0", "5000"} {
		var d struct {
			report.JSON
			Capped *Capped `json:"capped"`
		}
		getJSON(t, srv.URL+"/api/sites?top="+top, &d)
		if len(d.Leaks) != maxTop || len(d.Allocations) != maxTop || d.Capped == nil || d.Capped.Top != maxTop {
			t.Errorf("/api/sites?top=%s: %d leaks, %d allocation sites, capped %+v; want %d and capped at it", top, len(d.Leaks), len(d.Allocations), d.Capped, maxTop)
		}
		var win Window
		getJSON(t, srv.URL+"/api/window?top="+top, &win)
		if len(win.Sites) != maxTop || win.More != sites-maxTop || win.Capped == nil || win.Capped.Top != maxTop {
			t.Errorf("/api/window?top=%s: %d sites, %d more, capped %+v", top, len(win.Sites), win.More, win.Capped)
		}
		var fns Functions
		getJSON(t, srv.URL+"/api/functions?cost=bytes&top="+top, &fns)
		if len(fns.Functions) != maxTop || fns.More == 0 || fns.Capped == nil {
			t.Errorf("/api/functions?top=%s: %d functions, %d more, capped %+v", top, len(fns.Functions), fns.More, fns.Capped)
		}
		var cs CallersAnswer
		getJSON(t, srv.URL+"/api/callers?cost=bytes&function=[root]&top="+top, &cs)
		if len(cs.Callers.Callers)+len(cs.Callees) > 2*maxTop {
			t.Errorf("/api/callers?top=%s: %d callers, %d callees", top, len(cs.Callers.Callers), len(cs.Callees))
		}
	}
	// Asked for a few, nothing is capped.
	var win Window
	getJSON(t, srv.URL+"/api/window?top=10", &win)
	if len(win.Sites) != 10 || win.More != sites-10 || win.Capped != nil {
		t.Errorf("/api/window?top=10: %d sites, %d more, capped %+v", len(win.Sites), win.More, win.Capped)
	}
	var fl FlameAnswer
	getJSON(t, srv.URL+"/api/flame?cost=bytes&min_share=0&max_nodes=1000000", &fl)
	if len(fl.Nodes) != maxMaxNodes || fl.Hidden == 0 || fl.Capped == nil || fl.Capped.MaxNodes != maxMaxNodes {
		t.Errorf("flame graph of max_nodes=1000000: %d nodes, %d hidden, capped %+v", len(fl.Nodes), fl.Hidden, fl.Capped)
	}
	var tl Timeline
	getJSON(t, srv.URL+"/api/timeline?points=100000", &tl)
	if len(tl.Points) > maxPoints || tl.Capped == nil || tl.Capped.Points != maxPoints {
		t.Errorf("timeline of 100000 points: %d points, capped %+v", len(tl.Points), tl.Capped)
	}
	if c := status(t, srv.URL+"/api/window?top=-1"); c != http.StatusBadRequest {
		t.Errorf("top=-1: %d, want 400", c)
	}
}

// The gate lets as many questions in as it has places, queues as many
// more as its queue holds, and refuses the rest at once; a question that
// waits stops waiting when its client goes.
func TestGate(t *testing.T) {
	g := &gate{work: make(chan struct{}, 2), all: make(chan struct{}, 3)}
	ctx := context.Background()
	l1, err1 := g.enter(ctx)
	l2, err2 := g.enter(ctx)
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	entered := make(chan func(), 1)
	go func() {
		l, err := g.enter(ctx)
		if err != nil {
			t.Error(err)
		}
		entered <- l
	}()
	for len(g.all) != 3 {
		time.Sleep(time.Millisecond) // the third is waiting
	}
	if _, err := g.enter(ctx); !errors.Is(err, ErrBusy) {
		t.Errorf("a fourth with a full queue: %v, want ErrBusy", err)
	}
	select {
	case <-entered:
		t.Fatal("the third entered with both places taken")
	default:
	}
	l1()
	(<-entered)()
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	l3, _ := g.enter(ctx)
	go func() { _, err := g.enter(cctx); done <- err }()
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("a waiter whose client went: %v", err)
	}
	l2()
	l3()
	if len(g.all) != 0 || len(g.work) != 0 {
		t.Errorf("after all left: %d in, %d working", len(g.all), len(g.work))
	}
}

// Heavy questions beyond what the server takes get a 503 with
// Retry-After (the page asks again), and light ones (the summary, the
// index's state) still get answers.
func TestBusyServer(t *testing.T) {
	x, err := query.Build(trace(t, "report_known"), query.Options{})
	if err != nil {
		t.Fatal(err)
	}
	g := &gate{work: make(chan struct{}, 1), all: make(chan struct{}, 1)}
	srv := newTestServer(t, newServer(x, nil, g))
	leave, err := g.enter(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/api/window", "/api/flame", "/api/sites", "/api/functions", "/api/timeline", "/api/export?format=pprof", "/api/histogram"} {
		r, err := client.Get(srv.URL + p)
		if err != nil {
			t.Fatal(err)
		}
		r.Body.Close()
		if r.StatusCode != http.StatusServiceUnavailable || r.Header.Get("Retry-After") == "" {
			t.Errorf("%s with the server full: %s, Retry-After %q; want 503 with Retry-After", p, r.Status, r.Header.Get("Retry-After"))
		}
	}
	for _, p := range []string{"/api/summary", "/api/index"} {
		if c := status(t, srv.URL+p); c != http.StatusOK {
			t.Errorf("%s with the server full: %d", p, c)
		}
	}
	leave()
	if c := status(t, srv.URL+"/api/window"); c != http.StatusOK {
		t.Errorf("/api/window once free: %d", c)
	}
}

// Serve keeps at most maxConns connections: idle ones (no request yet,
// or kept alive between two) are closed, the oldest first, for new ones,
// and a user's request still gets through; a header larger than
// maxHeaderBytes is refused. Issue 27 #5: 15,000 idle connections were
// all kept.
func TestServeConnLimit(t *testing.T) {
	x, err := query.Build(trace(t, "report_known"), query.Options{})
	if err != nil {
		t.Fatal(err)
	}
	l, err := Listen("127.0.0.1:0", false)
	if err != nil {
		t.Fatal(err)
	}
	g, err := NewGuard(New(x), l.Addr())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, l, g) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	addr := l.Addr().String()
	const n = 4 * maxConns
	var conns []net.Conn
	for range n {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		conns = append(conns, c)
	}
	// The user's own request, meanwhile.
	req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/api/summary", nil)
	req.Header.Set("Authorization", "Bearer "+g.Token())
	r, err := (&http.Client{Timeout: time.Minute}).Do(req)
	if err != nil {
		t.Fatalf("the user's request among %d idle connections: %v", n, err)
	}
	io.Copy(io.Discard, r.Body)
	r.Body.Close()
	if r.StatusCode != http.StatusOK {
		t.Errorf("the user's request among idle connections: %s", r.Status)
	}
	// Each connection is open (a read times out) or was closed (EOF).
	open := 0
	var wg sync.WaitGroup
	var mu sync.Mutex
	for _, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
			var b [1]byte
			_, err := c.Read(b[:])
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				mu.Lock()
				open++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if open > maxConns {
		t.Errorf("%d of %d idle connections kept open, want at most %d", open, n, maxConns)
	}
	if open == 0 {
		t.Errorf("no idle connection kept: the newest should be")
	}

	big := fmt.Sprintf("X-Big: %s", strings.Repeat("a", 2*maxHeaderBytes))
	if c := rawGet(t, addr, "/api/summary", "Host: "+addr, "Authorization: Bearer "+g.Token(), big); c != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("a header of %d bytes: %d, want 431", 2*maxHeaderBytes, c)
	}
}
