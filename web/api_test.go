package web

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/heapscope/heapscope/query"
	"github.com/heapscope/heapscope/report"
)

func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	r, err := client.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	b, _ := io.ReadAll(r.Body)
	if r.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s: %s", url, r.Status, b)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
}

func status(t *testing.T, url string) int {
	t.Helper()
	r, err := client.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	r.Body.Close()
	return r.StatusCode
}

func leaksByFunction(d *report.JSON) map[string]uint64 {
	m := map[string]uint64{}
	for _, l := range d.Leaks {
		m[l.Stack[0].Function] += l.Bytes
	}
	return m
}

// The API's numbers are `heapscope report --format json`'s on the same
// trace: the whole trace's document, and a window's allocations and leaks.
func TestAPIEqualsReport(t *testing.T) {
	for _, w := range []string{"report_known", "serve_phases"} {
		t.Run(w, func(t *testing.T) {
			path := trace(t, w)
			_, srv := serveTrace(t, path)
			rep, err := report.Load(path, report.LoadOptions{})
			if err != nil {
				t.Fatal(err)
			}
			var want bytes.Buffer
			if err := rep.WriteJSON(&want, 0); err != nil {
				t.Fatal(err)
			}
			var wantDoc, got report.JSON
			if err := json.Unmarshal(want.Bytes(), &wantDoc); err != nil {
				t.Fatal(err)
			}
			getJSON(t, srv.URL+"/api/sites?top=0", &got)
			if !reflect.DeepEqual(got, wantDoc) {
				g, _ := json.Marshal(got)
				t.Errorf("/api/sites:\n%s\nreport:\n%s", g, want.Bytes())
			}
			var sum Summary
			getJSON(t, srv.URL+"/api/summary", &sum)
			if sum.JSON.Summary != wantDoc.Summary || sum.JSON.Trace.LostEvents != wantDoc.Trace.LostEvents {
				t.Errorf("/api/summary %+v, report %+v", sum.JSON.Summary, wantDoc.Summary)
			}
			// The flame graph of the leaks adds up to the report's leaks.
			var fl struct{ Total uint64 }
			getJSON(t, srv.URL+"/api/flame?cost=leaks", &fl)
			if fl.Total != wantDoc.Summary.LeakedBytes {
				t.Errorf("flame total %d, leaked %d", fl.Total, wantDoc.Summary.LeakedBytes)
			}
		})
	}
	t.Run("window", func(t *testing.T) {
		path := trace(t, "serve_phases")
		_, srv := serveTrace(t, path)
		g1, g2 := readEvents(t, path).gaps()
		rep, err := report.Load(path, report.LoadOptions{From: time.Duration(g1), To: time.Duration(g2)})
		if err != nil {
			t.Fatal(err)
		}
		want := rep.Document(0)
		var got report.JSON
		getJSON(t, fmt.Sprintf("%s/api/sites?top=0&from_ns=%d&to_ns=%d", srv.URL, g1, g2), &got)
		// The report of a window sees no block allocated before it: its
		// leaks are the window's AIFO.
		var win Window
		getJSON(t, fmt.Sprintf("%s/api/window?top=0&from_ns=%d&to_ns=%d", srv.URL, g1, g2), &win)
		aifo := map[string]uint64{}
		for _, s := range win.Sites {
			if s.AIFO.Bytes > 0 {
				aifo[s.Stack[0].Function] += s.AIFO.Bytes
			}
		}
		if w := leaksByFunction(want); !reflect.DeepEqual(aifo, w) {
			t.Errorf("window AIFO %v, report --from --to leaks %v", aifo, w)
		}
		// The API's leaks of a window are what is live at its end, however
		// old: AIFO + AOFO.
		if got.Summary.LeakedBytes != win.Total.AIFO.Bytes+win.Total.AOFO.Bytes {
			t.Errorf("window leaks %d, AIFO+AOFO %+v", got.Summary.LeakedBytes, win.Total)
		}
		if got.Summary.Allocations != want.Summary.Allocations || got.Summary.BytesAllocated != want.Summary.BytesAllocated ||
			got.Summary.TemporaryAllocations != want.Summary.TemporaryAllocations {
			t.Errorf("window summary %+v, report --from --to %+v", got.Summary, want.Summary)
		}
	})
}

