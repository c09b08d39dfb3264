package web

import (
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/heapscope/heapscope"
	"github.com/heapscope/heapscope/internal/testutil"
	"github.com/heapscope/heapscope/query"
	"github.com/heapscope/heapscope/suppress"
)

// viewport sizes the page as a screen of w×h does.
func viewport(t *testing.T, ctx context.Context, w, h int64) {
	t.Helper()
	do(t, ctx, chromedp.EmulateViewport(w, h))
}

// shot keeps what the screen shows (not the whole page) under name.
func shot(t *testing.T, ctx context.Context, dir, name string) {
	t.Helper()
	b, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatal(err)
	}
	writeShot(t, dir, name, b)
}

// rect is an element's box on the screen: left, top, width, height.
func rect(t *testing.T, ctx context.Context, sel string) [4]float64 {
	t.Helper()
	v := eval[[]float64](t, ctx, fmt.Sprintf(`(() => { const r = document.querySelector(%q).getBoundingClientRect(); return [r.left, r.top, r.width, r.height]; })()`, sel))
	return [4]float64{v[0], v[1], v[2], v[3]}
}

func attr(t *testing.T, ctx context.Context, sel, name string) string {
	t.Helper()
	return eval[string](t, ctx, fmt.Sprintf(`(() => { const e = document.querySelector(%q); return e ? (e.getAttribute(%q) || "") : "<none>"; })()`, sel, name))
}

func visible(t *testing.T, ctx context.Context, sel string) bool {
	t.Helper()
	return eval[bool](t, ctx, fmt.Sprintf(`(() => { const e = document.querySelector(%q); return !!e && e.offsetParent !== null; })()`, sel))
}

// noErrors fails the test if the page shows an error.
func noErrors(t *testing.T, ctx context.Context, where string) {
	t.Helper()
	if !eval[bool](t, ctx, `document.getElementById("errors").hidden`) {
		t.Errorf("%s: errors: %s", where, eval[string](t, ctx, `document.getElementById("errors").textContent`))
	}
}

// The first screen answers the question, as heaptrack_gui's does: at
// 1280×800 the summary and the four top-N lists are on it, each list the
// report's by its cost; the sticky header is small at 1280×800 and at
// 1024×700; the timeline's readout gives the bucket under the pointer as
// the API does.
func TestPageFirstScreen(t *testing.T) {
	ctx := browser(t)
	path := trace(t, "serve_phases")
	_, srv := serveTrace(t, path)
	shots := artefacts(t)
	viewport(t, ctx, 1280, 800)
	settle(t, ctx, visit(srv, "/"))
	shot(t, ctx, shots, "first-screen")
	noErrors(t, ctx, "overview")
	// serve_phases.c's known sites.
	for _, c := range []struct{ list, name, v string }{
		{"top-peak", "mid_kept", "15000"},
		{"top-leaks", "early_leak", "10000"},
		{"top-calls", "mid_temp", "10"},
		{"top-temporary", "mid_temp", "10"},
	} {
		row := "#" + c.list + " tr[data-v]"
		if n, v := attr(t, ctx, row, "data-name"), attr(t, ctx, row, "data-v"); n != c.name || v != c.v {
			t.Errorf("%s: first row %s %s, want %s %s", c.list, n, v, c.name, c.v)
		}
		if r := rect(t, ctx, "#"+c.list); r[1]+r[3] > 800 || r[3] == 0 {
			t.Errorf("%s is not on the first screen: %v", c.list, r)
		}
	}
	if k, h := attr(t, ctx, "#headline", "data-kind"), eval[string](t, ctx, `document.getElementById("headline").textContent`); k != "leaks" || !strings.Contains(h, "11.1 KiB in 7 blocks") {
		t.Errorf("headline %q (%s)", h, k)
	}
	// The header stays, and stays small, once scrolled.
	for _, sz := range [][2]int64{{1280, 800}, {1024, 700}} {
		viewport(t, ctx, sz[0], sz[1])
		settle(t, ctx, visit(srv, "/?tab=flame&cost=calls"))
		do(t, ctx, chromedp.Evaluate[chromedp.Void](`window.scrollTo(0, 400)`))
		r := rect(t, ctx, "#bar")
		if share := r[3] / float64(sz[1]); r[1] != 0 || share > 0.08 {
			t.Errorf("at %d×%d the sticky header is %.0f px high (%.0f%% of the screen) at %.0f", sz[0], sz[1], r[3], 100*share, r[1])
		}
		shot(t, ctx, shots, fmt.Sprintf("scrolled-%dx%d", sz[0], sz[1]))
	}

	// The readout of the timeline: the bucket under the pointer.
	viewport(t, ctx, 1280, 800)
	settle(t, ctx, visit(srv, "/"))
	tl := rect(t, ctx, "#timeline")
	x, y := tl[0]+tl[2]*0.5, tl[1]+tl[3]*0.3
	do(t, ctx, chromedp.MouseEvent(chromedp.MouseMoved, x, y))
	if !visible(t, ctx, "#readout") {
		t.Fatal("no readout over the timeline")
	}
	shot(t, ctx, shots, "readout")
	text := eval[string](t, ctx, `document.getElementById("readout").textContent`)
	for _, w := range []string{"live ", " blocks", "allocs ", "frees ", "/s"} {
		if !strings.Contains(text, w) {
			t.Errorf("readout %q lacks %q", text, w)
		}
	}
	points := eval[int](t, ctx, `Math.min(2000, Math.max(100, Math.round(document.getElementById("timeline").getBoundingClientRect().width)))`)
	var want Timeline
	getJSON(t, fmt.Sprintf("%s/api/timeline?points=%d", srv.URL, points), &want)
	tns, _ := strconv.ParseInt(attr(t, ctx, "#readout", "data-t"), 10, 64)
	found := false
	for _, p := range want.Points {
		if p.TNs == tns {
			found = true
			if got := attr(t, ctx, "#readout", "data-bytes"); got != strconv.FormatUint(p.MaxBytes, 10) {
				t.Errorf("readout at %d: %s bytes, the API's %d", tns, got, p.MaxBytes)
			}
			mid := (float64(want.FromNs) + float64(want.ToNs)) / 2
			if math.Abs(float64(p.TNs)-mid) > float64(2*want.WidthNs)+float64(want.ToNs-want.FromNs)*0.02 {
				t.Errorf("the readout at the middle of the timeline is of %d, the middle is %.0f", p.TNs, mid)
			}
		}
	}
	if !found {
		t.Errorf("readout of %d: no such bucket", tns)
	}
}

