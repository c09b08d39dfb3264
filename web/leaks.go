package web

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/heapscope/heapscope"
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
	TimeNs    int64                 `json:"time_ns"`
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
		w.Header().Set("Allow", http.MethodPost)
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
	out := LeaksJSON{Processes: []LeaksProcessJSON{}}
	for _, p := range res.Processes {
		jp := LeaksProcessJSON{PID: p.PID, TimeNs: p.Time, Rules: p.Rules.String(), PausedNs: p.Paused, ElapsedNs: p.Elapsed,
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
