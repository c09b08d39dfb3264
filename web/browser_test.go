package web

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/heapscope/heapscope/analyze"
	"github.com/heapscope/heapscope/internal/testutil"
	"github.com/heapscope/heapscope/internal/tracetest"
	"github.com/heapscope/heapscope/query"
	"github.com/heapscope/heapscope/report"
	"github.com/heapscope/heapscope/suppress"
)

// browser starts headless Chromium for a test, with the extra options. Without Chromium the test is
// skipped, unless HEAPSCOPE_REQUIRE_BROWSER=1 (CI sets it): then it fails.
func browser(t *testing.T, extra ...chromedp.ExecAllocatorOption) context.Context {
	t.Helper()
	path := ""
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			path = p
			break
		}
	}
	if path == "" {
		if os.Getenv("HEAPSCOPE_REQUIRE_BROWSER") == "1" {
			t.Fatal("HEAPSCOPE_REQUIRE_BROWSER=1 and no chromium on PATH (apt-get install chromium)")
		}
		t.Skip("no chromium on PATH (set HEAPSCOPE_REQUIRE_BROWSER=1 to fail instead)")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.NoSandbox,
		chromedp.DisableGPU, chromedp.WindowSize(1400, 1000), chromedp.UserDataDir(t.TempDir()))
	opts = append(opts, extra...)
	actx, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancel)
	ctx, cancel2 := chromedp.NewContext(actx)
	t.Cleanup(cancel2)
	ctx, cancel3 := context.WithTimeout(ctx, 2*time.Minute)
	t.Cleanup(cancel3)
	return ctx
}

// artefacts is where the screenshots go: $HEAPSCOPE_ARTIFACTS, else a
// temporary directory of the test.
func artefacts(t *testing.T) string {
	if d := os.Getenv("HEAPSCOPE_ARTIFACTS"); d != "" {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	return t.TempDir()
}

func do(t *testing.T, ctx context.Context, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatal(err)
	}
}

func eval[T any](t *testing.T, ctx context.Context, js string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](js))
	if err != nil {
		t.Fatalf("%s: %v", js, err)
	}
	return v
}

// visit opens path ("/?tab=sites") on srv as a user opens the URL serve
// printed: with the token, which the server trades for the cookie.
func visit(srv *testServer, path string) chromedp.Action[chromedp.Void] {
	return chromedp.Navigate(srv.login(path))
}

// settle waits until the page has drawn the answers of its latest refresh.
func settle(t *testing.T, ctx context.Context, act ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	do(t, ctx, chromedp.Evaluate[chromedp.Void](`document.body.removeAttribute("data-ready")`))
	do(t, ctx, act...)
	do(t, ctx, chromedp.WaitReady(chromedp.CSS(`body[data-ready]`)))
}

func screenshot(t *testing.T, ctx context.Context, dir, name string) {
	t.Helper()
	b, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	writeShot(t, dir, name, b)
}

// writeShot keeps a screenshot, and says where in the test's log.
func writeShot(t *testing.T, dir, name string, b []byte) {
	t.Helper()
	p := filepath.Join(dir, name+".png")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot %s", p)
}

// digits keeps the digits of s: "11.1 KiB (11 400 B)" → the exact count
// when it is the last number.
func lastNumber(s string) uint64 {
	s = strings.ReplaceAll(s, "\u202f", "")
	f := strings.FieldsFunc(s, func(r rune) bool { return r < '0' || r > '9' })
	if len(f) == 0 {
		return 0
	}
	n, _ := strconv.ParseUint(f[len(f)-1], 10, 64)
	return n
}