// A trace whose only leaks are suppressed opens on its peak: the headline
// says so ("no leaks — … suppressed"), the leaks list too, and the flame
// graph's cost is the peak, never an empty "all".
func TestPageNoLeaks(t *testing.T) {
	ctx := browser(t)
	path := trace(t, "churn", "2000", "1")
	x, err := query.Build(path, query.Options{Suppressions: suppress.Defaults()})
	if err != nil {
		t.Fatal(err)
	}
	srv := newTestServer(t, New(x))
	shots := artefacts(t)
	sm := x.Report.Document(1).Summary
	if sm.LeakedBytes != 0 || sm.SuppressedBytes == 0 {
		t.Fatalf("churn: leaked %d, suppressed %d: want only suppressed leaks", sm.LeakedBytes, sm.SuppressedBytes)
	}
	viewport(t, ctx, 1280, 800)
	settle(t, ctx, visit(srv, "/"))
	shot(t, ctx, shots, "first-screen-no-leaks")
	h := eval[string](t, ctx, `document.getElementById("headline").textContent`)
	if attr(t, ctx, "#headline", "data-kind") != "none" || !strings.HasPrefix(h, "No leaks — ") || !strings.Contains(h, "suppressed") {
		t.Errorf("headline %q (suppressed %d B)", h, sm.SuppressedBytes)
	}
	if l := eval[string](t, ctx, `document.getElementById("top-leaks").textContent`); !strings.Contains(l, "no leaks — ") || !strings.Contains(l, "suppressed") {
		t.Errorf("leaks list %q", l)
	}
	settle(t, ctx, chromedp.Click(chromedp.ID("tab-flame")))
	shot(t, ctx, shots, "flame-no-leaks")
	if c := eval[string](t, ctx, `document.getElementById("cost").value`); c != "peak" {
		t.Errorf("the flame graph of a trace with no leaks opens by %q", c)
	}
	if got := attr(t, ctx, "#flame-total", "data-v"); got != strconv.FormatUint(sm.PeakBytes, 10) || sm.PeakBytes == 0 {
		t.Errorf("flame total %s, peak %d", got, sm.PeakBytes)
	}
	if visible(t, ctx, "#flame-empty") {
		t.Error("an empty flame graph")
	}
	// Asked for the leaks, it says there are none instead of drawing "all".
	settle(t, ctx, visit(srv, "/?tab=flame&cost=leaks"))
	if !visible(t, ctx, "#flame-empty") || visible(t, ctx, "#flame") {
		t.Error("the leaks of a trace without leaks drawn as a flame graph")
	}
	if e := eval[string](t, ctx, `document.getElementById("flame-empty").textContent`); !strings.Contains(e, "Nothing leaked") || !strings.Contains(e, "suppressed") {
		t.Errorf("empty flame graph says %q", e)
	}
}

