package web

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/heapscope/heapscope/analyze"
	"github.com/heapscope/heapscope/query"
	"github.com/heapscope/heapscope/report"
)

// The views of the page past the window's flame graph and tables, as
// heaptrack's: the first screen's top sites by each cost (/api/top), call
// trees with a column per cost (/api/tree), the heap over time by function
// (/api/consumed), the resident memory beside the heap (/api/memory) and
// the search's share (/api/search). Every question takes the shared
// parameters, the filters include= and exclude= among them. Their numbers
// are the window's (query.Result): a sampled trace's estimates, scaled by
// the rule of every view (analyze.SampledBlock), and a process's blocks
// leave the heap at its exit while they stay its leaks.

// Limits of these answers.
const (
	defTopSites   = 10 // /api/top's lists
	defConsumed   = 10 // /api/consumed's functions
	maxConsumed   = 50
	maxSearchTerm = 200 // bytes of a search or filter term
)

// views registers the handlers of this file.
func (s *Server) views() {
	s.mux.HandleFunc("GET /api/top", s.top)
	s.mux.HandleFunc("GET /api/tree", s.tree)
	s.mux.HandleFunc("GET /api/consumed", s.consumed)
	s.mux.HandleFunc("GET /api/memory", s.memory)
	s.mux.HandleFunc("GET /api/search", s.search)
}

// parseMatch reads the filters: include=TERM and exclude=TERM, each as
// often as wanted, a TERM being "TEXT" (a function), "function:TEXT",
// "module:TEXT" or "file:TEXT" (see query.Match). It returns the
// Filter.Match they make, "" for none.
func parseMatch(q map[string][]string) (string, error) {
	var m query.Match
	for _, k := range []string{"include", "exclude"} {
		for _, v := range q[k] {
			if v == "" {
				continue
			}
			if len(v) > maxSearchTerm {
				return "", badRequest{fmt.Sprintf("%s: a term of at most %d bytes, not %d", k, maxSearchTerm, len(v))}
			}
			t, err := query.ParseTerm(v)
			if err != nil {
				return "", badRequest{fmt.Sprintf("%s: %v", k, err)}
			}
			if k == "include" {
				m.Include = append(m.Include, t)
			} else {
				m.Exclude = append(m.Exclude, t)
			}
		}
	}
	if len(m.Include)+len(m.Exclude) > maxTerms {
		return "", badRequest{fmt.Sprintf("at most %d filter terms", maxTerms)}
	}
	if m.IsZero() {
		return "", nil
	}
	return m.String(), nil
}

// maxTerms bounds the filter terms of a question.
const maxTerms = 16

// TopSite is a site of /api/top, with what it cost by each of the costs
// the lists rank by.
type TopSite struct {
	Site      int                `json:"site"`
	PIDs      []uint32           `json:"pids"`
	Stack     []report.JSONFrame `json:"stack"`
	Peak      uint64             `json:"peak"`      // bytes live at the window's peak
	Leaks     uint64             `json:"leaks"`     // bytes not freed by its end, exited processes' too (0 when suppressed)
	Calls     uint64             `json:"calls"`     // allocation and reallocation calls
	Temporary uint64             `json:"temporary"` // temporary allocations
	Bytes     uint64             `json:"bytes"`     // bytes allocated
	// Suppressed is true when a suppression rule matched the site's
	// leaks: they count in Suppressed of the answer instead.
	Suppressed bool `json:"suppressed,omitempty"`
}

// TopList is the sites of most cost, at most n.
type TopList struct {
	Cost  string    `json:"cost"`
	Total uint64    `json:"total"` // over every site
	Sites []TopSite `json:"sites"`
	More  int       `json:"more"` // sites of some cost left out
}