// The page shows serve_phases' trace as a direct reading of it and the
// JSON report give it: the leak total, the top leak's function, the classes
// of a window given in the URL and of one selected by dragging on the
// timeline, and the share of a search.
func TestPageShowsTrace(t *testing.T) {
	ctx := browser(t)
	path := trace(t, "serve_phases")
	_, srv := serveTrace(t, path)
	shots := artefacts(t)
	rep, err := report.Load(path, report.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := rep.Document(0)

	settle(t, ctx, visit(srv, "/"))
	screenshot(t, ctx, shots, "overview")
	leak := eval[string](t, ctx, `document.querySelector('#summary-table td[data-k="leaked_bytes"]').textContent`)
	if !strings.Contains(strings.ReplaceAll(leak, "\u202f", ""), fmt.Sprintf("(%d B) in %d blocks", want.Summary.LeakedBytes, want.Summary.LeakedBlocks)) {
		t.Errorf("the page's leaks %q, the report's %d bytes in %d blocks", leak, want.Summary.LeakedBytes, want.Summary.LeakedBlocks)
	}
	settle(t, ctx, visit(srv, "/?tab=flame"))
	screenshot(t, ctx, shots, "flame")
	if got := eval[string](t, ctx, `document.getElementById("flame-total").getAttribute("data-v")`); got != strconv.FormatUint(want.Summary.LeakedBytes, 10) {
		t.Errorf("the flame graph's total %s, leaks %d", got, want.Summary.LeakedBytes)
	}
	if w := eval[bool](t, ctx, `document.getElementById("warnings").hidden`); !w {
		t.Errorf("warnings shown for a good trace: %s", eval[string](t, ctx, `document.getElementById("warnings").textContent`))
	}

	// The sites: the top leak is early_leak's, as in the report.
	settle(t, ctx, chromedp.Click(chromedp.ID("tab-sites")))
	screenshot(t, ctx, shots, "sites")
	top := eval[string](t, ctx, `document.querySelector("#sites-leaks tr:nth-child(2) .fn").textContent`)
	if fn := want.Leaks[0].Stack[0].Function; !strings.HasPrefix(top, fn+" ") || fn != "early_leak" {
		t.Errorf("top leak on the page %q, in the report %q", top, fn)
	}

	// A window in the URL: the classes are the direct computation's.
	ev := readEvents(t, path)
	g1, g2 := ev.gaps()
	classesOnPage := func() [4][2]uint64 {
		var out [4][2]uint64
		for i, c := range []string{"aifi", "aifo", "aofi", "aofo"} {
			for j := 0; j < 2; j++ {
				v := eval[string](t, ctx, fmt.Sprintf(`document.querySelector("#class-%s td:nth-of-type(%d)").getAttribute("data-v")`, c, j+1))
				out[i][j], _ = strconv.ParseUint(v, 10, 64)
			}
		}
		return out
	}
	settle(t, ctx, visit(srv, fmt.Sprintf("/?from=%d&to=%d&tab=classes", g1, g2)))
	screenshot(t, ctx, shots, "classes")
	if got, want := classesOnPage(), ev.classes(g1, g2); got != want {
		t.Errorf("window from the URL: the page's classes %v, direct %v", got, want)
	}
	if got := classesOnPage(); got[0][0] != 640 || got[1][0] != 15000 || got[2][0] != 1200 || got[3][0] != 10000 {
		t.Errorf("middle phase on the page: %v", got)
	}

	// Drag across the middle of the timeline: the URL gets the window,
	// and the classes shown are the direct computation's for it.
	settle(t, ctx, visit(srv, "/?tab=classes"))
	box := eval[[]float64](t, ctx, `(() => { const r = document.getElementById("timeline").getBoundingClientRect(); return [r.left, r.top, r.width, r.height]; })()`)
	y := box[1] + box[3]/3
	x0, x1 := box[0]+box[2]*0.35, box[0]+box[2]*0.65
	settle(t, ctx,
		chromedp.MouseEvent(chromedp.MousePressed, x0, y, chromedp.ButtonLeft),
		chromedp.MouseEvent(chromedp.MouseMoved, (x0+x1)/2, y, chromedp.ButtonLeft),
		chromedp.MouseEvent(chromedp.MouseMoved, x1, y, chromedp.ButtonLeft),
		chromedp.MouseEvent(chromedp.MouseReleased, x1, y, chromedp.ButtonLeft),
	)
	loc, err := chromedp.Run(ctx, chromedp.Location())
	if err != nil {
		t.Fatal(err)
	}
	var from, to int64
	for _, kv := range strings.Split(loc[strings.Index(loc, "?")+1:], "&") {
		k, v, _ := strings.Cut(kv, "=")
		n, _ := strconv.ParseInt(v, 10, 64)
		switch k {
		case "from":
			from = n
		case "to":
			to = n
		}
	}
	if from == 0 || to <= from {
		t.Fatalf("after a drag the URL is %s", loc)
	}
	screenshot(t, ctx, shots, "dragged")
	if got, want := classesOnPage(), ev.classes(from, to); got != want {
		t.Errorf("dragged window [%d, %d): the page's classes %v, direct %v", from, to, got, want)
	}

	// A search gives the share of the matches: early_leak has 10000 of the
	// 11400 leaked bytes.
	settle(t, ctx, visit(srv, "/?q=early_leak"))
	screenshot(t, ctx, shots, "search")
	if m := eval[string](t, ctx, `document.getElementById("match").textContent`); !strings.Contains(m, "87.7%") {
		t.Errorf("search share %q", m)
	}
	for _, tab := range []string{"functions", "sizes"} {
		settle(t, ctx, visit(srv, "/?tab="+tab))
		screenshot(t, ctx, shots, tab)
	}
	if n := eval[int](t, ctx, `document.querySelectorAll("#sizes-table tr").length`); n == 0 {
		t.Errorf("no size histogram")
	}
}

// A truncated trace opens, with the reader's warning shown on the page.
func TestPageTruncatedTrace(t *testing.T) {
	ctx := browser(t)
	b, err := os.ReadFile(trace(t, "serve_phases"))
	if err != nil {
		t.Fatal(err)
	}
	cut := filepath.Join(t.TempDir(), "cut.hst")
	if err := os.WriteFile(cut, b[:len(b)*2/3], 0o600); err != nil {
		t.Fatal(err)
	}
	_, srv := serveTrace(t, cut)
	settle(t, ctx, visit(srv, "/"))
	screenshot(t, ctx, artefacts(t), "truncated")
	if hidden := eval[bool](t, ctx, `document.getElementById("warnings").hidden`); hidden {
		t.Fatal("no warning shown for a truncated trace")
	}
	if w := eval[string](t, ctx, `document.getElementById("warnings").textContent`); !strings.Contains(w, "cut") {
		t.Errorf("warnings %q", w)
	}
	if e := eval[bool](t, ctx, `document.getElementById("errors").hidden`); !e {
		t.Errorf("errors: %s", eval[string](t, ctx, `document.getElementById("errors").textContent`))
	}
}

// openStatic opens the self-contained report page from a file, keeps its
// screenshot under name, and checks that it shows serve_phases' leaks and
// flame graph and no error.
func openStatic(t *testing.T, ctx context.Context, page []byte, name string) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "report.html")
	if err := os.WriteFile(file, page, 0o600); err != nil {
		t.Fatal(err)
	}
	settle(t, ctx, chromedp.Navigate("file://"+file))
	screenshot(t, ctx, artefacts(t), name)
	leak := eval[string](t, ctx, `document.querySelector('#summary-table td[data-k="leaked_bytes"]').textContent`)
	if !strings.Contains(strings.ReplaceAll(leak, "\u202f", ""), "(11400 B) in 7 blocks") {
		t.Errorf("leaks %q", leak)
	}
	settle(t, ctx, chromedp.Click(chromedp.ID("tab-flame")))
	screenshot(t, ctx, artefacts(t), name+"-flame")
	if got := eval[string](t, ctx, `document.getElementById("flame-total").getAttribute("data-v")`); got != "11400" {
		t.Errorf("flame total %s", got)
	}
	if e := eval[bool](t, ctx, `document.getElementById("errors").hidden`); !e {
		t.Errorf("errors: %s", eval[string](t, ctx, `document.getElementById("errors").textContent`))
	}
}