// /api/window's classes are those a direct pass over the trace finds, and
// agree with the heap at the window's ends.
func TestAPIWindowClasses(t *testing.T) {
	path := trace(t, "serve_phases")
	_, srv := serveTrace(t, path)
	ev := readEvents(t, path)
	g1, g2 := ev.gaps()
	for _, win := range [][2]int64{{g1, g2}, {0, g2}, {g1, 1 << 40}} {
		var w Window
		getJSON(t, fmt.Sprintf("%s/api/window?from_ns=%d&to_ns=%d", srv.URL, win[0], win[1]), &w)
		want := ev.classes(w.FromNs, w.ToNs)
		got := [4][2]uint64{{w.Total.AIFI.Bytes, w.Total.AIFI.Blocks}, {w.Total.AIFO.Bytes, w.Total.AIFO.Blocks},
			{w.Total.AOFI.Bytes, w.Total.AOFI.Blocks}, {w.Total.AOFO.Bytes, w.Total.AOFO.Blocks}}
		if got != want {
			t.Errorf("window %v: classes %v, direct %v", win, got, want)
		}
		if w.Total.AOFI.Bytes+w.Total.AOFO.Bytes != w.Start.Bytes || w.Total.AIFO.Bytes+w.Total.AOFO.Bytes != w.End.Bytes {
			t.Errorf("window %v: classes %+v, start %+v, end %+v", win, w.Total, w.Start, w.End)
		}
	}
	// The middle phase's classes, as serve_phases makes them.
	var w Window
	getJSON(t, fmt.Sprintf("%s/api/window?from_ns=%d&to_ns=%d", srv.URL, g1, g2), &w)
	if w.Total.AIFI.Bytes != 640 || w.Total.AIFO.Bytes != 15000 || w.Total.AOFI.Bytes != 1200 || w.Total.AOFO.Bytes != 10000 {
		t.Errorf("middle phase: %+v", w.Total)
	}
	// The timeline over the same window starts and ends where the classes say.
	var tl Timeline
	getJSON(t, fmt.Sprintf("%s/api/timeline?from_ns=%d&to_ns=%d&points=50", srv.URL, g1, g2), &tl)
	if len(tl.Points) == 0 || len(tl.Points) > 50 || tl.Points[0].MaxBytes < w.Start.Bytes || tl.Points[len(tl.Points)-1].EndBytes != w.End.Bytes {
		t.Errorf("timeline %+v, window start %+v end %+v", tl, w.Start, w.End)
	}
}

// A window outside the trace is clamped; a reversed one is a bad request.
func TestAPIBadWindows(t *testing.T) {
	path := trace(t, "serve_phases")
	x, srv := serveTrace(t, path)
	span := x.End() - x.Header.MonoStart
	for _, q := range []string{"from_ns=-1000000000000&to_ns=5", fmt.Sprintf("from_ns=%d&to_ns=%d", 2*span, 3*span), "to_ns=999999999999999"} {
		var w Window
		getJSON(t, srv.URL+"/api/window?"+q, &w)
		if w.FromNs < x.Start()-x.Header.MonoStart || w.ToNs > span+1 || w.FromNs > w.ToNs {
			t.Errorf("%s: window [%d, %d] outside the trace [%d, %d]", q, w.FromNs, w.ToNs, x.Start()-x.Header.MonoStart, span)
		}
		var tl Timeline
		getJSON(t, srv.URL+"/api/timeline?"+q, &tl)
	}
	for _, q := range []string{"/api/window?from_ns=10&to_ns=5", "/api/flame?cost=nonsense", "/api/window?pid=x", "/api/export?format=gif", "/api/flame?min_share=2"} {
		if c := status(t, srv.URL+q); c != http.StatusBadRequest {
			t.Errorf("%s: status %d, want 400", q, c)
		}
	}
}