// A search runs on the server: a function under the flame graph's drawing
// threshold is found with its true share (the functions table's), and the
// search narrows the other views; filters apply to every view, the
// timeline and the summary included.
func TestPageSearchAndFilters(t *testing.T) {
	ctx := browser(t)
	_, srv := serveTrace(t, trace(t, "serve_phases"))
	shots := artefacts(t)
	viewport(t, ctx, 1280, 800)
	late := functionTotal(t, srv, "leaks", "late_leak")
	// late_leak holds 12.3% of the leaks: under a 20% threshold it is not drawn.
	settle(t, ctx, visit(srv, "/?tab=flame&cost=leaks&share=0.2&q=late_leak"))
	shot(t, ctx, shots, "search-under-threshold")
	if h := eval[string](t, ctx, `document.getElementById("hidden").textContent`); !strings.Contains(h, "not drawn") {
		t.Errorf("nothing hidden under 20%%: %q", h)
	}
	if v := attr(t, ctx, "#match", "data-value"); v != strconv.FormatUint(late, 10) || late != 1400 {
		t.Errorf("search for late_leak finds %s, the functions table %d", v, late)
	}
	if m := eval[string](t, ctx, `document.getElementById("match").textContent`); !strings.Contains(m, "12.3%") {
		t.Errorf("search share %q", m)
	}
	// The search on other tabs: the functions matching, the tree's rows.
	settle(t, ctx, visit(srv, "/?tab=functions&cost=leaks&q=leak"))
	shot(t, ctx, shots, "search-functions")
	names := eval[[]string](t, ctx, `[...document.querySelectorAll("#functions-table tr[data-name]")].map((r) => r.getAttribute("data-name")).sort()`)
	if strings.Join(names, ",") != "early_leak,late_leak" {
		t.Errorf("functions matching leak: %v", names)
	}
	settle(t, ctx, visit(srv, "/?tab=bottomup&q=mid_"))
	if n := eval[int](t, ctx, `document.querySelectorAll("#tree-up tr.match").length`); n != 2 {
		t.Errorf("%d bottom-up rows match mid_, want mid_temp's and mid_kept's", n)
	}

	// A filter typed in the box: every view is of what it keeps.
	settle(t, ctx, visit(srv, "/"))
	settle(t, ctx, chromedp.SendKeys(chromedp.ID("filter"), "-early_leak\r"))
	shot(t, ctx, shots, "filtered")
	if loc := eval[string](t, ctx, `location.search`); !strings.Contains(loc, "exclude=early_leak") {
		t.Errorf("after the filter the URL is %s", loc)
	}
	if v := attr(t, ctx, `#summary-table td[data-k="leaked_bytes"]`, "data-v"); v != "1400" {
		t.Errorf("leaks without early_leak on the summary: %s", v)
	}
	if v := attr(t, ctx, "#top-leaks tr[data-v]", "data-name"); v != "late_leak" {
		t.Errorf("top leak without early_leak: %s", v)
	}
	if v := attr(t, ctx, "#timeline", "data-peak"); v != "15000" {
		t.Errorf("the timeline's peak without early_leak: %s (mid_kept's 15000 alone)", v)
	}
	settle(t, ctx, chromedp.Click(chromedp.ID("tab-flame")))
	if v := attr(t, ctx, "#flame-total", "data-v"); v != "1400" {
		t.Errorf("the flame graph's leaks without early_leak: %s", v)
	}
	// Its chip turns it into its opposite: only early_leak's.
	settle(t, ctx, chromedp.Click(chromedp.CSS(`#chips .chip`)))
	if v := attr(t, ctx, "#flame-total", "data-v"); v != "10000" {
		t.Errorf("the flame graph's leaks of early_leak alone: %s", v)
	}
	if v := attr(t, ctx, "#timeline", "data-peak"); v != "10000" {
		t.Errorf("the timeline's peak of early_leak alone: %s", v)
	}
	noErrors(t, ctx, "filters")
}

