package web

import (
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strconv"

	"github.com/heapscope/heapscope"
	"github.com/heapscope/heapscope/analyze"
	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/report"
	"github.com/heapscope/heapscope/symbolize"
)

// LeaksJSON is POST /api/leaks's answer: a leak check of the followed
// session's processes (heapscope.LeaksResult), its sites symbolized.
type LeaksJSON struct {
	Processes []LeaksProcessJSON `json:"processes"`
}

// LeaksProcessJSON is one process's check.
type LeaksProcessJSON struct {
	PID       int                   `json:"pid"`
	TimeNs    int64                 `json:"time_ns"` // when it was stopped, from the trace's start
	Rules     string                `json:"rules"`
	PausedNs  int64                 `json:"paused_ns"`
	ElapsedNs int64                 `json:"elapsed_ns"`
	Blocks    uint64                `json:"blocks"`
	Classes   heapscope.LeakClasses `json:"classes"`
	Complete  bool                  `json:"complete"`
	Partial   bool                  `json:"partial"`
	Sites     []LeaksSiteJSON       `json:"sites"`
	Notes     []string              `json:"notes"`
	Error     string                `json:"error,omitempty"`
}

// LeaksSiteJSON is a site's blocks of one class.
type LeaksSiteJSON struct {
	Class  string             `json:"class"` // "definite", "indirect", "possible", "reachable", "unknown"
	Bytes  uint64             `json:"bytes"`
	Blocks uint64             `json:"blocks"`
	Stack  []report.JSONFrame `json:"stack"`
}

// leaks answers POST /api/leaks?pid=P&rules=memcheck|lsan&top=N: it asks
// the session for a leak check (each process stopped while its memory is
// read), then indexes the trace again, which holds the verdict now.
func (l *Live) leaks(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", "GET, HEAD, POST")
		writeErrCode(w, http.StatusMethodNotAllowed, errors.New("POST /api/leaks: a leak check stops the session's processes"))
		return
	}
	q := heapscope.LeaksQuery{Sites: 10, RulesSet: true}
	v := r.URL.Query()
	if s := v.Get("pid"); s != "" {
		pid, err := strconv.Atoi(s)
		if err != nil || pid <= 0 {
			writeErr(w, badRequest{fmt.Sprintf("pid %q: want a process ID", s)})
			return
		}
		q.PID = pid
	}
	if s := v.Get("rules"); s != "" {
		rules, err := event.ParseRules(s)
		if err != nil {
			writeErr(w, badRequest{err.Error()})
			return
		}
		q.Rules = rules
	}
	if s := v.Get("top"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > maxTop {
			writeErr(w, badRequest{fmt.Sprintf("top %q: want 1 to %d", s, maxTop)})
			return
		}
		q.Sites = n
	}
	res, err := heapscope.Leaks(l.name, q)
	if err != nil {
		code := http.StatusInternalServerError
		switch {
		case errors.Is(err, heapscope.ErrNotRunning):
			code = http.StatusGone
		case errors.Is(err, heapscope.ErrInvalidFlags), errors.Is(err, heapscope.ErrNoSuchProcess):
			code = http.StatusUnprocessableEntity
		}
		writeErrCode(w, code, err)
		return
	}
	sym := symbolize.New(l.o.Symbolize)
	defer sym.Close()
	for _, m := range res.Modules {
		sym.AddModule(m)
	}
	l.mu.Lock()
	start := l.srv.x.Header.MonoStart // the session's clock: the trace's
	l.mu.Unlock()
	out := LeaksJSON{Processes: []LeaksProcessJSON{}}
	for _, p := range res.Processes {
		jp := LeaksProcessJSON{PID: p.PID, TimeNs: p.Time - start, Rules: p.Rules.String(), PausedNs: p.Paused, ElapsedNs: p.Elapsed,
			Blocks: p.Blocks, Classes: p.Classes, Complete: p.Complete, Partial: p.Partial, Sites: []LeaksSiteJSON{},
			Notes: append([]string{}, p.Notes...), Error: p.Error}
		for _, s := range p.Sites {
			var st []symbolize.Frame
			for _, a := range s.Frames {
				st = append(st, sym.Frames(uint32(p.PID), a)...)
			}
			jp.Sites = append(jp.Sites, LeaksSiteJSON{Class: s.Class.String(), Bytes: s.Bytes, Blocks: s.Blocks, Stack: jsonStack(symbolize.TrimAllocator(st))})
		}
		out.Processes = append(out.Processes, jp)
	}
	// The verdict is in the trace: the page's next data shows the classes.
	if _, err := heapscope.Control(l.name, heapscope.ControlFlush); err == nil {
		go l.update(true)
	}
	writeJSON(w, out)
}

