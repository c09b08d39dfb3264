// Package web serves a trace's index (package query) over HTTP: a JSON API
// under /api/ (see API.md) and one page, embedded in the binary, that draws
// the timeline, flame graphs, tables and window classes from it. Nothing is
// fetched from the network: the page's script is bundled at go generate time
// (see ui/) and committed.
package web

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"net"
	"net/http"
	"sort"
	"strconv"
	"sync"
	"syscall"

	"github.com/heapscope/heapscope/analyze"
	"github.com/heapscope/heapscope/query"
	"github.com/heapscope/heapscope/report"
	"github.com/heapscope/heapscope/symbolize"
)

//go:generate go run ./internal/bundle

//go:embed ui/index.html ui/dist/app.js ui/style.css
var assets embed.FS

// Server answers the API and serves the page for one index.
type Server struct {
	x    *query.Index
	base *query.Index // the trace to compare with; nil: none
	mux  *http.ServeMux
	gate *gate // shared by the servers of a Live

	mu    sync.Mutex
	cache []cached // the latest windows answered, newest last

	baseOnce sync.Once
	baseRes  *query.Result
}

// cached is a window's answer: the page asks for the classes, the flame
// graph and a table of the same window at once, and each reads every row.
type cached struct {
	f   query.Filter
	res *query.Result
}

// cacheLen is how many windows the server remembers.
const cacheLen = 8

// waitFor waits until the answer to f for cost c can be had (see
// windowFor), or ctx ends.
func (s *Server) waitFor(ctx context.Context, f query.Filter, c query.Cost) error {
	if !s.x.Ready() && query.QuickCost(c) {
		if _, ok := s.x.Quick(f); ok {
			return nil
		}
	}
	return s.x.Wait(ctx)
}

// windowFor returns the answer to f for cost c: before the index is
// built, the report's pass answers the whole trace's quick costs (see
// query.Quick); other questions wait for the index (or for ctx to end).
func (s *Server) windowFor(ctx context.Context, f query.Filter, c query.Cost) (*query.Result, error) {
	if !s.x.Ready() && query.QuickCost(c) {
		if res, ok := s.x.Quick(f); ok {
			return res, nil
		}
	}
	if err := s.x.Wait(ctx); err != nil {
		return nil, err
	}
	return s.windowOf(f), nil
}

// windowOf returns the answer to f, from the cache when it is there. The
// index must be built.
func (s *Server) windowOf(f query.Filter) *query.Result {
	s.mu.Lock()
	for _, c := range s.cache {
		if c.f == f {
			s.mu.Unlock()
			return c.res
		}
	}
	s.mu.Unlock()
	res := s.x.Window(f)
	s.mu.Lock()
	if len(s.cache) == cacheLen {
		s.cache = s.cache[1:]
	}
	s.cache = append(s.cache, cached{f, res})
	s.mu.Unlock()
	return res
}

// New returns a Server for x.
func New(x *query.Index) *Server { return NewWithBase(x, nil) }

// NewWithBase returns a Server for x that also compares x with base
// (/api/diff): what serve --base does.
func NewWithBase(x, base *query.Index) *Server { return newServer(x, base, newGate()) }

func newServer(x, base *query.Index, g *gate) *Server {
	s := &Server{x: x, base: base, mux: http.NewServeMux(), gate: g}
	ui, err := fs.Sub(assets, "ui")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	s.mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		serveFile(w, ui, "index.html", "text/html; charset=utf-8")
	})
	s.mux.HandleFunc("GET /app.js", func(w http.ResponseWriter, r *http.Request) {
		serveFile(w, ui, "dist/app.js", "text/javascript; charset=utf-8")
	})
	s.mux.HandleFunc("GET /style.css", func(w http.ResponseWriter, r *http.Request) { serveFile(w, ui, "style.css", "text/css; charset=utf-8") })
	s.mux.HandleFunc("GET /api/summary", s.summary)
	s.mux.HandleFunc("GET /api/index", s.index)
	s.mux.HandleFunc("GET /api/timeline", s.timeline)
	s.mux.HandleFunc("GET /api/window", s.window)
	s.mux.HandleFunc("GET /api/flame", s.flame)
	s.mux.HandleFunc("GET /api/functions", s.functions)
	s.mux.HandleFunc("GET /api/callers", s.callers)
	s.mux.HandleFunc("GET /api/sites", s.sites)
	s.mux.HandleFunc("GET /api/histogram", s.histogram)
	s.mux.HandleFunc("GET /api/export", s.export)
	s.mux.HandleFunc("GET /api/diff", s.diff)
	s.views()
	s.mux.HandleFunc("GET /api/rss", s.rss)          // memory_census.go
	s.mux.HandleFunc("GET /api/leaks", s.traceLeaks) // leaks.go
	return s
}

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	// The page is self-contained: nothing else may be loaded or framed.
	h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	s.mux.ServeHTTP(w, r)
}

