package web

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/heapscope/heapscope/query"
)

// staticMaxNodes bounds each flame graph of a self-contained report.
const staticMaxNodes = 2000

// staticPaths are the answers a self-contained report holds: those the page
// asks for in its views of the whole trace (each path as the page's api()
// writes it), for the costs of its flame graphs, top-down and inverted.
func staticPaths() []string {
	paths := []string{
		"/api/summary",
		"/api/timeline?points=1000",
		"/api/memory?points=1000",
		"/api/top?top=10",
		"/api/window?top=100",
		"/api/sites?top=50",
		"/api/histogram",
		"/api/consumed?points=1000&top=10",
		"/api/leaks?top=10", // leaks.ts's leaksPath
		"/api/rss",
	}
	for _, inv := range []string{"0", "1"} {
		paths = append(paths, fmt.Sprintf("/api/tree?cost=peak&invert=%s&min_share=0.001&max_nodes=%d", inv, staticMaxNodes))
	}
	for _, c := range []string{"leaks", "peak", "bytes", "calls", "temporary"} {
		paths = append(paths, fmt.Sprintf("/api/functions?cost=%s&top=500", c))
		for _, inv := range []string{"0", "1"} {
			paths = append(paths, fmt.Sprintf("/api/flame?cost=%s&invert=%s&min_share=0.001&max_nodes=%d", c, inv, staticMaxNodes))
		}
	}
	return paths
}

// WriteHTML writes one self-contained HTML file for x: the page, its script
// and style inlined, and the API's answers for the whole trace embedded, so
// that it opens from disk with no server and no network. It shows the
// overview (the summary and the top sites by each cost), the timeline with
// the resident memory, flame graphs and trees of the main costs, the
// functions, the sites lists, the consumed chart and the histograms of the
// whole trace, and offers nothing else: choosing a window, an instant, a
// process or a filter needs `heapscope serve`. An x opened with
// query.Options.NoIndex gives the report without the window classes, the
// consumed chart and the lifetimes (its sizes are the report's
// histogram), from the report's pass alone.
func WriteHTML(w io.Writer, x *query.Index) error {
	s := New(x)
	data := map[string]json.RawMessage{}
	for _, p := range staticPaths() {
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, p, nil))
		if rec.Code != http.StatusOK {
			if rec.Code == http.StatusUnprocessableEntity {
				// An aggregate trace, or one opened without its windowed
				// index (query.Options.NoIndex): the page shows what the
				// report lacks.
				continue
			}
			return fmt.Errorf("web: %s: %s", p, strings.TrimSpace(rec.Body.String()))
		}
		data[p] = json.RawMessage(bytes.TrimSpace(rec.Body.Bytes()))
	}
	js, err := json.Marshal(data) // escapes <, > and &: safe inside <script>
	if err != nil {
		return err
	}
	page, err := assets.ReadFile("ui/index.html")
	if err != nil {
		return err
	}
	css, err := assets.ReadFile("ui/style.css")
	if err != nil {
		return err
	}
	app, err := assets.ReadFile("ui/dist/app.js")
	if err != nil {
		return err
	}
	safe := func(b []byte) string { return strings.ReplaceAll(string(b), "</", `<\/`) }
	out := strings.Replace(string(page), `<link rel="stylesheet" href="style.css">`, "<style>\n"+strings.ReplaceAll(string(css), "</", "")+"</style>", 1)
	out = strings.Replace(out, `<script src="app.js"></script>`,
		"<script>window.HEAPSCOPE_DATA = "+string(js)+";</script>\n<script>"+safe(app)+"</script>", 1)
	_, err = io.WriteString(w, out)
	return err
}