// Top is /api/top: heaptrack's four lists of the first screen.
type Top struct {
	Peak       TopList      `json:"peak"`
	Leaks      TopList      `json:"leaks"`
	Calls      TopList      `json:"calls"`
	Temporary  TopList      `json:"temporary"`
	Suppressed query.Amount `json:"suppressed"` // the leaks of the sites suppressed
	PeakAt     Point        `json:"peak_at"`    // the window's peak
	Capped     *Capped      `json:"capped,omitempty"`
	Estimated  string       `json:"estimated,omitempty"` // see Timeline
	// NoTemporary is true when the trace cannot count temporaries (a
	// sampled one): the temporary list is empty for that reason.
	NoTemporary bool `json:"no_temporary,omitempty"`
}

func (s *Server) top(w http.ResponseWriter, r *http.Request) {
	p, ok := s.parseEvents(w, r)
	if !ok {
		return
	}
	n := defTopSites
	if v := p.query["top"]; len(v) > 0 && v[0] != "" {
		n = p.top
	}
	res, leave, ok := s.heavyWindow(w, r, p.f, query.CostPeak)
	if !ok {
		return
	}
	defer leave()
	sites := s.x.Sites()
	row := func(id int) TopSite {
		c := &res.Sites[id]
		t := TopSite{Site: id, PIDs: sites[id].PIDs, Stack: jsonStack(sites[id].Frames), Peak: c.Peak.Bytes,
			Calls: c.Allocations + c.Reallocations, Temporary: c.Temporary, Bytes: c.Bytes}
		t.Leaks, t.Suppressed = s.x.SiteCost(res, query.CostLeaks, id)
		if t.Suppressed {
			t.Leaks = 0
		}
		return t
	}
	out := Top{Estimated: s.x.Report.Estimate(), NoTemporary: s.x.Report.Profile.Missing.Has(analyze.NoTemporaries)}
	if res.PeakSeq >= 0 {
		out.PeakAt = Point{TNs: s.rel(res.Peak.Time), Bytes: res.Peak.Bytes, Blocks: res.Peak.Blocks}
	}
	for id := range res.Sites {
		if _, sup := s.x.SiteCost(res, query.CostLeaks, id); sup {
			out.Suppressed.Bytes += res.Sites[id].Leaked.Bytes
			out.Suppressed.Blocks += res.Sites[id].Leaked.Blocks
		}
	}
	for _, l := range []struct {
		list *TopList
		cost query.Cost
		of   func(t *TopSite) uint64
	}{
		{&out.Peak, query.CostPeak, func(t *TopSite) uint64 { return t.Peak }},
		{&out.Leaks, query.CostLeaks, func(t *TopSite) uint64 { return t.Leaks }},
		{&out.Calls, query.CostCalls, func(t *TopSite) uint64 { return t.Calls }},
		{&out.Temporary, query.CostTemporary, func(t *TopSite) uint64 { return t.Temporary }},
	} {
		var rs []ranked
		for id := range res.Sites {
			v, sup := s.x.SiteCost(res, l.cost, id)
			if v > 0 && !sup {
				rs = append(rs, ranked{id, v})
				l.list.Total += v
			}
		}
		rank(rs)
		l.list.Cost = l.cost.String()
		l.list.Sites = []TopSite{}
		rs, l.list.More = cut(rs, n)
		for _, k := range rs {
			l.list.Sites = append(l.list.Sites, row(k.id))
		}
		if c := p.capTop(l.list.More); c != nil {
			out.Capped = c
		}
	}
	writeJSON(w, out)
}

// TreeAnswer is /api/tree.
type TreeAnswer struct {
	*query.Tree
	Capped    *Capped `json:"capped,omitempty"`
	Estimated string  `json:"estimated,omitempty"` // see Timeline
}

// tree answers the call tree of the window: from the callers down
// (invert=0) or bottom-up (invert=1), a column per cost (query.TreeCosts),
// children by cost (one of those; else peak), with flame's min_share and
// max_nodes.
func (s *Server) tree(w http.ResponseWriter, r *http.Request) {
	s.graph(w, r, func(*params) query.Cost { return query.CostPeak }, func(p *params, g graph, res *query.Result) any {
		out := TreeAnswer{Tree: s.x.Tree(res, p.cost, g.inverted, g.share, g.nodes), Estimated: s.x.Report.Estimate()}
		out.Capped = g.capped(len(out.Nodes))
		return out
	})
}