func serveFile(w http.ResponseWriter, fsys fs.FS, name, ctype string) {
	b, err := fs.ReadFile(fsys, name)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", ctype)
	w.Write(b)
}

// ErrAddrInUse is returned by Listen when the address is taken.
var ErrAddrInUse = errors.New("address already in use")

// ErrNotLoopback is returned by Listen for an address other machines can
// reach, unless it is allowed.
var ErrNotLoopback = errors.New("not a loopback address")

// Listen listens on addr (host:port; port 0 picks a free one). A port in use
// is an error wrapping ErrAddrInUse; an address that is not loopback (one
// that other machines can reach: an interface's, 0.0.0.0, [::]) one
// wrapping ErrNotLoopback unless remote is true.
func Listen(addr string, remote bool) (net.Listener, error) {
	l, err := net.Listen("tcp", addr)
	if errors.Is(err, syscall.EADDRINUSE) {
		return nil, fmt.Errorf("listen on %s: %w (another program has it: choose another --listen)", addr, ErrAddrInUse)
	}
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", addr, err)
	}
	if !remote && !Loopback(l.Addr()) {
		l.Close()
		return nil, fmt.Errorf("listen on %s: %w: other machines could reach it (--allow-remote allows it)", addr, ErrNotLoopback)
	}
	return l, nil
}

// Loopback reports whether a is a loopback address.
func Loopback(a net.Addr) bool {
	ta, ok := a.(*net.TCPAddr)
	return ok && ta.IP.IsLoopback()
}

// badRequest is a parameter the API cannot use.
type badRequest struct{ msg string }

func (e badRequest) Error() string { return e.msg }

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	enc := json.NewEncoder(w)
	if err := enc.Encode(v); err != nil {
		// The client went away; nothing to tell it.
		return
	}
}

func writeErr(w http.ResponseWriter, err error) {
	code := http.StatusInternalServerError
	var br badRequest
	if errors.As(err, &br) {
		code = http.StatusBadRequest
	}
	if errors.Is(err, query.ErrAggregate) || errors.Is(err, query.ErrNotIndexed) {
		code = http.StatusUnprocessableEntity
	}
	if errors.Is(err, ErrBusy) {
		code = http.StatusServiceUnavailable
		w.Header().Set("Retry-After", "1")
	}
	writeErrCode(w, code, err)
}

// writeErrCode answers {"error": err} with status code.
func writeErrCode(w http.ResponseWriter, code int, err error) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(map[string]string{"error": err.Error()})
}

// params are the query parameters every question shares.
type params struct {
	f    query.Filter
	cost query.Cost
	top  int // 1 to maxTop
	// topCapped: the question asked for more than maxTop, or for all
	// (top=0), and top is maxTop.
	topCapped bool
	query     map[string][]string
}

func intParam(q map[string][]string, name string, def int64) (int64, error) {
	v := q[name]
	if len(v) == 0 || v[0] == "" {
		return def, nil
	}
	n, err := strconv.ParseInt(v[0], 10, 64)
	if err != nil {
		return 0, badRequest{fmt.Sprintf("%s: want an integer, not %q", name, v[0])}
	}
	return n, nil
}

// parseEvents parses a question about the trace's events: on an error (a
// bad parameter, an aggregate trace) it answers it and returns false.
func (s *Server) parseEvents(w http.ResponseWriter, r *http.Request) (*params, bool) {
	p, err := s.parse(r)
	if err == nil {
		err = s.needEvents()
	}
	if err != nil {
		writeErr(w, err)
		return nil, false
	}
	return p, true
}

// parseIndexed is parseEvents for a question that needs the windowed
// index: it waits for it, and answers why there is none.
func (s *Server) parseIndexed(w http.ResponseWriter, r *http.Request) (*params, bool) {
	p, ok := s.parseEvents(w, r)
	if !ok {
		return nil, false
	}
	if err := s.x.Wait(r.Context()); err != nil {
		writeErr(w, err)
		return nil, false
	}
	return p, true
}

