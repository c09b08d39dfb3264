package web

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/internal/testutil"
	"github.com/heapscope/heapscope/internal/tracetest"
	"github.com/heapscope/heapscope/query"
	"github.com/heapscope/heapscope/tracefile"
)

var (
	traceDir  string
	tracesMu  sync.Mutex
	traceOnce = map[string]string{}
)

func TestMain(m *testing.M) {
	d, err := os.MkdirTemp("", "heapscope-web-test-")
	if err != nil {
		panic(err)
	}
	traceDir = d
	defer os.RemoveAll(d)
	testutil.Main(m)
}

// trace records a trace of the workload run with args, once per test
// binary.
func trace(t *testing.T, workload string, args ...string) string {
	t.Helper()
	tracesMu.Lock()
	defer tracesMu.Unlock()
	name := strings.Join(append([]string{workload}, args...), "-")
	if p, ok := traceOnce[name]; ok {
		return p
	}
	bin := testutil.MustBuild(t, workload, testutil.Options{})
	p := filepath.Join(traceDir, name+".hst")
	tracetest.Record(t, p, bin, args...)
	traceOnce[name] = p
	return p
}

// serveTrace indexes path and serves it on a loopback port.
func serveTrace(t *testing.T, path string) (*query.Index, *testServer) {
	t.Helper()
	x, err := query.Build(path, query.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return x, newTestServer(t, New(x))
}

// testServer serves a handler behind a Guard on a loopback port, as
// `heapscope serve` does. URL is its address without the token: the
// browser logs in by login, and client sends the token.
type testServer struct {
	*httptest.Server
	guard *Guard
}

// tokens are the tokens of the test servers, by address (host:port).
var tokens sync.Map

func newTestServer(t *testing.T, h http.Handler) *testServer {
	t.Helper()
	srv := httptest.NewUnstartedServer(nil)
	g, err := NewGuard(h, srv.Listener.Addr())
	if err != nil {
		t.Fatal(err)
	}
	srv.Config.Handler = g
	srv.Start()
	tokens.Store(srv.Listener.Addr().String(), g.Token())
	t.Cleanup(srv.Close)
	return &testServer{srv, g}
}

// login is the URL of path ("/?tab=sites") with the server's token: a
// browser's first visit, which trades it for the cookie.
func (s *testServer) login(path string) string {
	sep := "?"
	if strings.Contains(path, "?") {
		sep = "&"
	}
	return s.URL + path + sep + "token=" + s.guard.Token()
}

// client is an HTTP client that sends each test server its token, as a
// script does ("Authorization: Bearer").
var client = &http.Client{Transport: tokenTransport{}}

type tokenTransport struct{}

func (tokenTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if tok, ok := tokens.Load(r.URL.Host); ok {
		r = r.Clone(r.Context())
		r.Header.Set("Authorization", "Bearer "+tok.(string))
	}
	return http.DefaultTransport.RoundTrip(r)
}

// events reads a trace's heap events directly, without the index: the
// independent computation the tests check the index and the page against.
type events struct {
	start int64 // the header's start
	evs   []event.Event
	exits []exitAt
}

// exitAt is a process's exit, after the first n events.
type exitAt struct {
	n int
	x event.Exit
}

func (e *events) Process(event.Process) error { return nil }
func (e *events) Exit(x event.Exit) error {
	e.exits = append(e.exits, exitAt{len(e.evs), x})
	return nil
}
func (e *events) Module(event.Module) error     { return nil }
func (e *events) Stack(event.Stack) error       { return nil }
func (e *events) Snapshot(event.Snapshot) error { return nil }
func (e *events) Note(event.Note) error         { return nil }
func (e *events) Stats(event.Stats) error       { return nil }
func (e *events) Events(evs []event.Event) error {
	e.evs = append(e.evs, evs...)
	return nil
}

func readEvents(t *testing.T, path string) *events {
	t.Helper()
	r, err := tracefile.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	e := &events{start: r.Header().MonoStart}
	if err := r.Replay(e, tracefile.Window{}); err != nil {
		t.Fatal(err)
	}
	return e
}

// gaps returns the middles of the two longest pauses between events, from
// the trace's start, in time order.
func (e *events) gaps() (int64, int64) {
	var a, b int
	d := func(i int) int64 { return e.evs[i].Time - e.evs[i-1].Time }
	for i := 1; i < len(e.evs); i++ {
		switch {
		case a == 0 || d(i) > d(a):
			b, a = a, i
		case b == 0 || d(i) > d(b):
			b = i
		}
	}
	if a > b {
		a, b = b, a
	}
	mid := func(i int) int64 { return (e.evs[i].Time+e.evs[i-1].Time)/2 - e.start }
	return mid(a), mid(b)
}

// classes computes the four classes of [from, to) (ns from the trace's
// start) with a map of live blocks: bytes and blocks of AIFI, AIFO, AOFI,
// AOFO. A process's exit ends its blocks.
func (e *events) classes(from, to int64) [4][2]uint64 {
	type blk struct {
		t    int64
		size uint64
	}
	var out [4][2]uint64
	t0, t1 := e.start+from, e.start+to
	classify := func(b blk, freed int64) {
		if freed < t0 || b.t >= t1 {
			return
		}
		c := 0
		if b.t < t0 {
			c = 2
		}
		if freed >= t1 {
			c++
		}
		out[c][0] += b.size
		out[c][1]++
	}
	type key struct {
		pid  uint32
		addr uint64
	}
	live := map[key]blk{}
	free := func(pid uint32, addr uint64, t int64) {
		if b, ok := live[key{pid, addr}]; ok {
			classify(b, t)
			delete(live, key{pid, addr})
		}
	}
	exits := e.exits
	for i, ev := range e.evs {
		for ; len(exits) > 0 && exits[0].n <= i; exits = exits[1:] {
			for k, b := range live {
				if k.pid == exits[0].x.PID {
					classify(b, exits[0].x.Time)
					delete(live, k)
				}
			}
		}
		switch ev.Kind {
		case event.KindAlloc:
			if ev.Addr != 0 {
				free(ev.PID, ev.Addr, ev.Time) // a lost free
				live[key{ev.PID, ev.Addr}] = blk{ev.Time, ev.Size}
			}
		case event.KindFree:
			free(ev.PID, ev.Addr, ev.Time)
		case event.KindRealloc:
			if ev.Addr == 0 && (ev.Size != 0 || ev.OldAddr == 0) {
				continue
			}
			if ev.OldAddr != 0 {
				free(ev.PID, ev.OldAddr, ev.Time)
			}
			if ev.Addr != 0 {
				live[key{ev.PID, ev.Addr}] = blk{ev.Time, ev.Size}
			}
		}
	}
	for _, x := range exits {
		for k, b := range live {
			if k.pid == x.x.PID {
				classify(b, x.x.Time)
				delete(live, k)
			}
		}
	}
	for _, b := range live {
		classify(b, 1<<62)
	}
	return out
}