// graph are the parameters of a flame graph or a tree: min_share,
// max_nodes (the limit to use, and the nodes asked for) and invert.
type graph struct {
	share        float64
	nodes, asked int
	inverted     bool
}

// capped is the Capped of an answer of n nodes: set when the server's node
// limit cut it.
func (g graph) capped(n int) *Capped {
	if g.asked > maxMaxNodes && n >= maxMaxNodes {
		return &Capped{MaxNodes: maxMaxNodes}
	}
	return nil
}

// graph answers a flame graph's or a tree's question: what build makes of
// the window for the cost that cost names.
func (s *Server) graph(w http.ResponseWriter, r *http.Request, cost func(*params) query.Cost, build func(*params, graph, *query.Result) any) {
	p, ok := s.parseEvents(w, r)
	if !ok {
		return
	}
	g, err := graphParams(p.query)
	if err != nil {
		writeErr(w, err)
		return
	}
	res, leave, ok := s.heavyWindow(w, r, p.f, cost(p))
	if !ok {
		return
	}
	defer leave()
	writeJSON(w, build(p, g, res))
}

// graphParams reads min_share, max_nodes and invert.
func graphParams(q map[string][]string) (graph, error) {
	g := graph{share: defMinShare, inverted: first(q, "invert") == "1" || first(q, "invert") == "true"}
	if v := first(q, "min_share"); v != "" {
		var err error
		g.share, err = strconv.ParseFloat(v, 64)
		if err != nil || !(g.share >= 0 && g.share <= 1) {
			return graph{}, badRequest{fmt.Sprintf("min_share: want a number from 0 to 1, not %q", v)}
		}
	}
	n, err := intParam(q, "max_nodes", defMaxNodes)
	if err != nil {
		return graph{}, err
	}
	g.nodes, g.asked = int(min(max(n, 1), maxMaxNodes)), int(min(n, maxMaxNodes+1))
	return g, nil
}