// parse reads from_ns, to_ns, at_ns (from the trace's start), pid, tid,
// cost and top: what is outside its range is clamped where API.md says so,
// and a 400 where it cannot be (a time past the trace's clock, a pid that
// is not one, a negative top).
func (s *Server) parse(r *http.Request) (*params, error) {
	q := r.URL.Query()
	p := &params{query: q}
	base := s.x.Header.MonoStart
	var vals [6]int64
	for i, name := range []string{"from_ns", "to_ns", "at_ns", "pid", "tid", "top"} {
		def := int64(0)
		if name == "top" {
			def = defTop
		}
		v, err := intParam(q, name, def)
		if err != nil {
			return nil, err
		}
		vals[i] = v
	}
	// A time is from the trace's start: one outside the trace is clamped
	// to it (query.Span), one the trace's clock cannot count is a 400
	// (it wrapped round to the whole trace). 0 is "not given", so a time
	// that lands on the clock's 0 is taken as just before it.
	var times [3]int64
	for i, name := range []string{"from_ns", "to_ns", "at_ns"} {
		v := vals[i]
		if v == 0 {
			continue
		}
		if v > math.MaxInt64-base || v < math.MinInt64-min(base, 0) {
			return nil, badRequest{fmt.Sprintf("%s: %d ns from the trace's start is past what its clock counts", name, v)}
		}
		if times[i] = base + v; times[i] == 0 {
			times[i] = -1
		}
	}
	p.f.From, p.f.To, p.f.At = times[0], times[1], times[2]
	if vals[1] != 0 && vals[1] <= vals[0] {
		return nil, badRequest{fmt.Sprintf("to_ns (%d) must be after from_ns (%d)", vals[1], vals[0])}
	}
	if vals[3] < 0 || vals[3] > 1<<32-1 || vals[4] < 0 || vals[4] > 1<<32-1 {
		return nil, badRequest{"pid and tid must be process and thread ids"}
	}
	p.f.PID, p.f.TID = uint32(vals[3]), uint32(vals[4])
	switch top := vals[5]; {
	case top < 0:
		return nil, badRequest{fmt.Sprintf("top: want 0 (as many as the server gives) or more, not %d", top)}
	case top == 0 || top > maxTop:
		p.top, p.topCapped = maxTop, true
	default:
		p.top = int(top)
	}
	p.cost = query.CostLeaks
	if c := q.Get("cost"); c != "" {
		cost, err := query.ParseCost(c)
		if err != nil {
			return nil, badRequest{err.Error()}
		}
		p.cost = cost
	}
	m, err := parseMatch(q)
	if err != nil {
		return nil, err
	}
	p.f.Match = m
	return p, nil
}

// rel turns a trace-clock time into ns from the trace's start.
func (s *Server) rel(t int64) int64 { return t - s.x.Header.MonoStart }

func (s *Server) needEvents() error {
	if s.x.Aggregate() {
		return query.ErrAggregate
	}
	return nil
}

// Summary is /api/summary: the report's summary of the whole trace (the
// JSON report's fields, without its site lists), and what the index holds.
type Summary struct {
	*report.JSON
	StartNs int64 `json:"start_ns"` // the first event, from the trace's start
	EndNs   int64 `json:"end_ns"`   // the last event
	Index   struct {
		Events int `json:"events"`
		Blocks int `json:"blocks"`
		Sites  int `json:"sites"`
	} `json:"index"`
	Costs []string `json:"costs"`
	// Indexing is true while the windowed index is being built: until
	// then windows, instants and the AIFI class wait for it (see
	// /api/index), and start_ns and end_ns are the heap model's.
	Indexing bool `json:"indexing"`
	// Base is the trace compared with (serve --base), or null.
	Base *BaseSummary `json:"base"`
}

// BaseSummary is the base trace of a comparison.
type BaseSummary struct {
	File    string             `json:"file"`
	Summary report.JSONSummary `json:"summary"`
}

func (s *Server) summary(w http.ResponseWriter, r *http.Request) {
	p, err := s.parse(r)
	if err != nil {
		writeErr(w, err)
		return
	}
	d := s.x.Report.Document(1)
	if f := (query.Filter{PID: p.f.PID, TID: p.f.TID, Match: p.f.Match}); f != (query.Filter{}) {
		// The summary of one process, thread or the sites a filter
		// keeps: the report of their blocks, as `report --pid` gives
		// a process's.
		if err := s.needEvents(); err != nil {
			writeErr(w, err)
			return
		}
		if err := s.x.Wait(r.Context()); err != nil {
			writeErr(w, err)
			return
		}
		leave, ok := s.heavy(w, r)
		if !ok {
			return
		}
		defer leave()
		d = s.x.WindowReport(s.windowOf(f)).Document(1)
	}
	d.Leaks, d.Peak, d.Allocations, d.Timeline = nil, nil, nil, nil
	out := Summary{JSON: d, StartNs: s.rel(s.x.Start()), EndNs: s.rel(s.x.End()), Costs: query.CostNames(), Indexing: !s.x.Ready()}
	out.Index.Events, out.Index.Blocks, out.Index.Sites = s.x.Events(), s.x.Blocks(), len(s.x.Sites())
	if s.base != nil {
		out.Base = &BaseSummary{File: s.base.File, Summary: s.base.Report.Document(1).Summary}
	}
	writeJSON(w, out)
}

// Timeline is /api/timeline.
type Timeline struct {
	FromNs  int64           `json:"from_ns"`
	ToNs    int64           `json:"to_ns"`
	WidthNs int64           `json:"width_ns"`
	Peak    Point           `json:"peak"` // the peak of the span
	Points  []TimelinePoint `json:"points"`
	// Coarse is true for the timeline of the heap model's pass, answered
	// while the index is built: each point is its bucket's largest heap
	// (max_*), and end_*, allocs and frees are 0.
	Coarse bool    `json:"coarse,omitempty"`
	Capped *Capped `json:"capped,omitempty"` // more points were asked for than maxPoints
	// Estimated says, for a sampled trace, that the numbers are
	// estimates, scaled up as the report's; "" when exact.
	Estimated string `json:"estimated,omitempty"`
	// PID and TID are the process and thread whose heap this is (0: all).
	PID uint32 `json:"pid,omitempty"`
	TID uint32 `json:"tid,omitempty"`
}

