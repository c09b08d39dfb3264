package web

import (
	"fmt"
	"net/url"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/heapscope/heapscope"
	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/internal/testutil"
	"github.com/heapscope/heapscope/report"
	"github.com/heapscope/heapscope/tracefile"
)

// The filters run on the server and apply to every answer: serve_phases'
// functions as the workload allocates them (see serve_phases.c).
func TestAPIFilters(t *testing.T) {
	_, srv := serveTrace(t, trace(t, "serve_phases"))
	var fl struct{ Total uint64 }
	getJSON(t, srv.URL+"/api/flame?cost=leaks&exclude=early_leak", &fl)
	if fl.Total != 11400-10000 {
		t.Errorf("leaks without early_leak: %d", fl.Total)
	}
	getJSON(t, srv.URL+"/api/flame?cost=leaks&include=function:EARLY_leak", &fl)
	if fl.Total != 10000 {
		t.Errorf("leaks of early_leak: %d", fl.Total)
	}
	// mid_kept's three blocks of 5000 are its peak, alone.
	var win Window
	getJSON(t, srv.URL+"/api/window?include=mid_kept", &win)
	var tl Timeline
	getJSON(t, srv.URL+"/api/timeline?include=mid_kept&points=50", &tl)
	if win.Peak.Bytes != 15000 || win.Peak.Blocks != 3 || tl.Peak != win.Peak || win.Total.AIFI.Bytes != 15000 {
		t.Errorf("mid_kept: window peak %+v, timeline peak %+v, classes %+v", win.Peak, tl.Peak, win.Total)
	}
	var top uint64
	for _, p := range tl.Points {
		top = max(top, p.MaxBytes)
	}
	if top != 15000 {
		t.Errorf("mid_kept's timeline rises to %d", top)
	}
	var d report.JSON
	getJSON(t, srv.URL+"/api/sites?include=late_leak", &d)
	if d.Summary.LeakedBytes != 1400 || len(d.Leaks) != 1 || d.Leaks[0].Stack[0].Function != "late_leak" {
		t.Errorf("late_leak's report: %+v, %d leaks", d.Summary, len(d.Leaks))
	}
	var h Histogram
	getJSON(t, srv.URL+"/api/histogram?include=mid_temp", &h)
	var n uint64
	for _, b := range h.Sizes {
		n += b.Count
		if b.Count != 0 && b.Le != 64 {
			t.Errorf("mid_temp's sizes: %+v", h.Sizes)
		}
	}
	if n != 10 {
		t.Errorf("mid_temp made %d blocks, want 10", n)
	}
	// A module or file the workload's functions are in, and one they are not.
	getJSON(t, srv.URL+"/api/flame?cost=leaks&include=file:serve_phases.c&exclude=late", &fl)
	if fl.Total != 10000 {
		t.Errorf("leaks of serve_phases.c without late_leak: %d", fl.Total)
	}
	getJSON(t, srv.URL+"/api/flame?cost=leaks&include=module:no-such-module", &fl)
	if fl.Total != 0 {
		t.Errorf("leaks of no module: %d", fl.Total)
	}
	for _, bad := range []string{"include=", "include=module:", "exclude=a%01b", "include=file:" + strings.Repeat("x", 300)} {
		if bad == "include=" {
			continue // an empty box is no filter
		}
		if code := status(t, srv.URL+"/api/flame?"+bad); code != 400 {
			t.Errorf("%s: status %d", bad, code)
		}
	}
}

// A search finds the share of the sites that hold a match however small
// its flame graph nodes: the functions table's inclusive cost.
func TestAPISearch(t *testing.T) {
	_, srv := serveTrace(t, trace(t, "serve_phases"))
	var s Search
	getJSON(t, srv.URL+"/api/search?cost=leaks&q=late", &s)
	late := functionTotal(t, srv, "leaks", "late_leak")
	if s.Value != 1400 || late != 1400 || s.Total != 11400 || len(s.Functions) != 1 || s.Functions[0].Name != "late_leak" {
		t.Errorf("search late: %+v; functions' late_leak %d", s, late)
	}
	// With a filter, of what the filter keeps.
	getJSON(t, srv.URL+"/api/search?cost=leaks&q=late&exclude=early", &s)
	if s.Value != 1400 || s.Total != 1400 {
		t.Errorf("search late without early: %+v", s)
	}
	if code := status(t, srv.URL+"/api/search?q="); code != 400 {
		t.Errorf("empty search: %d", code)
	}
}

