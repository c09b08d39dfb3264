package web

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/heapscope/heapscope"
	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/internal/testutil"
	"github.com/heapscope/heapscope/query"
	"github.com/heapscope/heapscope/report"
	"github.com/heapscope/heapscope/suppress"
)

// plantedSums reads scan_planted's "block LABEL ADDR SIZE CLASS" lines up
// to "ready PID" and returns the bytes and blocks it planted in each of
// Memcheck's classes: the program's own truth.
func plantedSums(t *testing.T, r *bufio.Reader) (map[event.Class][2]uint64, int) {
	t.Helper()
	sums := map[event.Class][2]uint64{}
	for {
		l, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("reading scan_planted: %v (%q)", err, l)
		}
		f := strings.Fields(l)
		if len(f) == 2 && f[0] == "ready" {
			pid, _ := strconv.Atoi(f[1])
			return sums, pid
		}
		if len(f) < 5 || f[0] != "block" {
			continue
		}
		c, err := event.ParseClass(f[len(f)-1])
		if err != nil {
			t.Fatal(err)
		}
		n, _ := strconv.ParseUint(f[len(f)-2], 10, 64)
		s := sums[c]
		sums[c] = [2]uint64{s[0] + n, s[1] + 1}
	}
}

// startPlanted launches scan_planted in a session named name with props,
// as `heapscope run` does, and waits until its blocks are planted; go
// lets it end.
func startPlanted(t *testing.T, name string, props heapscope.Properties) (sums map[event.Class][2]uint64, pid int, s *heapscope.Session, goOn func()) {
	t.Helper()
	cmd := exec.Command(testutil.MustBuild(t, "scan_planted", testutil.Options{}))
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	s, err = heapscope.Launch(name, props, cmd)
	if err != nil {
		t.Fatal(err)
	}
	done := false
	goOn = func() {
		if !done {
			done = true
			io.WriteString(in, "go\n")
			io.Copy(io.Discard, out)
			s.Wait()
		}
	}
	t.Cleanup(goOn)
	sums, pid = plantedSums(t, bufio.NewReader(out))
	return sums, pid, s, goOn
}

// num reads an attribute of the element sel as a number (0 when absent).
func num(t *testing.T, ctx context.Context, sel, name string) uint64 {
	t.Helper()
	n, _ := strconv.ParseUint(attr(t, ctx, sel, name), 10, 64)
	return n
}

// sumOf adds up attribute name of every element sel matches.
func sumOf(t *testing.T, ctx context.Context, sel, name string) uint64 {
	t.Helper()
	return uint64(eval[float64](t, ctx, fmt.Sprintf(`[...document.querySelectorAll(%q)].reduce((a, e) => a + Number(e.getAttribute(%q)), 0)`, sel, name)))
}

