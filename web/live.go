package web

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/heapscope/heapscope"
	"github.com/heapscope/heapscope/query"
)

// Live serves a running session: it asks the session to flush its trace
// file every interval, indexes the file again, and answers with the newest
// index; /api/live tells the page when there is a newer one. When the
// session ends it keeps answering from the last index. Each update reads
// the whole file again: fine for the minutes of a live look, not for hours.
type Live struct {
	name  string
	o     query.Options
	every time.Duration

	gate *gate // one for every index's Server

	mu    sync.Mutex
	srv   *Server
	state LiveState
}

// LiveState is /api/live.
type LiveState struct {
	Session string    `json:"session"`
	File    string    `json:"file"`
	Running bool      `json:"running"`
	Version int       `json:"version"` // grows with each new index
	Updated time.Time `json:"updated"`
	Error   string    `json:"error,omitempty"` // the last update's failure
}

// NewLive indexes what the session named name has written so far. An
// unknown session is an error wrapping heapscope.ErrNotRunning; a session
// that writes no file (real-time mode) is one too.
func NewLive(name string, o query.Options, every time.Duration) (*Live, error) {
	st, err := heapscope.Control(name, heapscope.ControlFlush)
	if err != nil {
		return nil, err // it names the session
	}
	if len(st.Files) == 0 {
		return nil, fmt.Errorf("session %q writes no trace file (real-time mode): serve needs one", name)
	}
	file := st.Files[len(st.Files)-1]
	x, err := query.Build(file, o)
	if err != nil {
		return nil, err
	}
	runningIndex(x)
	g := newGate()
	l := &Live{name: name, o: o, every: every, gate: g, srv: newServer(x, nil, g),
		state: LiveState{Session: name, File: file, Running: true, Version: 1, Updated: time.Now()}}
	return l, nil
}

// Run updates the index every interval until the session ends (then once
// more, for its last records) or ctx does.
func (l *Live) Run(ctx context.Context) {
	t := time.NewTicker(l.every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		_, err := heapscope.Control(l.name, heapscope.ControlFlush)
		running := err == nil
		if err != nil && !errors.Is(err, heapscope.ErrNotRunning) {
			l.fail(err)
			continue
		}
		l.update(running)
		if !running {
			return
		}
	}
}

func (l *Live) fail(err error) {
	l.mu.Lock()
	l.state.Error = err.Error()
	l.mu.Unlock()
}

// update indexes the file again.
func (l *Live) update(running bool) {
	x, err := query.Build(l.state.File, l.o)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.state.Running = running
	if err != nil {
		l.state.Error = err.Error()
		return
	}
	if running {
		runningIndex(x)
	}
	l.srv = newServer(x, nil, l.gate)
	l.state.Version++
	l.state.Updated = time.Now()
	l.state.Error = ""
}

// unclosed begins the reader's warning about a file whose writer has not
// closed it (tracefile): of a session still tracing, that is its state,
// not damage, and the page does not say "killed, or out of disk space".
const unclosed = "the file has no index (its writer has not closed it"

// runningIndex drops from x's warnings the one about a file not closed: x
// is of a session that is running.
func runningIndex(x *query.Index) {
	keep := func(ws []string) []string {
		out := ws[:0:0]
		for _, w := range ws {
			if !strings.HasPrefix(w, unclosed) {
				out = append(out, w)
			}
		}
		return out
	}
	x.Warnings = keep(x.Warnings)
	x.Report.Trace.Warnings = keep(x.Report.Trace.Warnings)
}

// State returns what /api/live says.
func (l *Live) State() LiveState {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.state
}

func (l *Live) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/api/live" {
		writeJSON(w, l.State())
		return
	}
	if r.URL.Path == "/api/leaks" && r.Method != http.MethodGet && r.Method != http.MethodHead {
		l.leaks(w, r) // leaks.go; a GET is the trace's verdict, the index's
		return
	}
	l.mu.Lock()
	srv := l.srv
	l.mu.Unlock()
	srv.ServeHTTP(w, r)
}