func first(q map[string][]string, k string) string {
	if v := q[k]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// ConsumedAnswer is /api/consumed.
type ConsumedAnswer struct {
	FromNs  int64                  `json:"from_ns"`
	ToNs    int64                  `json:"to_ns"`
	WidthNs int64                  `json:"width_ns"`
	TNs     []int64                `json:"t_ns"`  // each bucket's start, from the trace's start
	Total   []uint64               `json:"total"` // the heap of the sites kept, at each bucket's largest
	Series  []query.ConsumedSeries `json:"series"`
	Capped  *Capped                `json:"capped,omitempty"`
	// Estimated: see Timeline. A process's blocks leave the chart at
	// its exit, as they leave the heap.
	Estimated string `json:"estimated,omitempty"`
}

// consumed answers the heap over the window by function (heaptrack's
// "Consumed"): top= functions (default 10, at most 50) and the rest, in
// points= buckets (as /api/timeline's).
func (s *Server) consumed(w http.ResponseWriter, r *http.Request) {
	p, ok := s.parseIndexed(w, r)
	if !ok {
		return
	}
	n, capped, err := points(p.query)
	if err != nil {
		writeErr(w, err)
		return
	}
	k := defConsumed
	if v := first(p.query, "top"); v != "" {
		k = min(p.top, maxConsumed)
	}
	leave, ok := s.heavy(w, r)
	if !ok {
		return
	}
	defer leave()
	res := s.windowOf(p.f)
	c := s.x.Consumed(res, k, n)
	out := ConsumedAnswer{FromNs: s.rel(res.Span.From), ToNs: s.rel(res.Span.To), WidthNs: c.Width, TNs: []int64{},
		Total: c.Total, Series: c.Series, Capped: capped, Estimated: s.x.Report.Estimate()}
	for _, t := range c.Times {
		out.TNs = append(out.TNs, s.rel(t))
	}
	if out.Total == nil {
		out.Total = []uint64{}
	}
	if out.Series == nil {
		out.Series = []query.ConsumedSeries{}
	}
	writeJSON(w, out)
}

// ResidentPoint is the resident memory at an instant, from the trace's
// start.
type ResidentPoint struct {
	TNs int64 `json:"t_ns"`
	query.Resident
}

// ProcessMemory is a process's largest resident sample.
type ProcessMemory struct {
	PID     uint32        `json:"pid"`
	Samples int           `json:"samples"`
	Peak    ResidentPoint `json:"peak"`
}

// Memory is /api/memory.
type Memory struct {
	Samples   int             `json:"samples"` // the samples in the window; 0: the trace has none there
	Peak      ResidentPoint   `json:"peak"`    // the largest resident memory
	Points    []ResidentPoint `json:"points"`
	Processes []ProcessMemory `json:"processes"`
}

// memory answers the resident memory of the processes (pid's alone when
// given) over the window, at most points= instants (default 1000): what
// the session sampled at each flush, beside the heap.
func (s *Server) memory(w http.ResponseWriter, r *http.Request) {
	p, err := s.parse(r)
	if err != nil {
		writeErr(w, err)
		return
	}
	n, _, err := points(p.query)
	if err != nil {
		writeErr(w, err)
		return
	}
	m := s.x.Memory(p.f.From, p.f.To, p.f.PID, n)
	pt := func(r query.Resident) ResidentPoint { return ResidentPoint{TNs: s.rel(r.Time), Resident: r} }
	out := Memory{Samples: m.Samples, Points: []ResidentPoint{}, Processes: []ProcessMemory{}}
	if m.Peak.RSS > 0 {
		out.Peak = pt(m.Peak)
	}
	for _, r := range m.Points {
		out.Points = append(out.Points, pt(r))
	}
	for _, pr := range m.Processes {
		out.Processes = append(out.Processes, ProcessMemory{PID: pr.PID, Samples: pr.Samples, Peak: pt(pr.Peak)})
	}
	writeJSON(w, out)
}

// Search is /api/search: what the sites whose stacks hold a function
// named like q cost (each site once: the share a search finds, however
// small each node of the flame graph), and those functions.
type Search struct {
	Cost      string           `json:"cost"`
	Query     string           `json:"q"`
	Value     uint64           `json:"value"` // the sites holding a match
	Total     uint64           `json:"total"` // every site
	Functions []query.Function `json:"functions"`
	More      int              `json:"more"`
	Capped    *Capped          `json:"capped,omitempty"`
	Estimated string           `json:"estimated,omitempty"` // see Timeline
}

func (s *Server) search(w http.ResponseWriter, r *http.Request) {
	p, ok := s.parseEvents(w, r)
	if !ok {
		return
	}
	q := first(p.query, "q")
	term, err := query.ParseTerm(q)
	if err == nil && len(q) > maxSearchTerm {
		err = fmt.Errorf("at most %d bytes", maxSearchTerm)
	}
	if err != nil {
		writeErr(w, badRequest{fmt.Sprintf("q: %v", err)})
		return
	}
	term.Field = query.FieldFunction // a search is of names: "a:b" is a C++ name
	term.Text = q
	res, leave, ok := s.heavyWindow(w, r, p.f, p.cost)
	if !ok {
		return
	}
	defer leave()
	out := Search{Cost: p.cost.String(), Query: q, Functions: []query.Function{}, Estimated: s.x.Report.Estimate()}
	out.Value, out.Total = s.x.MatchCost(res, p.cost, query.Match{Include: []query.Term{term}}.String())
	lq := strings.ToLower(q)
	for _, f := range s.x.Functions(res, p.cost, 0) {
		if strings.Contains(strings.ToLower(f.Name), lq) {
			out.Functions = append(out.Functions, f)
		}
	}
	out.Functions, out.More = cut(out.Functions, p.top)
	out.Capped = p.capTop(out.More)
	writeJSON(w, out)
}