// The page of a trace `heapscope run` made of scan_planted, which its leak
// check classified as it exited: the overview shows the classes as the
// JSON report has them (LEAKS definitely + indirectly lost, possibly lost
// next and marked, STILL REACHABLE apart with its totals), and the
// program's own planted blocks are in the classes it planted them in. A
// trace without a check says so.
func TestPageLeakVerdict(t *testing.T) {
	ctx := browser(t)
	path := filepath.Join(t.TempDir(), "planted.hst")
	sums, _, _, goOn := startPlanted(t, fmt.Sprintf("web-verdict-%d", time.Now().UnixNano()), heapscope.Properties{File: path})
	goOn()
	// As `heapscope serve` and `report` read it: the C library's own blocks
	// (suppress.Defaults) are not the program's leaks.
	rep, err := report.Load(path, report.LoadOptions{Suppressions: suppress.Defaults()})
	if err != nil {
		t.Fatal(err)
	}
	want := rep.Document(0)
	lc := want.LeakCheck
	if lc == nil {
		t.Fatal("the trace holds no leak check: heapscope run checks at exit by default")
	}
	x, err := query.Build(path, query.Options{Suppressions: suppress.Defaults()})
	if err != nil {
		t.Fatal(err)
	}
	srv := newTestServer(t, New(x))
	shots := artefacts(t)
	viewport(t, ctx, 1280, 1000)
	settle(t, ctx, visit(srv, "/"))
	screenshot(t, ctx, shots, "leak-verdict")
	noErrors(t, ctx, "overview")

	// Memcheck's summary, each class the JSON report's.
	summaryIsReport := func(where string) {
		t.Helper()
		for _, c := range []struct {
			class string
			a     report.JSONAmount
		}{
			{"lost", lc.Lost}, {"definitely_lost", lc.DefinitelyLost}, {"indirectly_lost", lc.IndirectlyLost},
			{"possibly_lost", lc.PossiblyLost}, {"still_reachable", lc.StillReachable},
			{"live", report.JSONAmount{Bytes: want.Summary.LeakedBytes, Blocks: want.Summary.LeakedBlocks}},
		} {
			row := fmt.Sprintf(`#leak-summary tr[data-class=%q]`, c.class)
			if b, n := num(t, ctx, row, "data-bytes"), num(t, ctx, row, "data-blocks"); b != c.a.Bytes || n != c.a.Blocks {
				t.Errorf("%s: %s on the page: %d bytes in %d blocks, the report's %d in %d", where, c.class, b, n, c.a.Bytes, c.a.Blocks)
			}
		}
	}
	summaryIsReport("serve")
	// The program's own truth: what it planted lost is lost, in its class
	// (still reachable also holds blocks of the C library's).
	for _, c := range []struct {
		class string
		k     event.Class
	}{{"definitely_lost", event.ClassDefinite}, {"indirectly_lost", event.ClassIndirect}, {"possibly_lost", event.ClassPossible}} {
		row := fmt.Sprintf(`#leak-summary tr[data-class=%q]`, c.class)
		if b, n := num(t, ctx, row, "data-bytes"), num(t, ctx, row, "data-blocks"); b != sums[c.k][0] || n != sums[c.k][1] {
			t.Errorf("%s on the page: %d bytes in %d blocks; scan_planted planted %d in %d", c.class, b, n, sums[c.k][0], sums[c.k][1])
		}
	}
	if r := num(t, ctx, `#leak-summary tr[data-class="still_reachable"]`, "data-bytes"); r < sums[event.ClassReachable][0] {
		t.Errorf("still reachable %d bytes, less than the %d scan_planted holds", r, sums[event.ClassReachable][0])
	}
	if s := eval[string](t, ctx, `document.getElementById("leak-scans").textContent`); !strings.Contains(s, "at exit") || !strings.Contains(s, "Memcheck's rules") {
		t.Errorf("the scans: %q", s)
	}

	// The headline and the summary table.
	if k, h := attr(t, ctx, "#headline", "data-kind"), eval[string](t, ctx, `document.getElementById("headline").textContent`); k != "leaks" ||
		!strings.Contains(h, "definitely and indirectly lost") || !strings.Contains(h, "possibly lost") {
		t.Errorf("headline %q (%s)", h, k)
	}
	for key, v := range map[string]uint64{"lost_bytes": lc.Lost.Bytes, "possibly_lost_bytes": lc.PossiblyLost.Bytes,
		"still_reachable_bytes": lc.StillReachable.Bytes, "leaked_bytes": want.Summary.LeakedBytes} {
		if got := num(t, ctx, fmt.Sprintf(`#summary-table td[data-k=%q]`, key), "data-v"); got != v {
			t.Errorf("summary %s: %d, the report's %d", key, got, v)
		}
	}

	// The Leaks list: the lost sites, then the possibly lost ones, marked;
	// each class's sites add up to the report's class (fewer sites than
	// the list holds).
	var lostSites, possibleSites, reachSites int
	var top uint64
	for _, s := range rep.Sites {
		if l := s.Lost(); l.Blocks > 0 {
			lostSites++
			top = max(top, l.Bytes)
		}
		if s.Classes[event.ClassPossible].Blocks > 0 {
			possibleSites++
		}
		if s.Classes[event.ClassReachable].Blocks > 0 {
			reachSites++
		}
	}
	if lostSites > 10 || possibleSites > 10 || reachSites > 10 || lostSites == 0 || possibleSites == 0 {
		t.Fatalf("scan_planted's sites: %d lost, %d possibly lost, %d still reachable", lostSites, possibleSites, reachSites)
	}
	if got := eval[string](t, ctx, `document.getElementById("top-leaks-title").textContent`); got != "Leaks (definitely + indirectly lost)" {
		t.Errorf("the Leaks list is %q", got)
	}
	if got := num(t, ctx, `#top-leaks tr[data-v]`, "data-v"); got != top || attr(t, ctx, `#top-leaks tr[data-v]`, "data-class") != "lost" {
		t.Errorf("the Leaks list's first row: %d bytes, the largest lost site %d", got, top)
	}
	for _, c := range []struct {
		class string
		n     int
		bytes uint64
	}{{"lost", lostSites, lc.Lost.Bytes}, {"possibly_lost", possibleSites, lc.PossiblyLost.Bytes}} {
		sel := fmt.Sprintf(`#top-leaks tr[data-class=%q]`, c.class)
		if n := eval[int](t, ctx, fmt.Sprintf(`document.querySelectorAll(%q).length`, sel)); n != c.n {
			t.Errorf("the Leaks list has %d %s sites, the report %d", n, c.class, c.n)
		}
		if got := sumOf(t, ctx, sel, "data-v"); got != c.bytes {
			t.Errorf("the Leaks list's %s sites: %d bytes, the report's %d", c.class, got, c.bytes)
		}
	}
	if marks := eval[int](t, ctx, `document.querySelectorAll('#top-leaks tr[data-class="possibly_lost"] .mark.possible').length`); marks != possibleSites {
		t.Errorf("%d possibly lost rows marked, of %d", marks, possibleSites)
	}
	// Possibly lost comes after every lost site.
	if !eval[bool](t, ctx, `(() => { const rs = [...document.querySelectorAll("#top-leaks tr[data-class]")].map((r) => r.getAttribute("data-class")); return rs.lastIndexOf("lost") < rs.indexOf("possibly_lost"); })()`) {
		t.Error("possibly lost sites before lost ones")
	}
	// STILL REACHABLE, its own section.
	if got := sumOf(t, ctx, `#leak-list-still_reachable tr[data-v]`, "data-v"); got != lc.StillReachable.Bytes {
		t.Errorf("the still reachable sites: %d bytes, the report's %d", got, lc.StillReachable.Bytes)
	}

	// The Sites tab names each site's classes.
	settle(t, ctx, chromedp.Click(chromedp.ID("tab-sites")))
	if s := eval[string](t, ctx, `document.querySelector("#sites-leaks").textContent`); !strings.Contains(s, "definitely lost") || !strings.Contains(s, "still reachable") {
		t.Errorf("the Sites tab's leaks name no class: %.300s", s)
	}

	// The self-contained report (report --format html) shows them too.
	var page bytes.Buffer
	if err := WriteHTML(&page, x); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "report.html")
	if err := os.WriteFile(file, page.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	settle(t, ctx, chromedp.Navigate("file://"+file))
	noErrors(t, ctx, "static report")
	summaryIsReport("static report")
	if got := sumOf(t, ctx, `#top-leaks tr[data-class="lost"]`, "data-v"); got != lc.Lost.Bytes {
		t.Errorf("static report: the Leaks list's lost sites: %d bytes, the report's %d", got, lc.Lost.Bytes)
	}

	// A trace without a leak check says so, and its Leaks are every block
	// live at the end.
	_, plain := serveTrace(t, trace(t, "serve_phases"))
	settle(t, ctx, visit(plain, "/"))
	noErrors(t, ctx, "no check")
	if s := eval[string](t, ctx, `document.getElementById("leak-verdict").textContent`); !strings.Contains(s, "no leak check in this trace: live at the end") {
		t.Errorf("a trace without a check: %q", s)
	}
	if got := eval[string](t, ctx, `document.getElementById("top-leaks-title").textContent`); !strings.Contains(got, "no leak check") {
		t.Errorf("the Leaks list of a trace without a check is %q", got)
	}
	if b := eval[bool](t, ctx, `document.getElementById("check-leaks").hidden`); !b {
		t.Error("a trace file has a Check leaks now button")
	}
}

