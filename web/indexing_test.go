package web

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/heapscope/heapscope/query"
	"github.com/heapscope/heapscope/report"
)

// Before its windowed index is built, serve answers the first page from
// the report's pass: the summary, a coarse timeline with the peak, and the
// flame graph of the leaks, all the report's numbers; the page draws them
// with an "indexing" note, and draws the window once the index is built.
func TestPageWhileIndexing(t *testing.T) {
	path := trace(t, "serve_phases")
	rep, err := report.Load(path, report.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := rep.Document(0).Summary
	hold := make(chan struct{})
	release := sync.OnceFunc(func() { close(hold) })
	defer release()
	x, err := query.Open(path, query.Options{IndexAfter: hold})
	if err != nil {
		t.Fatal(err)
	}
	srv := newTestServer(t, New(x))

	var sum Summary
	getJSON(t, srv.URL+"/api/summary", &sum)
	if !sum.Indexing || sum.Summary.LeakedBytes != want.LeakedBytes {
		t.Errorf("summary while indexing: indexing %v, leaks %d (the report's %d)", sum.Indexing, sum.Summary.LeakedBytes, want.LeakedBytes)
	}
	var st IndexState
	getJSON(t, srv.URL+"/api/index", &st)
	if st.Ready {
		t.Fatal("the index is ready before it was built")
	}
	var fl query.Flame
	getJSON(t, srv.URL+"/api/flame?cost=leaks", &fl)
	if fl.Total != want.LeakedBytes {
		t.Errorf("flame graph of the leaks while indexing: %d, the report's %d", fl.Total, want.LeakedBytes)
	}
	var tl Timeline
	getJSON(t, srv.URL+"/api/timeline?points=200", &tl)
	var top uint64
	for _, p := range tl.Points {
		top = max(top, p.MaxBytes)
	}
	if !tl.Coarse || tl.Peak.Bytes != want.PeakBytes || top != want.PeakBytes || len(tl.Points) == 0 || len(tl.Points) > 200 {
		t.Errorf("timeline while indexing: coarse %v, peak %d, largest point %d, %d points; the report's peak %d",
			tl.Coarse, tl.Peak.Bytes, top, len(tl.Points), want.PeakBytes)
	}

	ctx := browser(t)
	shots := artefacts(t)
	do(t, ctx, visit(srv, "/?tab=flame"))
	// The flame graph's total appears while the window waits for the index.
	var shown string
	for end := time.Now().Add(time.Minute); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		shown = eval[string](t, ctx, `(document.getElementById("flame-total") || {textContent: ""}).textContent`)
		if lastNumber(shown) == want.LeakedBytes {
			break
		}
	}
	if lastNumber(shown) != want.LeakedBytes {
		t.Fatalf("while indexing the page's flame graph shows %q, the report's leaks are %d", shown, want.LeakedBytes)
	}
	if eval[bool](t, ctx, `document.getElementById("indexing").hidden`) {
		t.Error("no indexing note while the index is built")
	}
	if eval[bool](t, ctx, `document.body.hasAttribute("data-ready")`) {
		t.Error("the page says it is complete before the window was answered")
	}
	screenshot(t, ctx, shots, "indexing")

	release()
	do(t, ctx, chromedp.WaitReady(chromedp.CSS(`body[data-ready]`)))
	if !eval[bool](t, ctx, `document.getElementById("indexing").hidden`) {
		t.Error("the indexing note stays once the index is built")
	}
	settle(t, ctx, chromedp.Click(chromedp.ID("tab-classes")))
	// The process exited with its leaks: AIFO is what was live then, and
	// the rest left the heap at the exit.
	aifo := eval[string](t, ctx, `document.querySelector("#class-aifo td:nth-of-type(1)").getAttribute("data-v") + "+" +
		document.querySelector("#class-aifi td:nth-of-type(3)").getAttribute("data-exited")`)
	if aifo != fmt.Sprintf("0+%d", want.LeakedBytes) {
		t.Errorf("the whole trace's AIFO + what the exit took out on the page %s, the report's leaks %d", aifo, want.LeakedBytes)
	}
	if s := eval[string](t, ctx, `document.getElementById("errors").textContent`); strings.TrimSpace(s) != "" && !eval[bool](t, ctx, `document.getElementById("errors").hidden`) {
		t.Errorf("errors shown: %s", s)
	}
	screenshot(t, ctx, shots, "indexed")
}