// The export of a window is a pprof profile, collapsed stacks or the JSON
// report of that window.
func TestAPIExport(t *testing.T) {
	path := trace(t, "serve_phases")
	_, srv := serveTrace(t, path)
	g1, g2 := readEvents(t, path).gaps()
	win := fmt.Sprintf("&from_ns=%d&to_ns=%d", g1, g2)
	r, err := client.Get(srv.URL + "/api/export?format=pprof" + win)
	if err != nil {
		t.Fatal(err)
	}
	p, err := profile.Parse(r.Body)
	r.Body.Close()
	if err != nil {
		t.Fatalf("pprof: %v", err)
	}
	var inuse int64
	idx := -1
	for i, st := range p.SampleType {
		if st.Type == "inuse_space" {
			idx = i
		}
	}
	for _, s := range p.Sample {
		inuse += s.Value[idx]
	}
	if inuse != 25000 { // live at the window's end: AIFO 15000 + AOFO 10000
		t.Errorf("pprof inuse_space %d, want 25000", inuse)
	}
	r, err = client.Get(srv.URL + "/api/export?format=collapsed&cost=bytes" + win)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(r.Body)
	r.Body.Close()
	if !strings.Contains(string(b), ";mid_kept 15000\n") || !strings.Contains(string(b), ";mid_temp 640\n") {
		t.Errorf("collapsed:\n%s", b)
	}
	var d report.JSON
	getJSON(t, srv.URL+"/api/export?format=json"+win, &d)
	if d.Summary.BytesAllocated != 15640 || d.Window == nil {
		t.Errorf("json export %+v window %+v", d.Summary, d.Window)
	}
}

// A port in use is a clear error.
func TestListenPortInUse(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	_, err = Listen(l.Addr().String(), false)
	if !errors.Is(err, ErrAddrInUse) || !strings.Contains(err.Error(), l.Addr().String()) {
		t.Errorf("listen on a port in use: %v", err)
	}
}

// With a base trace, /api/diff matches sites by their symbolized frames:
// report_known with 80 rounds against 50 differs only in temp_site's 30
// more calls, and the totals are each trace's report's.
func TestAPIDiff(t *testing.T) {
	cur, base := trace(t, "report_known", "80"), trace(t, "report_known", "50")
	x, err := query.Build(cur, query.Options{})
	if err != nil {
		t.Fatal(err)
	}
	bx, err := query.Build(base, query.Options{})
	if err != nil {
		t.Fatal(err)
	}
	srv := newTestServer(t, NewWithBase(x, bx))
	var d Diff
	getJSON(t, srv.URL+"/api/diff?cost=calls", &d)
	want := func(path string) uint64 {
		rep, err := report.Load(path, report.LoadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		s := rep.Document(0).Summary
		return s.Allocations + s.Reallocations
	}
	if d.Total.Value != want(cur) || d.Total.Base != want(base) || d.Total.Delta != 30 {
		t.Errorf("total %+v, reports %d and %d", d.Total, want(cur), want(base))
	}
	if len(d.Sites) != 1 || d.Sites[0].Stack[0].Function != "temp_site" || d.Sites[0].Delta != 30 || d.Sites[0].Value != 80 {
		t.Errorf("sites %+v", d.Sites)
	}
	getJSON(t, srv.URL+"/api/diff?cost=leaks", &d)
	if d.Total.Delta != 0 || len(d.Sites) != 0 {
		t.Errorf("leaks differ: %+v", d)
	}
	_, plain := serveTrace(t, cur)
	if c := status(t, plain.URL+"/api/diff"); c != http.StatusBadRequest {
		t.Errorf("diff without a base: %d", c)
	}
}

// /api/histogram's lifetimes have no row a lifetime cannot fall in: none
// between the same timestamp and the trace's time resolution (10 µs by
// default: 13 empty rows), and it says the resolution.
func TestAPILifetimesResolution(t *testing.T) {
	_, srv := serveTrace(t, trace(t, "serve_phases"))
	var h Histogram
	getJSON(t, srv.URL+"/api/histogram", &h)
	if h.TimeResolutionNs != int64(10*time.Microsecond) {
		t.Errorf("time resolution %d ns", h.TimeResolutionNs)
	}
	var n uint64
	for _, b := range h.Lifetimes {
		if b.LtNs > 1 && int64(b.LtNs) <= h.TimeResolutionNs {
			t.Errorf("a lifetime row under the resolution: %+v", b)
		}
		n += b.Count
	}
	if len(h.Lifetimes) == 0 || n == 0 {
		t.Errorf("lifetimes %+v", h.Lifetimes)
	}
}