// TestPageCheckLeaksNow: serve --session of scan_planted running (no
// check at exit): "Check leaks now" POSTs /api/leaks through the guard,
// shows the check (its pause, classes, top sites per class), and the trace,
// indexed again, shows the verdict in the overview.
func TestPageCheckLeaksNow(t *testing.T) {
	ctx := browser(t)
	name := fmt.Sprintf("web-check-%d", time.Now().UnixNano())
	props := heapscope.Properties{File: filepath.Join(t.TempDir(), "l.hst"), FlushInterval: 100 * time.Millisecond, LeakCheck: heapscope.LeakCheckOff}
	sums, pid, _, _ := startPlanted(t, name, props)
	live, err := NewLive(name, query.Options{}, 200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	lctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go live.Run(lctx)
	srv := newTestServer(t, live)
	shots := artefacts(t)
	viewport(t, ctx, 1280, 1000)
	settle(t, ctx, visit(srv, "/"))
	do(t, ctx, chromedp.WaitVisible(chromedp.ID("check-leaks")))
	if s := eval[string](t, ctx, `document.getElementById("leak-verdict").textContent`); !strings.Contains(s, "no leak check in this trace") {
		t.Errorf("before the check: %q", s)
	}
	do(t, ctx, chromedp.Click(chromedp.ID("check-leaks")))
	do(t, ctx, chromedp.WaitReady(chromedp.CSS(`#leak-check-result[data-state="done"], #leak-check-result[data-state="error"]`)))
	if st := attr(t, ctx, "#leak-check-result", "data-state"); st != "done" {
		t.Fatalf("the check: %s", eval[string](t, ctx, `document.getElementById("leak-check-result").textContent`))
	}
	screenshot(t, ctx, shots, "check-leaks-now")
	p := fmt.Sprintf(`#leak-check-result .check[data-pid="%d"]`, pid)
	if paused := num(t, ctx, p+" .check-head", "data-paused"); paused == 0 {
		t.Errorf("no pause shown: %q", eval[string](t, ctx, `document.getElementById("leak-check-result").textContent`))
	}
	// When, from the trace's start: within the minute the test takes.
	if at := num(t, ctx, p+" .check-head", "data-t"); at == 0 || at > 60e9 {
		t.Errorf("checked at %d ns from the trace's start", at)
	}
	if h := eval[string](t, ctx, `document.querySelector(`+strconv.Quote(p+" .check-head")+`).textContent`); !strings.Contains(h, "was stopped") || !strings.Contains(h, "Memcheck's rules") {
		t.Errorf("check head %q", h)
	}
	// The check is the session's, with no suppressions: the C library's
	// thread blocks (held through interior pointers) are possibly lost
	// beside the program's.
	for _, c := range []struct {
		class string
		k     event.Class
		exact bool
	}{{"definitely_lost", event.ClassDefinite, true}, {"indirectly_lost", event.ClassIndirect, true}, {"possibly_lost", event.ClassPossible, false}} {
		row := fmt.Sprintf(`%s tr[data-class=%q]`, p, c.class)
		b, n := num(t, ctx, row, "data-bytes"), num(t, ctx, row, "data-blocks")
		if c.exact && (b != sums[c.k][0] || n != sums[c.k][1]) || b < sums[c.k][0] || n < sums[c.k][1] {
			t.Errorf("the check's %s: %d bytes in %d blocks; scan_planted planted %d in %d", c.class, b, n, sums[c.k][0], sums[c.k][1])
		}
	}
	// Top sites per class: plant's definitely lost blocks among them.
	defs := fmt.Sprintf(`#check-%d-definite`, pid)
	if got := sumOf(t, ctx, defs+" tr[data-v]", "data-v"); got != sums[event.ClassDefinite][0] {
		t.Errorf("the definitely lost sites: %d bytes, planted %d", got, sums[event.ClassDefinite][0])
	}
	if s := eval[string](t, ctx, `document.querySelector(`+strconv.Quote(defs)+`).textContent`); !strings.Contains(s, "plant") {
		t.Errorf("the definitely lost sites: %.300s", s)
	}
	if n := eval[int](t, ctx, fmt.Sprintf(`document.querySelectorAll("#check-%d-reachable tr[data-v]").length`, pid)); n == 0 {
		t.Error("no still reachable site in the check")
	}

	// The verdict is in the trace: once indexed again, the overview's
	// classes are the trace's.
	do(t, ctx, chromedp.WaitReady(chromedp.CSS(`#leak-verdict[data-checked="true"]`)), chromedp.WaitReady(chromedp.CSS(`#summary-table td[data-k="lost_bytes"]`)))
	settle(t, ctx, chromedp.Evaluate[chromedp.Void](`document.getElementById("tab-overview").click()`))
	var v TraceLeaks
	getJSON(t, srv.URL+"/api/leaks", &v)
	if v.LeakCheck == nil {
		t.Fatal("GET /api/leaks after the check: no verdict")
	}
	if b := num(t, ctx, `#leak-summary tr[data-class="definitely_lost"]`, "data-bytes"); b != v.LeakCheck.DefinitelyLost.Bytes || b != sums[event.ClassDefinite][0] {
		t.Errorf("the trace's definitely lost on the page %d, GET /api/leaks %d, planted %d", b, v.LeakCheck.DefinitelyLost.Bytes, sums[event.ClassDefinite][0])
	}
	if b := num(t, ctx, `#summary-table td[data-k="lost_bytes"]`, "data-v"); b != v.LeakCheck.Lost.Bytes {
		t.Errorf("the summary's lost %d, GET /api/leaks %d", b, v.LeakCheck.Lost.Bytes)
	}
	screenshot(t, ctx, shots, "check-leaks-verdict")
	noErrors(t, ctx, "after the check")
}

// TestPageRSS: the page of a `heapscope snapshot` of census_known explains
// its RSS as the JSON report does: each part, measured or estimated, and
// the parts adding up to the RSS shown. A trace without a census says it
// has none.
func TestPageRSS(t *testing.T) {
	ctx := browser(t)
	pid := startKnown(t)
	path := filepath.Join(t.TempDir(), "snap.hst")
	if _, err := heapscope.Snapshot(pid, heapscope.SnapshotOptions{File: path}); err != nil {
		t.Fatal(err)
	}
	rep, err := report.Load(path, report.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, res := rep.CensusJSON()
	if len(res) != 1 || len(res[0].Parts) < 5 {
		t.Fatalf("the snapshot's resident memory: %+v", res)
	}
	want := res[0]
	_, srv := serveTrace(t, path)
	shots := artefacts(t)
	viewport(t, ctx, 1280, 1000)
	settle(t, ctx, visit(srv, "/"))
	noErrors(t, ctx, "snapshot")
	do(t, ctx, chromedp.Evaluate[chromedp.Void](`document.getElementById("rss-panel").scrollIntoView()`))
	shot(t, ctx, shots, "rss-explained")
	box := fmt.Sprintf(`#rss-panel .rss[data-pid="%d"]`, want.PID)
	shown := num(t, ctx, box, "data-rss")
	if shown != want.RSS {
		t.Errorf("RSS shown %d, the report's %d", shown, want.RSS)
	}
	if h := eval[string](t, ctx, `document.querySelector(`+strconv.Quote(box+" .rss-head")+`).textContent`); !strings.Contains(strings.ReplaceAll(h, "\u202f", ""), fmt.Sprintf("(%d B)", want.RSS)) {
		t.Errorf("the RSS line %q lacks %d B", h, want.RSS)
	}
	var sum uint64
	for _, p := range want.Parts {
		row := fmt.Sprintf(`%s tr[data-part=%q]`, box, p.Name)
		if got := num(t, ctx, row, "data-rss"); got != p.RSS {
			t.Errorf("part %q: %d on the page, the report's %d", p.Name, got, p.RSS)
		}
		how := eval[string](t, ctx, `document.querySelector(`+strconv.Quote(row+" td:last-child")+`).textContent`)
		if word := map[bool]string{true: "measured", false: "estimated"}[p.Measured]; !strings.HasPrefix(how, word) {
			t.Errorf("part %q: %q, the report says %s", p.Name, how, word)
		}
		sum += p.RSS
	}
	if n := eval[int](t, ctx, `document.querySelectorAll(`+strconv.Quote(box+" tr[data-part]")+`).length`); n != len(want.Parts) {
		t.Errorf("%d parts on the page, %d in the report", n, len(want.Parts))
	}
	// The parts add up to the RSS shown: on the page, and in smaps' count.
	onPage := sumOf(t, ctx, box+" tr[data-part]", "data-rss")
	if onPage != shown || num(t, ctx, box+" tr.total", "data-sum") != shown || sum != want.RSS {
		t.Errorf("the parts add up to %d on the page (total row %d), the RSS shown is %d", onPage, num(t, ctx, box+" tr.total", "data-sum"), shown)
	}
	if s := eval[string](t, ctx, `document.querySelector(`+strconv.Quote(box+" .notes")+`).textContent`); !strings.Contains(s, "The parts add up to the RSS") {
		t.Errorf("notes %q", s)
	}

	_, plain := serveTrace(t, trace(t, "serve_phases"))
	settle(t, ctx, visit(plain, "/"))
	if s := eval[string](t, ctx, `document.getElementById("rss-panel").textContent`); !strings.Contains(s, "no census in this trace") {
		t.Errorf("a trace without a census: %q", s)
	}
}

// startKnown starts census_known and waits until its heap is made.
func startKnown(t *testing.T) int {
	t.Helper()
	cmd := exec.Command(testutil.MustBuild(t, "census_known", testutil.Options{CXX: true}))
	in, out := testutil.StartPiped(t, cmd)
	t.Cleanup(func() { in.Close(); cmd.Wait() })
	rd := bufio.NewReader(out)
	for {
		l, err := rd.ReadString('\n')
		if err != nil {
			t.Fatalf("census_known: %v", err)
		}
		if strings.TrimSpace(l) == "ready" {
			return cmd.Process.Pid
		}
	}
}

// serveAttached attaches a session to pid with props (heapscope attach)
// and serves it as serve --session does.
func serveAttached(t *testing.T, pid int, props heapscope.Properties) *testServer {
	t.Helper()
	name := fmt.Sprintf("web-attach-%d-%d", pid, time.Now().UnixNano())
	props.File = filepath.Join(t.TempDir(), "a.hst")
	props.FlushInterval = 100 * time.Millisecond
	s, err := heapscope.Start(name, props, []int{pid})
	testutil.SkipWithoutEBPF(t, err)
	t.Cleanup(func() { s.Stop() })
	live, err := NewLive(name, query.Options{}, 200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	lctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go live.Run(lctx)
	return newTestServer(t, live)
}

// TestPageAttachedSession: serve --session of a session attached to
// census_known: the RSS panel explains the process's RSS from the census
// at the attach (the parts adding up to the RSS shown, as /api/rss says),
// and Check leaks now checks it; attached without a census, the check says
// that the blocks from before the attach are not known.
func TestPageAttachedSession(t *testing.T) {
	ctx := browser(t)
	shots := artefacts(t)
	viewport(t, ctx, 1280, 1000)
	pid := startKnown(t)
	srv := serveAttached(t, pid, heapscope.Properties{})
	settle(t, ctx, visit(srv, "/"))
	noErrors(t, ctx, "attached")
	var rss RSS
	getJSON(t, srv.URL+"/api/rss", &rss)
	if len(rss.Resident) != 1 || len(rss.Resident[0].Parts) < 5 {
		t.Fatalf("/api/rss of the attached session: %+v", rss)
	}
	box := fmt.Sprintf(`#rss-panel .rss[data-pid="%d"]`, pid)
	shown := num(t, ctx, box, "data-rss")
	if shown != rss.Resident[0].RSS || sumOf(t, ctx, box+" tr[data-part]", "data-rss") != shown {
		t.Errorf("RSS shown %d (the API's %d), its parts on the page add up to %d", shown, rss.Resident[0].RSS, sumOf(t, ctx, box+" tr[data-part]", "data-rss"))
	}
	for _, p := range rss.Resident[0].Parts {
		if got := attr(t, ctx, fmt.Sprintf(`%s tr[data-part=%q]`, box, p.Name), "data-measured"); got != strconv.FormatBool(p.Measured) {
			t.Errorf("part %q: measured %s on the page, %v in the API", p.Name, got, p.Measured)
		}
	}
	check := func(where string) string {
		t.Helper()
		do(t, ctx, chromedp.WaitVisible(chromedp.ID("check-leaks")), chromedp.Click(chromedp.ID("check-leaks")))
		do(t, ctx, chromedp.WaitReady(chromedp.CSS(`#leak-check-result[data-state="done"], #leak-check-result[data-state="error"]`)))
		text := eval[string](t, ctx, `document.getElementById("leak-check-result").textContent`)
		if attr(t, ctx, "#leak-check-result", "data-state") != "done" || num(t, ctx, fmt.Sprintf(`.check[data-pid="%d"] .check-head`, pid), "data-paused") == 0 {
			t.Fatalf("%s: the check: %s", where, text)
		}
		return text
	}
	if text := check("with a census"); strings.Contains(text, "partial") || strings.Contains(text, "are not known") {
		t.Errorf("with a census the check knows every block: %s", text)
	}
	screenshot(t, ctx, shots, "attached-session")

	pid = startKnown(t)
	srv = serveAttached(t, pid, heapscope.Properties{NoCensus: true})
	settle(t, ctx, visit(srv, "/"))
	if s := eval[string](t, ctx, `document.getElementById("rss-panel").textContent`); !strings.Contains(s, "no census in this trace") {
		t.Errorf("attached with no census: %q", s)
	}
	text := check("with no census")
	if !strings.Contains(text, "partial") || !strings.Contains(eval[string](t, ctx, `document.querySelector("#leak-check-result .check-notes").textContent`), "are not known") {
		t.Errorf("without a census the check must say the blocks from before the attach are not known: %s", text)
	}
	screenshot(t, ctx, shots, "attached-no-census")
}