// The top-down and bottom-up trees have a column per cost, expand, and
// show the caller/callee view beside them.
func TestPageTrees(t *testing.T) {
	ctx := browser(t)
	_, srv := serveTrace(t, trace(t, "serve_phases"))
	shots := artefacts(t)
	viewport(t, ctx, 1280, 800)
	settle(t, ctx, visit(srv, "/?tab=topdown"))
	shot(t, ctx, shots, "topdown")
	cols := eval[[]string](t, ctx, `[...document.querySelectorAll("#tree-down th[data-col]")].map((h) => h.getAttribute("data-col"))`)
	if strings.Join(cols, " ") != "peak leaks calls temporary bytes" {
		t.Errorf("columns %v", cols)
	}
	row := func(tree, name string) map[string]string {
		return eval[map[string]string](t, ctx, fmt.Sprintf(`(() => { const r = [...document.querySelectorAll("#%s tr[data-path]")].find((r) => r.querySelector(".fn").textContent === %q);
			return r ? Object.fromEntries([...r.querySelectorAll("td[data-col]")].map((c) => [c.getAttribute("data-col"), c.getAttribute("data-v")])) : {}; })()`, tree, name))
	}
	// main, opened on the largest path: every site is under it.
	if m := row("tree-down", "main"); m["peak"] != "25000" || m["leaks"] != "11400" || m["calls"] != "24" || m["temporary"] != "10" || m["bytes"] != "28240" {
		t.Errorf("main's row %v", m)
	}
	if m := row("tree-down", "early_leak"); m["leaks"] != "10000" || m["calls"] != "5" {
		t.Errorf("early_leak's row under main %v", m)
	}
	// Close main: its callees go.
	do(t, ctx, chromedp.Evaluate[chromedp.Void](`[...document.querySelectorAll("#tree-down tr[data-path]")].find((r) => r.querySelector(".fn").textContent === "main").querySelector(".arrow").click()`))
	if m := row("tree-down", "early_leak"); len(m) != 0 {
		t.Errorf("early_leak still shown with main closed: %v", m)
	}
	settle(t, ctx, visit(srv, "/?tab=bottomup"))
	shot(t, ctx, shots, "bottomup")
	if m := row("tree-up", "mid_kept"); m["peak"] != "15000" || m["leaks"] != "0" {
		t.Errorf("mid_kept bottom-up %v", m)
	}
	// A click on a name: its callers and callees, beside the tree.
	settle(t, ctx, chromedp.Evaluate[chromedp.Void](`[...document.querySelectorAll("#tree-up .fn")].find((e) => e.textContent === "early_leak").click()`))
	shot(t, ctx, shots, "bottomup-callers")
	if title := eval[string](t, ctx, `document.getElementById("callers-title").textContent`); !strings.HasPrefix(title, "early_leak:") {
		t.Errorf("callers of %q", title)
	}
	side, tree := rect(t, ctx, "#callers"), rect(t, ctx, "#tree-up")
	if side[0] < tree[0]+tree[2]-1 || side[1] > 800 || side[3] == 0 {
		t.Errorf("the caller/callee view is not beside the tree: %v, tree %v", side, tree)
	}
}