// The first screen's lists are the report's, by each cost, and the tree's
// root and the consumed chart add up to the summary.
func TestAPITopTreeConsumed(t *testing.T) {
	for _, w := range []string{"report_known", "serve_phases"} {
		t.Run(w, func(t *testing.T) {
			_, srv, rep := servedReport(t, w)
			doc := rep.Document(0)
			var top Top
			getJSON(t, srv.URL+"/api/top?top=1000", &top)
			want := func(of func(s *report.JSONSite) uint64) []uint64 {
				var v []uint64
				for i := range doc.Allocations {
					if x := of(&doc.Allocations[i]); x > 0 {
						v = append(v, x)
					}
				}
				sort.Slice(v, func(i, j int) bool { return v[i] > v[j] })
				return v
			}
			got := func(l TopList, of func(s *TopSite) uint64) []uint64 {
				var v []uint64
				for i := range l.Sites {
					v = append(v, of(&l.Sites[i]))
				}
				return v
			}
			for _, c := range []struct {
				name string
				got  []uint64
				want []uint64
			}{
				{"peak", got(top.Peak, func(s *TopSite) uint64 { return s.Peak }), want(func(s *report.JSONSite) uint64 { return s.PeakBytes })},
				{"leaks", got(top.Leaks, func(s *TopSite) uint64 { return s.Leaks }), want(func(s *report.JSONSite) uint64 { return s.LeakedBytes })},
				{"calls", got(top.Calls, func(s *TopSite) uint64 { return s.Calls }), want(func(s *report.JSONSite) uint64 { return s.Allocations + s.Reallocations })},
				{"temporary", got(top.Temporary, func(s *TopSite) uint64 { return s.Temporary }), want(func(s *report.JSONSite) uint64 { return s.Temporary })},
			} {
				if fmt.Sprint(c.got) != fmt.Sprint(c.want) {
					t.Errorf("top %s %v, report %v", c.name, c.got, c.want)
				}
			}
			sm := doc.Summary
			if top.Leaks.Total != sm.LeakedBytes || top.Peak.Total != sm.PeakBytes || top.Suppressed.Bytes != sm.SuppressedBytes {
				t.Errorf("top totals: leaks %d peak %d suppressed %d; summary %+v", top.Leaks.Total, top.Peak.Total, top.Suppressed.Bytes, sm)
			}
			var tr TreeAnswer
			for _, inv := range []string{"0", "1"} {
				getJSON(t, srv.URL+"/api/tree?invert="+inv, &tr)
				root := tr.Nodes[0].Values
				wantRoot := []uint64{sm.PeakBytes, sm.LeakedBytes, sm.Allocations + sm.Reallocations, sm.TemporaryAllocations, sm.BytesAllocated}
				if fmt.Sprint(root) != fmt.Sprint(wantRoot) || fmt.Sprint(tr.Costs) != "[peak leaks calls temporary bytes]" {
					t.Errorf("tree (invert=%s) root %v %v, summary %v", inv, tr.Costs, root, wantRoot)
				}
			}
			var c ConsumedAnswer
			getJSON(t, srv.URL+"/api/consumed?points=300&top=3", &c)
			var tl Timeline
			getJSON(t, srv.URL+"/api/timeline?points=300", &tl)
			var most uint64
			for b, tot := range c.Total {
				var sum uint64
				for _, s := range c.Series {
					sum += s.Values[b]
				}
				if sum != tot || tot != tl.Points[b].MaxBytes {
					t.Fatalf("bucket %d: series %d, total %d, timeline %d", b, sum, tot, tl.Points[b].MaxBytes)
				}
				most = max(most, tot)
			}
			if most != sm.PeakBytes || len(c.Series) > 4 {
				t.Errorf("consumed rises to %d in %d series; peak %d", most, len(c.Series), sm.PeakBytes)
			}
		})
	}
}

// The resident memory a session samples at each flush is served beside the
// heap: python3.11 holding 64 MiB of bytes objects (written: calloc'd pages are not
// resident until touched) is resident for more
// than that, and the answer's peak is the largest of the samples in the
// trace.
func TestAPIMemory(t *testing.T) {
	py := testutil.Tool(t, "/usr/bin/python3.11")
	cmd := exec.Command(py, "-c", "import time\nx = [bytes([1 + i % 200]) * (1 << 20) for i in range(64)]\ntime.sleep(0.4)\n")
	file := filepath.Join(t.TempDir(), "py.hst")
	props := heapscope.Properties{File: file, FlushInterval: 50 * time.Millisecond}
	s, err := heapscope.Launch(fmt.Sprintf("web-memory-%d", time.Now().UnixNano()), props, cmd)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Wait(); err != nil {
		t.Fatal(err)
	}
	var samples []event.Memory
	r, err := tracefile.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Replay(noteSink{&samples}, tracefile.Window{}); err != nil {
		t.Fatal(err)
	}
	r.Close()
	if len(samples) < 3 {
		t.Fatalf("%d memory samples in the trace", len(samples))
	}
	var peak uint64
	for _, m := range samples {
		peak = max(peak, m.RSS) // one process
	}
	_, srv := serveTrace(t, file)
	var m Memory
	getJSON(t, srv.URL+"/api/memory", &m)
	if m.Samples != len(samples) || m.Peak.RSS != peak || len(m.Processes) != 1 || m.Processes[0].Peak.RSS != peak {
		t.Errorf("memory %+v; %d samples in the trace, largest %d", m, len(samples), peak)
	}
	if m.Peak.RSS < 64<<20 || m.Peak.Anon < 64<<20 {
		t.Errorf("peak resident %d (anonymous %d): less than the 64 MiB python3 held", m.Peak.RSS, m.Peak.Anon)
	}
	// A window after the peak starts with what was resident then.
	q := url.Values{"from_ns": {fmt.Sprint(m.Peak.TNs + 1)}}
	var late Memory
	getJSON(t, srv.URL+"/api/memory?"+q.Encode(), &late)
	if len(late.Points) == 0 || late.Points[0].TNs != m.Peak.TNs+1 {
		t.Errorf("window from the peak on: %+v", late.Points)
	}
}

// noteSink keeps a trace's memory samples.
type noteSink struct{ ms *[]event.Memory }

func (noteSink) Process(event.Process) error   { return nil }
func (noteSink) Exit(event.Exit) error         { return nil }
func (noteSink) Module(event.Module) error     { return nil }
func (noteSink) Stack(event.Stack) error       { return nil }
func (noteSink) Snapshot(event.Snapshot) error { return nil }
func (noteSink) Stats(event.Stats) error       { return nil }
func (noteSink) Events([]event.Event) error    { return nil }
func (n noteSink) Note(x event.Note) error {
	if m, ok := x.(event.Memory); ok {
		*n.ms = append(*n.ms, m)
	}
	return nil
}