// Point is an instant and the heap then.
type Point struct {
	TNs    int64  `json:"t_ns"`
	Bytes  uint64 `json:"bytes"`
	Blocks uint64 `json:"blocks"`
}

// TimelinePoint is a bucket of the timeline, its time from the trace's
// start.
type TimelinePoint struct {
	TNs int64 `json:"t_ns"`
	query.Bucket
}

func (s *Server) timeline(w http.ResponseWriter, r *http.Request) {
	p, ok := s.parseEvents(w, r)
	if !ok {
		return
	}
	n, err := intParam(p.query, "points", defPoints)
	if err != nil {
		writeErr(w, err)
		return
	}
	var capped *Capped
	if n > maxPoints {
		capped = &Capped{Points: maxPoints}
	}
	n = min(max(n, 1), maxPoints)
	// The heap model's coarse timeline answers the whole trace's, of
	// every process and site, while the index is built.
	quick := !s.x.Ready() && p.f.From == 0 && p.f.To == 0 && p.f.PID == 0 && p.f.TID == 0 && p.f.Match == ""
	if !quick {
		if err := s.x.Wait(r.Context()); err != nil {
			writeErr(w, err)
			return
		}
	}
	leave, ok := s.heavy(w, r)
	if !ok {
		return
	}
	defer leave()
	if quick {
		out := s.quickTimeline(int(n))
		out.Capped = capped
		writeJSON(w, out)
		return
	}
	// The heap of the process, thread and sites asked (pid, tid, include,
	// exclude), or of all.
	sp := s.x.Span(p.f)
	out := Timeline{FromNs: s.rel(sp.From), ToNs: s.rel(sp.To), Points: []TimelinePoint{}, Capped: capped,
		Estimated: s.x.Report.Estimate(), PID: p.f.PID, TID: p.f.TID}
	buckets, pk, ok := s.x.TimelinePeakOf(p.f, sp, int(n))
	if ok {
		out.Peak = Point{TNs: s.rel(pk.Time), Bytes: pk.Bytes, Blocks: pk.Blocks}
	}
	for _, b := range buckets {
		out.WidthNs = b.Width
		out.Points = append(out.Points, TimelinePoint{TNs: s.rel(b.Time), Bucket: b})
	}
	writeJSON(w, out)
}

// capTop is the Capped of a list cut to p.top with more left out: set when
// the question asked for more than the server gives.
func (p *params) capTop(more int) *Capped {
	if p.topCapped && more > 0 {
		return &Capped{Top: p.top}
	}
	return nil
}

// Window is /api/window: the four classes of the window, in total and by
// site, and the heap at its start, end and peak.
type Window struct {
	FromNs  int64         `json:"from_ns"`
	ToNs    int64         `json:"to_ns"`
	Total   Classes       `json:"total"`
	Start   query.Amount  `json:"start"` // live at from_ns: AOFI+AOFO
	End     query.Amount  `json:"end"`   // live at to_ns: AIFO+AOFO
	Peak    Point         `json:"peak"`
	Sites   []SiteClasses `json:"sites"` // by the sum of the four classes' bytes, at most top
	More    int           `json:"more"`  // sites left out
	Capped  *Capped       `json:"capped,omitempty"`
	Unmatch uint64        `json:"unmatched_frees"`
	// ExitedAIFI is what of AIFI its process's exit ended, not a free
	// (leaks that left the heap in the window).
	ExitedAIFI query.Amount `json:"exited_aifi"`
	Estimated  string       `json:"estimated,omitempty"` // see Timeline
	// Suppressed is what of each class the sites a suppression rule
	// matches hold (their rows say which rule): their leaks are left
	// out of every leak cost, and stated apart, as the report does.
	Suppressed Classes `json:"suppressed"`
}

// Classes are the four classes.
type Classes struct {
	AIFI query.Amount `json:"aifi"`
	AIFO query.Amount `json:"aifo"`
	AOFI query.Amount `json:"aofi"`
	AOFO query.Amount `json:"aofo"`
}

func classes(c [4]query.Amount) Classes {
	return Classes{AIFI: c[query.AIFI], AIFO: c[query.AIFO], AOFI: c[query.AOFI], AOFO: c[query.AOFO]}
}