// The caller/callee view is beside the functions table, on the screen of
// the row clicked however far down it was, and the resident memory is on
// the summary and the timeline: python3.11's many functions and its RSS.
func TestPageCallersBesideAndRSS(t *testing.T) {
	ctx := browser(t)
	py := testutil.Tool(t, "/usr/bin/python3.11")
	cmd := exec.Command(py, "-c", "import json, time\nx = [bytes([1 + i % 200]) * (1 << 20) for i in range(48)]\njson.dumps([{'a': i} for i in range(20000)])\ntime.sleep(0.3)\n")
	file := filepath.Join(t.TempDir(), "py.hst")
	s, err := heapscope.Launch(fmt.Sprintf("web-page-py-%d", time.Now().UnixNano()), heapscope.Properties{File: file, FlushInterval: 50 * time.Millisecond}, cmd)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Wait(); err != nil {
		t.Fatal(err)
	}
	_, srv := serveTrace(t, file)
	shots := artefacts(t)
	viewport(t, ctx, 1280, 800)
	settle(t, ctx, visit(srv, "/"))
	shot(t, ctx, shots, "rss-overview")
	var m Memory
	getJSON(t, srv.URL+"/api/memory", &m)
	if v := attr(t, ctx, `#summary-table td[data-k="peak_rss"]`, "data-v"); v != strconv.FormatUint(m.Peak.RSS, 10) || m.Peak.RSS < 48<<20 {
		t.Errorf("peak RSS on the page %s, the API's %d (python3 held 48 MiB)", v, m.Peak.RSS)
	}
	tl := rect(t, ctx, "#timeline")
	do(t, ctx, chromedp.MouseEvent(chromedp.MouseMoved, tl[0]+tl[2]*0.9, tl[1]+tl[3]*0.3))
	if r := eval[string](t, ctx, `document.getElementById("readout").textContent`); !strings.Contains(r, "resident ") {
		t.Errorf("readout without the resident memory: %q", r)
	}
	shot(t, ctx, shots, "rss-readout")

	settle(t, ctx, visit(srv, "/?tab=functions&cost=calls"))
	n := eval[int](t, ctx, `document.querySelectorAll("#functions-table tr[data-name]").length`)
	if h := rect(t, ctx, "#functions-table")[3]; h < 2*800 {
		t.Fatalf("%d functions, %.0f px: want a table longer than two screens", n, h)
	}
	// The last row, scrolled to and clicked.
	do(t, ctx, chromedp.Evaluate[chromedp.Void](`(() => { const rs = document.querySelectorAll("#functions-table tr[data-name]"); rs[rs.length - 1].scrollIntoView(); })()`))
	settle(t, ctx, chromedp.Evaluate[chromedp.Void](`(() => { const rs = document.querySelectorAll("#functions-table tr[data-name]"); rs[rs.length - 1].click(); })()`))
	shot(t, ctx, shots, "callers-beside")
	side, table := rect(t, ctx, "#callers"), rect(t, ctx, "#functions-table")
	if side[1] < 0 || side[1] > 800 || side[3] == 0 || side[0] < table[0]+table[2]-1 {
		t.Errorf("after a click on the last of %d rows the caller/callee view is at %v (table %v): not beside it on the screen", n, side, table)
	}
}

// The consumed chart stacks the functions that held the heap: at the peak
// they add up to it.
func TestPageConsumed(t *testing.T) {
	ctx := browser(t)
	_, srv := serveTrace(t, trace(t, "serve_phases"))
	viewport(t, ctx, 1280, 800)
	settle(t, ctx, visit(srv, "/?tab=consumed"))
	shot(t, ctx, artefacts(t), "consumed")
	got := eval[map[string]string](t, ctx, `Object.fromEntries([...document.querySelectorAll("#consumed-legend tr[data-name]")].map((r) => [r.getAttribute("data-name"), r.getAttribute("data-peak")]))`)
	if got["mid_kept"] != "15000" || got["early_leak"] != "10000" {
		t.Errorf("consumed at the peak %v", got)
	}
	var sum uint64
	for _, v := range got {
		n, _ := strconv.ParseUint(v, 10, 64)
		sum += n
	}
	if sum != 25000 {
		t.Errorf("the consumed series hold %d at the peak, the peak is 25000", sum)
	}
	noErrors(t, ctx, "consumed")
}

// Controls that do nothing on a tab are not shown there.
func TestPageControlsPerTab(t *testing.T) {
	ctx := browser(t)
	_, srv := serveTrace(t, trace(t, "serve_phases"))
	viewport(t, ctx, 1280, 800)
	want := map[string][]string{
		"overview":  nil,
		"flame":     {"#cost", "#inv", "#up", "#share"},
		"topdown":   {"#share"},
		"bottomup":  {"#share"},
		"functions": {"#cost"},
		"consumed":  nil,
		"sites":     nil,
		"classes":   nil,
		"sizes":     nil,
	}
	for tab, on := range want {
		settle(t, ctx, visit(srv, "/?tab="+tab))
		for _, c := range []string{"#cost", "#inv", "#up", "#share"} {
			shown := visible(t, ctx, c)
			wanted := false
			for _, o := range on {
				wanted = wanted || o == c
			}
			if shown != wanted {
				t.Errorf("tab %s: %s shown %v", tab, c, shown)
			}
		}
		noErrors(t, ctx, tab)
		if tab == "sizes" {
			// No empty rows below the trace's time resolution.
			rows := eval[[]string](t, ctx, `[...document.querySelectorAll("#lifetimes-table tr")].map((r) => r.cells[1].textContent)`)
			if len(rows) < 2 || rows[1] == "0" {
				t.Errorf("lifetimes %v: an empty bucket after the first", rows)
			}
		}
	}
}

