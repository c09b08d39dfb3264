package web

import (
	"fmt"
	"net/http"
	"sort"
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
	if err := s.waitFor(r.Context(), p.f, query.CostPeak); err != nil {
		writeErr(w, err)
		return
	}
	leave, ok := s.heavy(w, r)
	if !ok {
		return
	}
	defer leave()
	res, err := s.windowFor(r.Context(), p.f, query.CostPeak)
	if err != nil {
		writeErr(w, err)
		return
	}
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
		type ranked struct {
			id int
			v  uint64
		}
		var rs []ranked
		for id := range res.Sites {
			v, sup := s.x.SiteCost(res, l.cost, id)
			if v > 0 && !sup {
				rs = append(rs, ranked{id, v})
				l.list.Total += v
			}
		}
		sort.Slice(rs, func(i, j int) bool {
			if rs[i].v != rs[j].v {
				return rs[i].v > rs[j].v
			}
			return rs[i].id < rs[j].id
		})
		l.list.Cost = l.cost.String()
		l.list.Sites = []TopSite{}
		if len(rs) > n {
			l.list.More = len(rs) - n
			rs = rs[:n]
		}
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
	p, ok := s.parseEvents(w, r)
	if !ok {
		return
	}
	share, nodes, asked, err := flameLimits(p.query)
	if err != nil {
		writeErr(w, err)
		return
	}
	inv := first(p.query, "invert") == "1" || first(p.query, "invert") == "true"
	if err := s.waitFor(r.Context(), p.f, query.CostPeak); err != nil {
		writeErr(w, err)
		return
	}
	leave, ok := s.heavy(w, r)
	if !ok {
		return
	}
	defer leave()
	res, err := s.windowFor(r.Context(), p.f, query.CostPeak)
	if err != nil {
		writeErr(w, err)
		return
	}
	out := TreeAnswer{Tree: s.x.Tree(res, p.cost, inv, share, nodes), Estimated: s.x.Report.Estimate()}
	if asked > maxMaxNodes && len(out.Nodes) >= maxMaxNodes {
		out.Capped = &Capped{MaxNodes: maxMaxNodes}
	}
	writeJSON(w, out)
}

// flameLimits reads min_share and max_nodes as /api/flame does: the share
// and node limit to use, and the nodes asked for.
func flameLimits(q map[string][]string) (share float64, nodes, asked int, err error) {
	share = defMinShare
	if v := first(q, "min_share"); v != "" {
		share, err = strconv.ParseFloat(v, 64)
		if err != nil || !(share >= 0 && share <= 1) {
			return 0, 0, 0, badRequest{fmt.Sprintf("min_share: want a number from 0 to 1, not %q", v)}
		}
	}
	n, err := intParam(q, "max_nodes", defMaxNodes)
	if err != nil {
		return 0, 0, 0, err
	}
	return share, int(min(max(n, 1), maxMaxNodes)), int(min(n, maxMaxNodes+1)), nil
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
	c := s.x.Consumed(res, k, int(n))
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
	n, err := intParam(p.query, "points", defPoints)
	if err != nil {
		writeErr(w, err)
		return
	}
	m := s.x.Memory(p.f.From, p.f.To, p.f.PID, int(min(max(n, 1), maxPoints)))
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
	out := Search{Cost: p.cost.String(), Query: q, Functions: []query.Function{}, Estimated: s.x.Report.Estimate()}
	out.Value, out.Total = s.x.MatchCost(res, p.cost, query.Match{Include: []query.Term{term}}.String())
	lq := strings.ToLower(q)
	for _, f := range s.x.Functions(res, p.cost, 0) {
		if strings.Contains(strings.ToLower(f.Name), lq) {
			out.Functions = append(out.Functions, f)
		}
	}
	if len(out.Functions) > p.top {
		out.More = len(out.Functions) - p.top
		out.Functions = out.Functions[:p.top]
	}
	out.Capped = p.capTop(out.More)
	writeJSON(w, out)
}
