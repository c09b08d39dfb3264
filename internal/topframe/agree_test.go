package topframe

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/heapscope/heapscope"
	"github.com/heapscope/heapscope/internal/testutil"
	"github.com/heapscope/heapscope/query"
	"github.com/heapscope/heapscope/report"
	"github.com/heapscope/heapscope/symbolize"
	"github.com/heapscope/heapscope/web"
)

// TestSitesAgree: top, report and serve agree on what a site is and what
// it is called, on a trace with inlined frames (inline_sites, -O2 -g):
// the same sites, each with the same stack, name and calls, and the two
// stacks that differ only in whether grow was inlined are two sites in
// each.
func TestSitesAgree(t *testing.T) {
	cmd := exec.Command(testutil.MustBuild(t, "inline_sites", testutil.Options{Opt: "2"}), "1000", "wait")
	s, stdin := launch(t, "live-agree", cmd, "ready")
	path := s.Files()[0]

	// top: what the session counts while the program waits.
	smp := NewSampler(s.Top, 100*time.Millisecond, symbolize.Options{})
	defer smp.Close()
	var f *Frame
	var err error
	for deadline, calls := time.Now().Add(30*time.Second), uint64(0); ; {
		if f, err = smp.Sample(0, 0, ByCalls, heapscope.MaxTopSites); err != nil {
			t.Fatal(err)
		}
		n := uint64(0)
		for _, st := range f.Sites {
			n += st.Calls
		}
		// 1000 leaks, 10,000 temporaries, 1001 for the peak, 49
		// reallocations: all there once two samples agree.
		if !f.Reading && n >= 12050 && n == calls {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("top counts %d calls, want at least 12050", n)
		}
		calls = n
		time.Sleep(100 * time.Millisecond)
	}
	stdin.Close()
	if err := s.Wait(); err != nil {
		t.Fatal(err)
	}
	top := map[string]uint64{}
	for _, st := range f.Sites {
		name, _, _ := strings.Cut(st.Name(), " (") // Name adds the file and line
		top[siteID(name, st.Stack)] += st.Calls
	}

	// report.
	rep, err := report.Load(path, report.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	reported := map[string]uint64{}
	for _, st := range rep.Sites {
		if c := st.Calls(); c > 0 {
			reported[siteID(st.Name(), st.Stack())] += c
		}
	}

	// serve: the sites of the whole trace, and the window's.
	x, err := query.Build(path, query.Options{})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(web.New(x))
	defer srv.Close()
	var doc report.JSON
	get(t, srv.URL+"/api/sites?top=0", &doc)
	served := map[string]uint64{}
	for _, st := range doc.Allocations {
		if c := st.Allocations + st.Reallocations; c > 0 {
			served[siteID(st.Name, framesOf(st.Stack))] += c
		}
	}
	var w web.Window
	get(t, srv.URL+"/api/window?top=0", &w)
	classes := map[string]bool{}
	for _, st := range w.Sites {
		classes[siteID(st.Name, framesOf(st.Stack))] = true
	}

	if !equal(top, reported) || !equal(served, reported) {
		t.Errorf("sites by calls:\ntop:    %v\nreport: %v\nserve:  %v", keys(top), keys(reported), keys(served))
	}
	for k := range classes {
		if _, ok := reported[k]; !ok {
			t.Errorf("the window's site %q is no site of the report", k)
		}
	}
	// grow, inlined into leak_some and called out of line from the same
	// line: two sites of 500 calls each.
	var grow []string
	for k, c := range reported {
		if strings.HasPrefix(k, "grow\n") && strings.Contains(k, "\nleak_some:") && c == 500 {
			grow = append(grow, k)
		}
	}
	if len(grow) != 2 {
		t.Errorf("%d sites of grow in leak_some with 500 calls, want 2 (inlined and not): %v", len(grow), keys(reported))
	}
}

// siteID is a site as the test compares it: its name and its frames'
// functions, lines and inlining.
func siteID(name string, st []symbolize.Frame) string {
	var b strings.Builder
	b.WriteString(name)
	for _, f := range st {
		b.WriteString("\n" + f.Name() + ":" + strconv.Itoa(f.Line))
		if f.Inlined {
			b.WriteString(" inlined")
		}
	}
	return b.String()
}

func framesOf(js []report.JSONFrame) []symbolize.Frame {
	out := make([]symbolize.Frame, len(js))
	for i, f := range js {
		off, _ := strconv.ParseUint(strings.TrimPrefix(f.Offset, "0x"), 16, 64)
		addr, _ := strconv.ParseUint(strings.TrimPrefix(f.Address, "0x"), 16, 64)
		out[i] = symbolize.Frame{Function: f.Function, File: f.File, Line: f.Line, Module: f.Module, Offset: off, Address: addr, Inlined: f.Inlined}
	}
	return out
}

func get(t *testing.T, url string, v any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s: %s", url, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("%s: %v", url, err)
	}
}

func equal(a, b map[string]uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func keys(m map[string]uint64) []string {
	var out []string
	for k, v := range m {
		out = append(out, strings.ReplaceAll(k, "\n", " < ")+" = "+strconv.FormatUint(v, 10))
	}
	sort.Strings(out)
	return out
}