// SiteClasses is one site's classes.
type SiteClasses struct {
	Site  int                `json:"site"`
	Name  string             `json:"name"` // symbolize.SiteName: as the JSON report names sites
	PIDs  []uint32           `json:"pids"`
	Stack []report.JSONFrame `json:"stack"`
	// SuppressedBy is the rule that suppresses the site's leaks ("" when
	// none does): "leak:PATTERN" or "default:NAME".
	SuppressedBy string `json:"suppressed_by,omitempty"`
	Classes
}

func (s *Server) window(w http.ResponseWriter, r *http.Request) {
	p, ok := s.parseIndexed(w, r)
	if !ok {
		return
	}
	leave, ok := s.heavy(w, r)
	if !ok {
		return
	}
	defer leave()
	res := s.windowOf(p.f)
	out := Window{FromNs: s.rel(res.Span.From), ToNs: s.rel(res.Span.To), Total: classes(res.Total.Classes),
		Start: res.Total.Start, End: res.Total.End, Unmatch: res.Unmatch, ExitedAIFI: res.Total.ExitedAIFI, Sites: []SiteClasses{},
		Estimated: s.x.Report.Estimate()}
	if res.PeakSeq >= 0 {
		out.Peak = Point{TNs: s.rel(res.Peak.Time), Bytes: res.Peak.Bytes, Blocks: res.Peak.Blocks}
	}
	type ranked struct {
		id  int
		sum uint64
	}
	var rs []ranked
	var sup [4]query.Amount
	for i := range res.Sites {
		var sum uint64
		for k, c := range res.Sites[i].Classes {
			sum += c.Bytes
			if s.x.Suppressed(i) {
				sup[k].Bytes += c.Bytes
				sup[k].Blocks += c.Blocks
			}
		}
		if sum > 0 {
			rs = append(rs, ranked{i, sum})
		}
	}
	sort.Slice(rs, func(a, b int) bool {
		if rs[a].sum != rs[b].sum {
			return rs[a].sum > rs[b].sum
		}
		return rs[a].id < rs[b].id
	})
	if len(rs) > p.top {
		out.More = len(rs) - p.top
		rs = rs[:p.top]
	}
	out.Suppressed = classes(sup)
	out.Capped = p.capTop(out.More)
	sites := s.x.Sites()
	for _, k := range rs {
		st := sites[k.id]
		sc := SiteClasses{Site: k.id, Name: symbolize.SiteName(st.Frames), PIDs: st.PIDs, Stack: jsonStack(st.Frames),
			Classes: classes(res.Sites[k.id].Classes)}
		if r := s.x.SuppressedBy(k.id); r != nil {
			sc.SuppressedBy = r.Text
		}
		out.Sites = append(out.Sites, sc)
	}
	writeJSON(w, out)
}

func jsonStack(fs []symbolize.Frame) []report.JSONFrame {
	out := make([]report.JSONFrame, len(fs))
	for i, f := range fs {
		out[i] = report.JSONFrame{Function: f.Function, File: f.File, Line: f.Line, Module: f.Module,
			Address: "0x" + strconv.FormatUint(f.Address, 16), Offset: "0x" + strconv.FormatUint(f.Offset, 16), Inlined: f.Inlined}
	}
	return out
}

// FlameAnswer is /api/flame: the flame graph, and whether the server's
// node limit cut it.
type FlameAnswer struct {
	*query.Flame
	Capped *Capped `json:"capped,omitempty"`
}