// The self-contained report offers only what it can do: no window drag,
// no instant, no process, filter or search; only the tabs whose answers
// it holds, each opening without an error; the sizes histogram of its
// JSON when it has no window index; flame costs it holds.
func TestStaticReportOffersWhatItCan(t *testing.T) {
	ctx := browser(t)
	path := trace(t, "serve_phases")
	for _, c := range []struct {
		name    string
		noIndex bool
		tabs    []string // offered
		absent  []string
	}{
		{"static-indexed", false, []string{"overview", "flame", "topdown", "bottomup", "functions", "consumed", "sites", "classes", "sizes"}, []string{"diff"}},
		{"static-noindex", true, []string{"overview", "flame", "topdown", "bottomup", "functions", "sites", "sizes"}, []string{"classes", "consumed", "diff"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var x *query.Index
			var err error
			if c.noIndex {
				x, err = query.Open(path, query.Options{NoIndex: true})
			} else {
				x, err = query.Build(path, query.Options{})
			}
			if err != nil {
				t.Fatal(err)
			}
			var buf strings.Builder
			if err := WriteHTML(&buf, x); err != nil {
				t.Fatal(err)
			}
			file := filepath.Join(t.TempDir(), "report.html")
			if err := os.WriteFile(file, []byte(buf.String()), 0o600); err != nil {
				t.Fatal(err)
			}
			shots := artefacts(t)
			viewport(t, ctx, 1280, 800)
			settle(t, ctx, chromedp.Navigate("file://"+file))
			for _, sel := range []string{"#filter", "#search", "#pid", "#zoom-out", "#zoom-sel"} {
				if visible(t, ctx, sel) {
					t.Errorf("%s offered in a static report", sel)
				}
			}
			// A drag and a click on the timeline do nothing.
			tl := rect(t, ctx, "#timeline")
			y := tl[1] + tl[3]/3
			do(t, ctx,
				chromedp.MouseEvent(chromedp.MousePressed, tl[0]+tl[2]*0.3, y, chromedp.ButtonLeft),
				chromedp.MouseEvent(chromedp.MouseMoved, tl[0]+tl[2]*0.6, y, chromedp.ButtonLeft),
				chromedp.MouseEvent(chromedp.MouseReleased, tl[0]+tl[2]*0.6, y, chromedp.ButtonLeft),
				chromedp.MouseEvent(chromedp.MousePressed, tl[0]+tl[2]*0.5, y, chromedp.ButtonLeft),
				chromedp.MouseEvent(chromedp.MouseReleased, tl[0]+tl[2]*0.5, y, chromedp.ButtonLeft))
			if loc := eval[string](t, ctx, `location.search`); loc != "" {
				t.Errorf("a drag or click on the static timeline made %s", loc)
			}
			for _, tab := range c.absent {
				if visible(t, ctx, "#tab-"+tab) {
					t.Errorf("tab %s offered", tab)
				}
			}
			for _, tab := range c.tabs {
				if !visible(t, ctx, "#tab-"+tab) {
					t.Errorf("tab %s not offered", tab)
					continue
				}
				settle(t, ctx, chromedp.Click(chromedp.ID("tab-"+tab)))
				shot(t, ctx, shots, c.name+"-"+tab)
				noErrors(t, ctx, c.name+" "+tab)
			}
			settle(t, ctx, chromedp.Click(chromedp.ID("tab-sizes")))
			if n := eval[int](t, ctx, `document.querySelectorAll("#sizes-table tr").length`); n == 0 {
				t.Error("no sizes histogram")
			}
			if lt := visible(t, ctx, "#lifetimes-table"); lt == c.noIndex {
				t.Errorf("lifetimes shown %v without the index %v", lt, c.noIndex)
			}
			costs := eval[[]string](t, ctx, `[...document.getElementById("cost").options].map((o) => o.value)`)
			if strings.Join(costs, " ") != "leaks peak bytes calls temporary" {
				t.Errorf("costs offered %v", costs)
			}
			settle(t, ctx, chromedp.Click(chromedp.ID("tab-flame")))
			for _, cost := range costs {
				settle(t, ctx, chromedp.SetValue(chromedp.ID("cost"), cost), chromedp.Evaluate[chromedp.Void](`document.getElementById("cost").dispatchEvent(new Event("change"))`))
				noErrors(t, ctx, "cost "+cost)
			}
		})
	}
}