// TraceLeaks is GET /api/leaks: the trace's leak check as its report gives
// it (report/JSON.md's leak_check), with the sites of each class, largest
// first: the page's LEAKS, POSSIBLY LOST and STILL REACHABLE. A scan
// classifies the blocks live when it ran and the report applies it to those
// still live at the end, so this is of the whole trace: a window or a
// filter has no classes.
type TraceLeaks struct {
	// LeakCheck is null when the trace holds no scan: its leaks are then
	// every block live at the end (Live), with no verdict.
	LeakCheck *report.JSONLeakCheck `json:"leak_check"`
	// Live is every block live at the end, suppressed sites left out (the
	// summary's leaked_bytes and leaked_blocks); Suppressed is what the
	// suppression rules took out of it.
	Live       report.JSONAmount `json:"live"`
	Suppressed report.JSONAmount `json:"suppressed"`
	// Lists are, in a leak-checked trace, the sites of "lost" (definitely
	// and indirectly lost: the leaks), "possibly_lost", "still_reachable"
	// and "unclassified" (no class, or not scanned), in that order, each
	// with its total; none without a check.
	Lists  []LeakList `json:"lists"`
	Capped *Capped    `json:"capped,omitempty"`
}

// LeakList is the sites of one class (or two: lost), by their bytes in it.
type LeakList struct {
	Class string            `json:"class"`
	Total report.JSONAmount `json:"total"` // over every site
	Sites []LeakListSite    `json:"sites"`
	More  int               `json:"more"` // sites of the class left out
}

// LeakListSite is a site's blocks of a list's class, and every class of
// its blocks live at the end.
type LeakListSite struct {
	Name    string             `json:"name"`
	PIDs    []uint32           `json:"pids"`
	Stack   []report.JSONFrame `json:"stack"`
	Bytes   uint64             `json:"bytes"`
	Blocks  uint64             `json:"blocks"`
	Classes report.JSONClasses `json:"classes"`
}

// leakLists are the lists of TraceLeaks, by what of a site each counts.
var leakLists = []struct {
	class string
	of    func(s *report.Site) analyze.Amount
}{
	{"lost", func(s *report.Site) analyze.Amount { return s.Lost() }},
	{"possibly_lost", func(s *report.Site) analyze.Amount { return s.Classes[event.ClassPossible] }},
	{"still_reachable", func(s *report.Site) analyze.Amount { return s.Classes[event.ClassReachable] }},
	{"unclassified", func(s *report.Site) analyze.Amount {
		a := s.Unscanned()
		a.Add(s.Classes[event.ClassUnknown])
		return a
	}},
}

// traceLeaks answers GET /api/leaks?top=N (10 by default): the trace's
// verdict, at most top sites in each list.
func (s *Server) traceLeaks(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	for k := range q {
		if k != "top" {
			writeErr(w, badRequest{fmt.Sprintf("%s: /api/leaks is of the whole trace (a leak check classifies the blocks live at the end), it takes only top", k)})
			return
		}
	}
	top, err := intParam(q, "top", defTopSites)
	if err != nil {
		writeErr(w, err)
		return
	}
	var out TraceLeaks
	switch {
	case top < 0:
		writeErr(w, badRequest{fmt.Sprintf("top: want 0 (as many as the server gives) or more, not %d", top)})
		return
	case top == 0 || top > maxTop:
		top = maxTop
		out.Capped = &Capped{Top: maxTop}
	}
	rep := s.x.Report
	out.Live.Bytes, out.Live.Blocks = rep.Leaked()
	sb, sk, _ := rep.SuppressedTotal()
	out.Suppressed = report.JSONAmount{Bytes: sb, Blocks: sk}
	out.Lists = []LeakList{}
	if !rep.LeakChecked() {
		out.Capped = nil
		writeJSON(w, out)
		return
	}
	out.LeakCheck = rep.Document(1).LeakCheck
	capped := false
	for _, l := range leakLists {
		list := LeakList{Class: l.class, Sites: []LeakListSite{}}
		var sites []*report.Site
		for _, st := range rep.Sites {
			if a := l.of(st); a.Blocks > 0 {
				sites = append(sites, st)
				list.Total.Bytes += a.Bytes
				list.Total.Blocks += a.Blocks
			}
		}
		sort.SliceStable(sites, func(i, j int) bool {
			a, b := l.of(sites[i]), l.of(sites[j])
			if a.Bytes != b.Bytes {
				return a.Bytes > b.Bytes
			}
			return a.Blocks > b.Blocks
		})
		if len(sites) > int(top) {
			list.More = len(sites) - int(top)
			sites = sites[:top]
		}
		for _, st := range sites {
			a := l.of(st)
			c := report.JSONClasses{
				DefinitelyLost: amountJSON(st.Classes[event.ClassDefinite]), IndirectlyLost: amountJSON(st.Classes[event.ClassIndirect]),
				PossiblyLost: amountJSON(st.Classes[event.ClassPossible]), StillReachable: amountJSON(st.Classes[event.ClassReachable]),
				Unclassified: amountJSON(st.Classes[event.ClassUnknown]), NotScanned: amountJSON(st.Unscanned()),
			}
			list.Sites = append(list.Sites, LeakListSite{Name: st.Name(), PIDs: st.PIDs, Stack: jsonStack(st.Stack()),
				Bytes: a.Bytes, Blocks: a.Blocks, Classes: c})
		}
		capped = capped || list.More > 0
		out.Lists = append(out.Lists, list)
	}
	if !capped {
		out.Capped = nil
	}
	writeJSON(w, out)
}

func amountJSON(a analyze.Amount) report.JSONAmount {
	return report.JSONAmount{Bytes: a.Bytes, Blocks: a.Blocks}
}