// The self-contained report opens from disk, with no server, and shows the
// leaks of the whole trace and its flame graph.
func TestStaticHTML(t *testing.T) {
	ctx := browser(t)
	path := trace(t, "serve_phases")
	x, err := query.Build(path, query.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := WriteHTML(&buf, x); err != nil {
		t.Fatal(err)
	}
	for _, ref := range []string{`src="http`, `href="http`, `src="//`, `url(http`} {
		if strings.Contains(buf.String(), ref) {
			t.Errorf("the report refers to the network: %s", ref)
		}
	}
	openStatic(t, ctx, buf.Bytes(), "static")
	// The sites and the inverted flame graph are in the file too.
	settle(t, ctx, chromedp.Click(chromedp.ID("tab-sites")))
	if top := eval[string](t, ctx, `document.querySelector("#sites-leaks tr:nth-child(2) .fn").textContent`); !strings.HasPrefix(top, "early_leak ") {
		t.Errorf("top leak %q", top)
	}
}

// The self-contained report made from the report's pass alone (no window
// index, as `report --format html` makes it) shows the same leaks, flame
// graph and sites, no error, and says that the window classes need serve.
func TestStaticHTMLWithoutIndex(t *testing.T) {
	ctx := browser(t)
	path := trace(t, "serve_phases")
	x, err := query.Open(path, query.Options{NoIndex: true})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := WriteHTML(&buf, x); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(buf.String(), `"/api/window?`) {
		t.Error("the report embeds window classes it could not have")
	}
	openStatic(t, ctx, buf.Bytes(), "static-noindex")
	if hidden := eval[bool](t, ctx, `document.getElementById("tab-classes").hidden`); !hidden {
		t.Errorf("a report without the window index offers the window classes")
	}
	settle(t, ctx, chromedp.Click(chromedp.ID("tab-sites")))
	if top := eval[string](t, ctx, `document.querySelector("#sites-leaks tr:nth-child(2) .fn").textContent`); !strings.HasPrefix(top, "early_leak ") {
		t.Errorf("top leak %q", top)
	}
}

// With --base, the Diff view shows each site's difference: temp_site made
// 30 more calls with 80 rounds than with 50.
func TestPageDiff(t *testing.T) {
	ctx := browser(t)
	x, err := query.Build(trace(t, "report_known", "80"), query.Options{})
	if err != nil {
		t.Fatal(err)
	}
	bx, err := query.Build(trace(t, "report_known", "50"), query.Options{})
	if err != nil {
		t.Fatal(err)
	}
	srv := newTestServer(t, NewWithBase(x, bx))
	settle(t, ctx, visit(srv, "/?tab=diff&cost=calls"))
	screenshot(t, ctx, artefacts(t), "diff")
	if hidden := eval[bool](t, ctx, `document.getElementById("tab-diff").hidden`); hidden {
		t.Fatal("no Diff tab with a base trace")
	}
	row := eval[string](t, ctx, `document.querySelector("#diff-table tr:nth-child(2)").textContent`)
	if !strings.Contains(row, "+30 calls") || !strings.Contains(row, "temp_site") {
		t.Errorf("first diff row %q", row)
	}
	if d := eval[string](t, ctx, `document.getElementById("diff-total").getAttribute("data-delta")`); d != "30" {
		t.Errorf("total difference %s", d)
	}
}

// The caller/callee view: with fn=main in the URL, the Functions tab
// shows what main called, each callee with the leaks of the sites through
// it as the JSON report's stacks give them; clicking a callee makes it the
// function shown, in the URL too.
func TestPageCallers(t *testing.T) {
	ctx := browser(t)
	path := trace(t, "serve_phases")
	_, srv := serveTrace(t, path)
	shots := artefacts(t)
	rep, err := report.Load(path, report.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]uint64{}
	for _, l := range rep.Document(0).Leaks {
		seen := map[string]bool{}
		for i, f := range l.Stack {
			if f.Function != "main" {
				continue
			}
			callee := "[self]"
			if i > 0 {
				callee = l.Stack[i-1].Function
			}
			if !seen[callee] {
				seen[callee] = true
				want[callee] += l.Bytes
			}
		}
	}
	if want["early_leak"] == 0 {
		t.Fatalf("main calls no early_leak in the report: %v", want)
	}
	settle(t, ctx, visit(srv, "/?tab=functions&fn=main"))
	screenshot(t, ctx, shots, "callers")
	got := eval[map[string]string](t, ctx, `Object.fromEntries([...document.querySelectorAll("#callees-table tr[data-name]")].map((r) => [r.getAttribute("data-name"), r.querySelector("td[data-v]").getAttribute("data-v")]))`)
	if len(got) != len(want) {
		t.Errorf("main's callees on the page %v, in the report %v", got, want)
	}
	for name, v := range want {
		if got[name] != strconv.FormatUint(v, 10) {
			t.Errorf("callee %s: %q on the page, %d in the report", name, got[name], v)
		}
	}
	settle(t, ctx, chromedp.Evaluate[chromedp.Void](`document.querySelector('#callees-table tr[data-name="early_leak"]').click()`))
	if title := eval[string](t, ctx, `document.getElementById("callers-title").textContent`); !strings.HasPrefix(title, "early_leak:") {
		t.Errorf("after a click on early_leak the view shows %q", title)
	}
	if loc := eval[string](t, ctx, `location.search`); !strings.Contains(loc, "fn=early_leak") {
		t.Errorf("after a click on early_leak the URL is %s", loc)
	}
	if callers := eval[string](t, ctx, `document.querySelector("#callers-table tr[data-name]").getAttribute("data-name")`); callers != "main" {
		t.Errorf("early_leak's first caller %q, want main", callers)
	}
}

// TestPageSampled: every view of a sampled trace (sqlite3 recorded with
// --sample 64KiB) is the report's estimate, scaled the same way, and says
// so: the timeline's peak (API and page) is the summary's, the flame graph
// of the peak adds up to it, the answers carry the estimate's words, the
// page says "estimated" and "not available" for temporaries and failed
// allocations (never 0), and the self-contained report of the report's
// pass alone has its flame graphs.
func TestPageSampled(t *testing.T) {
	sqlite := testutil.Tool(t, "sqlite3")
	path := filepath.Join(t.TempDir(), "sampled.hst")
	tracetest.RecordSampled(t, path, 64<<10, sqlite, ":memory:",
		"create table t(x text); insert into t select hex(randomblob(64)) from generate_series(1,100000); create index i on t(x);")
	_, srv := serveTrace(t, path)
	var sum Summary
	getJSON(t, srv.URL+"/api/summary", &sum)
	peak := sum.Summary.PeakBytes
	if sum.Trace.Estimated == "" || peak == 0 {
		t.Fatalf("summary of a sampled trace: estimated %q, peak %d", sum.Trace.Estimated, peak)
	}
	var tl Timeline
	getJSON(t, srv.URL+"/api/timeline?points=800", &tl)
	var top uint64
	for _, p := range tl.Points {
		top = max(top, p.MaxBytes)
	}
	if tl.Peak.Bytes != peak || top != peak || tl.Estimated == "" {
		t.Errorf("timeline: peak %d, largest point %d, estimated %q; the summary's peak %d", tl.Peak.Bytes, top, tl.Estimated, peak)
	}
	var fl query.Flame
	getJSON(t, srv.URL+"/api/flame?cost=peak", &fl)
	if fl.Total != peak || fl.Estimated == "" {
		t.Errorf("flame graph of the peak: total %d, estimated %q; the summary's peak %d", fl.Total, fl.Estimated, peak)
	}
	var win Window
	getJSON(t, srv.URL+"/api/window", &win)
	if win.Peak.Bytes != peak || win.Estimated == "" {
		t.Errorf("window of the whole trace: peak %d, estimated %q; the summary's %d", win.Peak.Bytes, win.Estimated, peak)
	}
	// The first screen's lists, the trees and the consumed chart are the
	// same estimates: what was live at the peak adds up to the peak.
	var tops Top
	getJSON(t, srv.URL+"/api/top", &tops)
	if tops.Peak.Total != peak || tops.PeakAt.Bytes != peak || tops.Estimated == "" || !tops.NoTemporary || len(tops.Temporary.Sites) != 0 {
		t.Errorf("top: peak list total %d at %d, estimated %q, no temporaries %v (%d listed); the summary's peak %d",
			tops.Peak.Total, tops.PeakAt.Bytes, tops.Estimated, tops.NoTemporary, len(tops.Temporary.Sites), peak)
	}
	var tr TreeAnswer
	getJSON(t, srv.URL+"/api/tree?max_nodes=50", &tr)
	if len(tr.Nodes) == 0 || tr.Nodes[0].Values[0] != peak || tr.Estimated == "" {
		t.Errorf("tree: root %+v, estimated %q; the summary's peak %d", tr.Nodes[:min(len(tr.Nodes), 1)], tr.Estimated, peak)
	}
	var cs ConsumedAnswer
	getJSON(t, srv.URL+"/api/consumed?points=800", &cs)
	var most uint64
	for _, v := range cs.Total {
		most = max(most, v)
	}
	if most != peak || cs.Estimated == "" {
		t.Errorf("consumed: largest %d, estimated %q; the summary's peak %d", most, cs.Estimated, peak)
	}

	ctx := browser(t)
	settle(t, ctx, visit(srv, "/?cost=peak"))
	screenshot(t, ctx, artefacts(t), "sampled")
	onPage := eval[string](t, ctx, `document.getElementById("timeline").getAttribute("data-peak") + " " +
		document.getElementById("timeline").getAttribute("data-top") + " " +
		document.querySelector('#summary-table td[data-k="peak_bytes"]').getAttribute("data-v")`)
	if want := fmt.Sprintf("%d %d %d", peak, peak, peak); onPage != want {
		t.Errorf("the page's timeline peak, largest point and summary peak %q, want %q", onPage, want)
	}
	for k, want := range map[string]string{"exact": "estimated", "temporary": "not available when sampled", "failed": "not available when sampled", "peak_bytes": "±"} {
		if got := eval[string](t, ctx, fmt.Sprintf(`document.querySelector('#summary-table td[data-k="%s"]').textContent`, k)); !strings.Contains(got, want) {
			t.Errorf("summary row %s: %q, want %q in it", k, got, want)
		}
	}
	// The flame graph's total (its tab's crumbs) says it is an estimate.
	settle(t, ctx, visit(srv, "/?tab=flame&cost=peak"))
	if m := eval[string](t, ctx, `document.getElementById("flame-total").textContent`); !strings.Contains(m, "estimated") {
		t.Errorf("the flame graph's total %q does not say it is an estimate", m)
	}

	// report --format html: the report's pass alone.
	y, err := query.Open(path, query.Options{NoIndex: true})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := WriteHTML(&buf, y); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "sampled.html")
	if err := os.WriteFile(file, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	settle(t, ctx, chromedp.Navigate("file://"+file+"?tab=flame&cost=peak"))
	screenshot(t, ctx, artefacts(t), "sampled-static")
	if n := eval[int](t, ctx, `Object.keys(window.HEAPSCOPE_DATA).filter((k) => k.startsWith("/api/flame")).length`); n != 10 {
		t.Errorf("the self-contained report of a sampled trace holds %d flame graphs, want 10", n)
	}
	if got := eval[string](t, ctx, `document.getElementById("flame-total").getAttribute("data-v") + " " + document.getElementById("flame-total").getAttribute("data-estimated")`); got != fmt.Sprintf("%d %s", peak, sum.Trace.Estimated) {
		t.Errorf("the self-contained report's flame graph of the peak: total and estimate %q, want %d %s", got, peak, sum.Trace.Estimated)
	}
}

// TestPageSuppressed: the page says what the default rules suppressed, as
// the report counts it: "Leaked X (Y suppressed by RULES)", the flame graph
// of the leaks and of the net growth leave the suppressed sites out and say
// how much they hold, and the window classes name the rule of each
// suppressed site.
func TestPageSuppressed(t *testing.T) {
	bin := testutil.MustBuild(t, "report_runtime", testutil.Options{CXX: true})
	path := filepath.Join(t.TempDir(), "runtime.hst")
	tracetest.Record(t, path, bin)
	x, err := query.Build(path, query.Options{Suppressions: suppress.Defaults()})
	if err != nil {
		t.Fatal(err)
	}
	srv := newTestServer(t, New(x))
	leaked, _ := x.Report.Leaked()
	sb, _, _ := x.Report.SuppressedTotal()
	if sb == 0 {
		t.Fatal("report_runtime: nothing suppressed")
	}
	var win Window
	getJSON(t, srv.URL+"/api/window?top=0", &win)
	named := 0
	for _, s := range win.Sites {
		if s.SuppressedBy != "" {
			named++
		}
	}
	if named == 0 || win.Suppressed.AIFO.Bytes+win.Suppressed.AIFI.Bytes == 0 {
		t.Errorf("window: %d sites name their rule, suppressed classes %+v", named, win.Suppressed)
	}
	var fl query.Flame
	getJSON(t, srv.URL+"/api/flame?cost=leaks", &fl)
	if fl.Total != leaked || fl.Suppressed != sb {
		t.Errorf("flame of the leaks: %d, %d suppressed; the report's %d, %d", fl.Total, fl.Suppressed, leaked, sb)
	}

	ctx := browser(t)
	settle(t, ctx, visit(srv, "/"))
	screenshot(t, ctx, artefacts(t), "suppressed")
	row := strings.ReplaceAll(eval[string](t, ctx, `document.querySelector('#summary-table td[data-k="leaked_bytes"]').textContent`), "\u202f", "")
	if !strings.Contains(row, fmt.Sprintf("(%d B)", leaked)) && !strings.HasPrefix(row, fmt.Sprintf("%d B", leaked)) || !strings.Contains(row, "suppressed by default:libstdc++-pool") {
		t.Errorf("the Leaked row %q: want %d bytes, and what default:libstdc++-pool suppressed", row, leaked)
	}
	settle(t, ctx, visit(srv, "/?tab=flame&cost=leaks"))
	if m := eval[string](t, ctx, `document.getElementById("flame-total").textContent`); !strings.Contains(m, "suppressed, not counted") ||
		eval[string](t, ctx, `document.getElementById("flame-total").getAttribute("data-v")`) != fmt.Sprint(leaked) {
		t.Errorf("the flame graph of the leaks says %q, want its total %d and what was suppressed", m, leaked)
	}
	settle(t, ctx, visit(srv, "/?tab=classes"))
	if n := eval[int](t, ctx, `document.querySelectorAll("#classes-sites .suppressed").length`); n == 0 {
		t.Error("the classes name no site's rule")
	}
}

// TestPageProcessFilter: choosing a process filters every view, the
// timeline and the summary too: on a shim that runs report_known, the
// page of the inner process shows its peak (timeline, API and page) and
// its leaks, those of `report --pid`, under a title that names it.
func TestPageProcessFilter(t *testing.T) {
	known := testutil.MustBuild(t, "report_known", testutil.Options{})
	path := filepath.Join(t.TempDir(), "shim.hst")
	tracetest.Record(t, path, testutil.MustBuild(t, "report_shim", testutil.Options{}), known)
	x, srv := serveTrace(t, path)
	inner := uint32(0)
	for _, p := range x.Report.Profile.Processes {
		if p.Exe == known {
			inner = p.PID
		}
	}
	if inner == 0 || len(x.Report.Profile.Processes) < 2 {
		t.Fatalf("the shim's trace has processes %+v", x.Report.Profile.Processes)
	}
	alone, err := report.Load(path, report.LoadOptions{Processes: analyze.Processes{PIDs: []uint32{inner}}})
	if err != nil {
		t.Fatal(err)
	}
	want := alone.Document(0).Summary
	var tl Timeline
	getJSON(t, fmt.Sprintf("%s/api/timeline?pid=%d", srv.URL, inner), &tl)
	if tl.Peak.Bytes != want.PeakBytes || tl.PID != inner {
		t.Errorf("timeline of pid %d: peak %d (pid %d), report --pid %d", inner, tl.Peak.Bytes, tl.PID, want.PeakBytes)
	}
	var sum Summary
	getJSON(t, fmt.Sprintf("%s/api/summary?pid=%d", srv.URL, inner), &sum)
	if sum.Summary.PeakBytes != want.PeakBytes || sum.Summary.LeakedBytes != want.LeakedBytes || sum.Summary.Allocations != want.Allocations {
		t.Errorf("summary of pid %d: %+v, report --pid %+v", inner, sum.Summary, want)
	}
	// The page's views of the process: its peak and its leaks, those of
	// its exited blocks included, and its blocks leave the consumed chart
	// at its exit.
	var tops Top
	getJSON(t, fmt.Sprintf("%s/api/top?pid=%d", srv.URL, inner), &tops)
	if tops.PeakAt.Bytes != want.PeakBytes || tops.Peak.Total != want.PeakBytes || tops.Leaks.Total != want.LeakedBytes {
		t.Errorf("top of pid %d: peak %d (list %d), leaks %d; report --pid %d, %d", inner, tops.PeakAt.Bytes, tops.Peak.Total, tops.Leaks.Total,
			want.PeakBytes, want.LeakedBytes)
	}
	if n := len(tl.Points); n == 0 || tl.Points[n-1].EndBytes != 0 {
		t.Errorf("timeline of pid %d: its heap at the end %+v, want 0 once it exited", inner, tl.Points[max(n-1, 0):])
	}
	var tl2 Timeline
	getJSON(t, fmt.Sprintf("%s/api/timeline?pid=%d&points=500", srv.URL, inner), &tl2)
	var cs ConsumedAnswer
	getJSON(t, fmt.Sprintf("%s/api/consumed?pid=%d&points=500", srv.URL, inner), &cs)
	var most uint64
	for i, v := range cs.Total {
		most = max(most, v)
		if i >= len(tl2.Points) || tl2.Points[i].MaxBytes != v {
			t.Fatalf("consumed of pid %d, bucket %d: %d, its timeline's %+v", inner, i, v, tl2.Points[min(i, len(tl2.Points)-1)])
		}
	}
	if most != want.PeakBytes || len(cs.Total) != len(tl2.Points) {
		t.Errorf("consumed of pid %d: largest %d in %d buckets; report --pid's peak %d, the timeline's %d buckets", inner, most, len(cs.Total), want.PeakBytes, len(tl2.Points))
	}

	ctx := browser(t)
	settle(t, ctx, visit(srv, fmt.Sprintf("/?pid=%d", inner)))
	screenshot(t, ctx, artefacts(t), "process")
	got := eval[string](t, ctx, `document.getElementById("timeline").getAttribute("data-peak") + " " +
		document.querySelector('#summary-table td[data-k="peak_bytes"]').getAttribute("data-v") + " " +
		document.querySelector('#summary-table td[data-k="leaked_bytes"]').getAttribute("data-v") + " " +
		document.getElementById("summary-title").textContent`)
	if w := fmt.Sprintf("%d %d %d Summary of process %d", want.PeakBytes, want.PeakBytes, want.LeakedBytes, inner); got != w {
		t.Errorf("the page of pid %d: %q, want %q", inner, got, w)
	}
	// The inner process is not heapscope's child: its status is not known,
	// not -1.
	if pt := eval[string](t, ctx, `document.getElementById("processes").textContent`); strings.Contains(pt, "status -1") || !strings.Contains(pt, "status unknown (not heapscope's child)") {
		t.Errorf("the processes table says %q", pt)
	}
	// Back to every process: the whole trace's again.
	settle(t, ctx, chromedp.SetValue(chromedp.ID("pid"), "0"), chromedp.Evaluate[chromedp.Void](`document.getElementById("pid").dispatchEvent(new Event("change"))`))
	if got := eval[string](t, ctx, `document.getElementById("summary-title").textContent + " " + document.getElementById("timeline").getAttribute("data-peak")`); got != fmt.Sprintf("Summary of the whole trace %d", x.Report.Profile.Peak.Bytes) {
		t.Errorf("back to every process: %q", got)
	}
}