func (s *Server) flame(w http.ResponseWriter, r *http.Request) {
	p, ok := s.parseEvents(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	share := defMinShare
	if v := q.Get("min_share"); v != "" {
		var err error
		share, err = strconv.ParseFloat(v, 64)
		if err != nil || !(share >= 0 && share <= 1) {
			writeErr(w, badRequest{fmt.Sprintf("min_share: want a number from 0 to 1, not %q", v)})
			return
		}
	}
	nodes, err := intParam(q, "max_nodes", defMaxNodes)
	if err != nil {
		writeErr(w, err)
		return
	}
	asked := nodes
	nodes = min(max(nodes, 1), maxMaxNodes)
	inv := q.Get("invert") == "1" || q.Get("invert") == "true"
	if err := s.waitFor(r.Context(), p.f, p.cost); err != nil {
		writeErr(w, err)
		return
	}
	leave, ok := s.heavy(w, r)
	if !ok {
		return
	}
	defer leave()
	res, err := s.windowFor(r.Context(), p.f, p.cost)
	if err != nil {
		writeErr(w, err)
		return
	}
	out := FlameAnswer{Flame: s.x.Flame(res, p.cost, inv, share, int(nodes))}
	if asked > maxMaxNodes && len(out.Nodes) >= maxMaxNodes {
		out.Capped = &Capped{MaxNodes: maxMaxNodes}
	}
	writeJSON(w, out)
}

// Functions is /api/functions.
type Functions struct {
	Cost      string           `json:"cost"`
	Functions []query.Function `json:"functions"` // at most top
	More      int              `json:"more"`      // functions left out
	Capped    *Capped          `json:"capped,omitempty"`
	Estimated string           `json:"estimated,omitempty"` // see Timeline
}

func (s *Server) functions(w http.ResponseWriter, r *http.Request) {
	p, ok := s.parseEvents(w, r)
	if !ok {
		return
	}
	if err := s.waitFor(r.Context(), p.f, p.cost); err != nil {
		writeErr(w, err)
		return
	}
	leave, ok := s.heavy(w, r)
	if !ok {
		return
	}
	defer leave()
	res, err := s.windowFor(r.Context(), p.f, p.cost)
	if err != nil {
		writeErr(w, err)
		return
	}
	out := Functions{Cost: p.cost.String(), Functions: s.x.Functions(res, p.cost, 0), Estimated: s.x.Report.Estimate()}
	if len(out.Functions) > p.top {
		out.More = len(out.Functions) - p.top
		out.Functions = out.Functions[:p.top]
	}
	out.Capped = p.capTop(out.More)
	writeJSON(w, out)
}

// CallersAnswer is /api/callers: the caller/callee view of one function,
// at most top of each, and how many were left out.
type CallersAnswer struct {
	*query.Callers
	MoreCallers int     `json:"more_callers"`
	MoreCallees int     `json:"more_callees"`
	Capped      *Capped `json:"capped,omitempty"`
}

// callers is the caller/callee view of one function.
func (s *Server) callers(w http.ResponseWriter, r *http.Request) {
	p, err := s.parse(r)
	if err == nil {
		err = s.needEvents()
	}
	fn := r.URL.Query().Get("function")
	if err == nil && fn == "" {
		err = badRequest{"function: want a function's name"}
	}
	if err == nil {
		err = s.waitFor(r.Context(), p.f, p.cost)
	}
	if err != nil {
		writeErr(w, err)
		return
	}
	leave, ok := s.heavy(w, r)
	if !ok {
		return
	}
	defer leave()
	res, err := s.windowFor(r.Context(), p.f, p.cost)
	if err != nil {
		writeErr(w, err)
		return
	}
	out := CallersAnswer{Callers: s.x.Callers(res, p.cost, fn, 0)}
	if len(out.Callers.Callers) > p.top {
		out.MoreCallers = len(out.Callers.Callers) - p.top
		out.Callers.Callers = out.Callers.Callers[:p.top]
	}
	if len(out.Callees) > p.top {
		out.MoreCallees = len(out.Callees) - p.top
		out.Callees = out.Callees[:p.top]
	}
	out.Capped = p.capTop(out.MoreCallers + out.MoreCallees)
	writeJSON(w, out)
}

// Sites is /api/sites: the JSON report of the window, and whether the
// server's limit cut its lists.
type Sites struct {
	*report.JSON
	Capped *Capped `json:"capped,omitempty"`
}

// sites answers with the JSON report of the window: for the whole trace,
// `heapscope report --format json --top N`'s document itself.
func (s *Server) sites(w http.ResponseWriter, r *http.Request) {
	p, err := s.parse(r)
	if err == nil {
		err = s.waitDocument(r.Context(), p)
	}
	if err != nil {
		writeErr(w, err)
		return
	}
	leave, ok := s.heavy(w, r)
	if !ok {
		return
	}
	defer leave()
	d := s.document(p)
	out := Sites{JSON: d}
	if n := max(len(d.Leaks), len(d.Peak), len(d.Allocations)); n >= p.top {
		out.Capped = p.capTop(1) // a list as long as the limit: perhaps cut
	}
	writeJSON(w, out)
}

// waitDocument waits until the JSON report of p's window can be had: at
// once for the whole trace, once the index is built for a window.
func (s *Server) waitDocument(ctx context.Context, p *params) error {
	if p.f == (query.Filter{}) {
		return nil
	}
	if s.x.Aggregate() {
		return query.ErrAggregate
	}
	return s.x.Wait(ctx)
}

// document is the JSON report of p's window (see waitDocument): the
// index's report for the whole trace, and else the window's.
func (s *Server) document(p *params) *report.JSON {
	if p.f == (query.Filter{}) {
		return s.x.Report.Document(p.top)
	}
	return s.x.WindowReport(s.windowOf(p.f)).Document(p.top)
}

// Histogram is /api/histogram.
type Histogram struct {
	Sizes     []report.JSONBucket `json:"sizes"`
	Lifetimes []LifetimeBucket    `json:"lifetimes"`
	Live      uint64              `json:"live"`                // blocks of the window never freed
	Estimated string              `json:"estimated,omitempty"` // see Timeline
	// TimeResolutionNs is the trace's time resolution: lifetimes are
	// multiples of it, the first bucket (lt_ns 1) holds those under it,
	// and the buckets between cannot hold any (they are left out).
	TimeResolutionNs int64 `json:"time_resolution_ns"`
}

// LifetimeBucket counts blocks that lived less than LtNs (and at least the
// previous bucket's LtNs).
type LifetimeBucket struct {
	LtNs  uint64 `json:"lt_ns"`
	Count uint64 `json:"count"`
}

func (s *Server) histogram(w http.ResponseWriter, r *http.Request) {
	p, ok := s.parseIndexed(w, r)
	if !ok {
		return
	}
	leave, ok := s.heavy(w, r)
	if !ok {
		return
	}
	defer leave()
	res := s.windowOf(p.f)
	tres := max(int64(s.x.Header.TimeResolution), 1)
	out := Histogram{Sizes: []report.JSONBucket{}, Lifetimes: []LifetimeBucket{}, Live: res.Lifetime.Live, Estimated: s.x.Report.Estimate(),
		TimeResolutionNs: tres}
	for _, b := range analyze.SizeBuckets(&res.Hist) {
		out.Sizes = append(out.Sizes, report.JSONBucket{Le: b.Le, Count: b.Count})
	}
	last := 0
	for i, n := range res.Lifetime.Buckets {
		if n != 0 {
			last = i + 1
		}
	}
	for i := 0; i < last; i++ {
		if i > 0 && int64(1)<<i <= tres && res.Lifetime.Buckets[i] == 0 {
			continue // shorter than the resolution, and not the same timestamp: none
		}
		out.Lifetimes = append(out.Lifetimes, LifetimeBucket{LtNs: 1 << i, Count: res.Lifetime.Buckets[i]})
	}
	writeJSON(w, out)
}

func (s *Server) export(w http.ResponseWriter, r *http.Request) {
	p, err := s.parse(r)
	if err == nil && p.f != (query.Filter{}) {
		if err = s.needEvents(); err == nil {
			err = s.x.Wait(r.Context())
		}
	}
	if err != nil {
		writeErr(w, err)
		return
	}
	var write func(io.Writer, *report.Report) error
	switch f := r.URL.Query().Get("format"); f {
	case "pprof":
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Disposition", `attachment; filename="heapscope.pb.gz"`)
		write = func(w io.Writer, rep *report.Report) error { return rep.WritePprof(w) }
	case "collapsed":
		m, err := report.ParseMetric(r.URL.Query().Get("metric"))
		if r.URL.Query().Get("metric") == "" {
			m, err = metricOf(p.cost), nil
		}
		if err != nil {
			writeErr(w, badRequest{err.Error()})
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Content-Disposition", `attachment; filename="heapscope.collapsed.txt"`)
		write = func(w io.Writer, rep *report.Report) error { return rep.WriteCollapsed(w, m) }
	case "json", "":
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Disposition", `attachment; filename="heapscope.json"`)
		write = func(w io.Writer, rep *report.Report) error { return rep.WriteJSON(w, p.top) }
	default:
		writeErr(w, badRequest{fmt.Sprintf("format: want pprof, collapsed or json, not %q", f)})
		return
	}
	leave, ok := s.heavy(w, r)
	if !ok {
		return
	}
	defer leave()
	rep := s.x.Report
	if p.f != (query.Filter{}) {
		rep = s.x.WindowReport(s.windowOf(p.f))
	}
	write(w, rep)
}

// metricOf is the collapsed-stacks metric nearest a cost.
func metricOf(c query.Cost) report.Metric {
	switch c {
	case query.CostPeak:
		return report.PeakSpace
	case query.CostBytes:
		return report.AllocSpace
	case query.CostCalls:
		return report.AllocObjects
	case query.CostTemporary:
		return report.Temporary
	}
	return report.InuseSpace
}

// Diff is /api/diff: each site's cost in the window of this trace and in
// the whole base trace, matched by symbolized frames.
type Diff struct {
	Cost   string     `json:"cost"`
	Base   string     `json:"base"` // the base trace's file
	Total  DiffTotal  `json:"total"`
	Sites  []DiffSite `json:"sites"` // by the size of the difference, at most top
	More   int        `json:"more"`
	Capped *Capped    `json:"capped,omitempty"`
	// Suppressed is present for a leak cost when a rule suppressed some.
	Suppressed *DiffSuppressed `json:"suppressed,omitempty"`
}

// DiffTotal is the cost over every site.
type DiffTotal struct {
	Value uint64 `json:"value"`
	Base  uint64 `json:"base"`
	Delta int64  `json:"delta"`
}

// DiffSuppressed is what suppressed sites hold in each trace, left out of
// a leak cost's values (see query.Index.SiteCost).
type DiffSuppressed struct {
	Value uint64 `json:"value"`
	Base  uint64 `json:"base"`
}

// DiffSite is one site's cost in both traces.
type DiffSite struct {
	Name  string             `json:"name"` // as SiteClasses'
	Stack []report.JSONFrame `json:"stack"`
	DiffTotal
}

func (s *Server) diff(w http.ResponseWriter, r *http.Request) {
	p, err := s.parse(r)
	if err == nil && s.base == nil {
		err = badRequest{"no base trace: start serve with --base FILE"}
	}
	if err == nil {
		err = s.needEvents()
	}
	if err == nil && s.base.Aggregate() {
		err = query.ErrAggregate
	}
	if err == nil {
		err = s.waitFor(r.Context(), p.f, p.cost)
	}
	// The base's whole trace: from its report's pass for a quick cost.
	baseQuick := false
	if err == nil {
		_, ok := s.base.Quick(query.Filter{})
		if baseQuick = ok && query.QuickCost(p.cost) && p.f.Match == ""; !baseQuick {
			err = s.base.Wait(r.Context())
		}
	}
	if err != nil {
		writeErr(w, err)
		return
	}
	leave, ok := s.heavy(w, r)
	if !ok {
		return
	}
	defer leave()
	res, err := s.windowFor(r.Context(), p.f, p.cost)
	if err != nil {
		writeErr(w, err)
		return
	}
	baseRes, _ := s.base.Quick(query.Filter{})
	if !baseQuick {
		baseRes = s.baseWindow(p.f.Match)
	}
	rows := query.Diff(s.x, res, s.base, baseRes, p.cost)
	out := Diff{Cost: p.cost.String(), Base: s.base.File, Sites: []DiffSite{}}
	var sv, sb uint64
	out.Total.Value, sv = s.x.Total(res, p.cost)
	out.Total.Base, sb = s.base.Total(baseRes, p.cost)
	out.Total.Delta = int64(out.Total.Value) - int64(out.Total.Base)
	if sv != 0 || sb != 0 {
		out.Suppressed = &DiffSuppressed{Value: sv, Base: sb}
	}
	if len(rows) > p.top {
		out.More = len(rows) - p.top
		rows = rows[:p.top]
	}
	out.Capped = p.capTop(out.More)
	for _, d := range rows {
		out.Sites = append(out.Sites, DiffSite{Name: symbolize.SiteName(d.Frames), Stack: jsonStack(d.Frames), DiffTotal: DiffTotal{d.Value, d.Base, d.Delta}})
	}
	writeJSON(w, out)
}

// baseWindow is the base trace's whole answer (computed once), or that
// of the sites a match keeps.
func (s *Server) baseWindow(match string) *query.Result {
	if match != "" {
		return s.base.Window(query.Filter{Match: match}) // the same sites of the base
	}
	s.baseOnce.Do(func() { s.baseRes = s.base.Window(query.Filter{}) })
	return s.baseRes
}

// quickTimeline is the whole trace's timeline while the index is built,
// from the heap model's: at most points buckets, each the largest heap of
// the model's samples in it (a bucket with none repeats the one before).
func (s *Server) quickTimeline(points int) Timeline {
	pr := s.x.Report.Profile
	from, to := s.x.Start(), s.x.End()+1
	out := Timeline{FromNs: s.rel(from), ToNs: s.rel(to), Points: []TimelinePoint{}, Coarse: true, Estimated: s.x.Report.Estimate()}
	if pr.Peak.Bytes > 0 {
		out.Peak = Point{TNs: s.rel(pr.Peak.Time), Bytes: pr.Peak.Bytes, Blocks: pr.Peak.Blocks}
	}
	width := max((to-from+int64(points)-1)/int64(points), 1)
	n := int((to - from + width - 1) / width)
	out.WidthNs = width
	var last query.Bucket
	j := 0
	for i := 0; i < n; i++ {
		b := query.Bucket{Time: from + int64(i)*width, Width: width}
		seen := false
		for ; j < len(pr.Timeline) && pr.Timeline[j].Time < b.Time+width; j++ {
			pt := pr.Timeline[j]
			if !seen || pt.Bytes > b.MaxBytes {
				b.MaxBytes, b.MaxBlocks = pt.Bytes, pt.Blocks
			}
			seen = true
		}
		if !seen {
			b.MaxBytes, b.MaxBlocks = last.MaxBytes, last.MaxBlocks
		}
		last = b
		out.Points = append(out.Points, TimelinePoint{TNs: s.rel(b.Time), Bucket: b})
	}
	return out
}

// IndexState is /api/index: whether the windowed index is built.
type IndexState struct {
	Ready  bool   `json:"ready"`
	Error  string `json:"error,omitempty"` // why it could not be built
	Events int    `json:"events"`
	Blocks int    `json:"blocks"`
}

// index answers /api/index; with wait=1, once the index is built (or the
// request is cancelled).
func (s *Server) index(w http.ResponseWriter, r *http.Request) {
	var err error
	if v := r.URL.Query().Get("wait"); v == "1" || v == "true" {
		err = s.x.Wait(r.Context())
		if r.Context().Err() != nil {
			return // the client went away
		}
	} else if s.x.Ready() {
		err = s.x.Wait(r.Context())
	}
	out := IndexState{Ready: s.x.Ready(), Events: s.x.Events(), Blocks: s.x.Blocks()}
	if err != nil {
		out.Error = err.Error()
	}
	writeJSON(w, out)
}
