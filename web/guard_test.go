package web

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/heapscope/heapscope/report"
)

// rawGet sends a GET of path to addr with exactly these header lines (Host
// among them, or none) and returns the status.
func rawGet(t *testing.T, addr, path string, header ...string) int {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\n%s\r\nConnection: close\r\n\r\n", path, strings.Join(append(header, ""), "\r\n"))
	r, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("GET %s %q: %v", path, header, err)
	}
	r.Body.Close()
	return r.StatusCode
}

// counting counts the requests that reach h.
type counting struct {
	h http.Handler
	n atomic.Int64

	mu   sync.Mutex
	from []string // each request's Host and Referer, "host referer"
}

func (c *counting) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c.n.Add(1)
	c.mu.Lock()
	c.from = append(c.from, r.Host+" "+r.Referer())
	c.mu.Unlock()
	c.h.ServeHTTP(w, r)
}

// by counts the requests that reached the handler whose Host or Referer
// contains s: those of one page, where a late request of the page before
// (the machine loaded) may come after a count was read.
func (c *counting) by(s string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, f := range c.from {
		if strings.Contains(f, s) {
			n++
		}
	}
	return n
}

// The server answers only with its token: the page, its script and every
// /api/ path are 401 without it, 200 with the cookie the URL's token is
// traded for (HttpOnly, SameSite=Strict, named with the port) or with the
// token as a bearer; a wrong token or another port's cookie gets nothing.
// Issue 27 #1: anyone who found the port read root's trace.
func TestGuardNeedsToken(t *testing.T) {
	x, _ := serveTrace(t, trace(t, "report_known"))
	inner := &counting{h: New(x)}
	srv := newTestServer(t, inner)
	for _, p := range []string{"/", "/app.js", "/style.css", "/api/summary", "/api/sites?top=5", "/api/export?format=pprof", "/api/index?wait=1", "/api/live"} {
		r, err := http.Get(srv.URL + p)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(r.Body)
		r.Body.Close()
		if r.StatusCode != http.StatusUnauthorized || strings.Contains(string(b), "leak") {
			t.Errorf("GET %s without the token: %s, %.80q", p, r.Status, b)
		}
	}
	if n := inner.n.Load(); n != 0 {
		t.Errorf("%d requests without the token reached the server", n)
	}
	if c := rawGet(t, srv.Listener.Addr().String(), "/?token=wrong", "Host: "+srv.Listener.Addr().String()); c != http.StatusForbidden {
		t.Errorf("a wrong token: %d", c)
	}
	if c := rawGet(t, srv.Listener.Addr().String(), "/api/summary", "Host: "+srv.Listener.Addr().String(), "Authorization: Bearer "+srv.guard.Token()); c != http.StatusOK {
		t.Errorf("the token as a bearer: %d", c)
	}
	if c := rawGet(t, srv.Listener.Addr().String(), "/api/summary", "Host: "+srv.Listener.Addr().String(), "Cookie: heapscope-1="+srv.guard.Token()); c != http.StatusUnauthorized {
		t.Errorf("the token in another port's cookie: %d", c)
	}

	// A browser's visit: the URL with the token gets the page and the cookie.
	jar, _ := cookiejar.New(nil)
	hc := &http.Client{Jar: jar}
	r, err := hc.Get(srv.login("/?tab=sites"))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(r.Body)
	r.Body.Close()
	if r.StatusCode != http.StatusOK || !strings.Contains(string(b), `<script src="app.js">`) {
		t.Fatalf("the URL with the token: %s, %.80q", r.Status, b)
	}
	sc := r.Header.Values("Set-Cookie")
	if len(sc) != 1 || !strings.Contains(sc[0], "heapscope-"+srv.URL[strings.LastIndex(srv.URL, ":")+1:]+"=") ||
		!strings.Contains(sc[0], "HttpOnly") || !strings.Contains(sc[0], "SameSite=Strict") || !strings.Contains(sc[0], "Path=/") {
		t.Errorf("Set-Cookie %q: want one HttpOnly, SameSite=Strict cookie of the port, for /", sc)
	}
	for _, p := range []string{"/", "/app.js", "/api/summary"} {
		if r, err := hc.Get(srv.URL + p); err != nil || r.StatusCode != http.StatusOK {
			t.Errorf("GET %s with the cookie: %v, %v", p, r.Status, err)
		} else {
			r.Body.Close()
		}
	}
}

// The server answers only to its own names: a request naming another host
// (a DNS-rebinding page: Host evil.example) is refused even with the
// token; so is one from another origin (Origin, or the browser's
// Sec-Fetch-Site of a page of another site, or of another port's page
// other than a link followed). Issue 27 #1: Host: evil.example got 200.
func TestGuardHostAndOrigin(t *testing.T) {
	_, srv := serveTrace(t, trace(t, "report_known"))
	addr := srv.Listener.Addr().String()
	port := addr[strings.LastIndex(addr, ":"):]
	auth := "Authorization: Bearer " + srv.guard.Token()
	for host, want := range map[string]int{
		addr:                      http.StatusOK,
		"127.0.0.1" + port:        http.StatusOK,
		"localhost" + port:        http.StatusOK,
		"LocalHost" + port:        http.StatusOK,
		"[::1]" + port:            http.StatusOK,
		"evil.example" + port:     http.StatusMisdirectedRequest,
		"evil.example":            http.StatusMisdirectedRequest,
		"localhost":               http.StatusMisdirectedRequest,
		"localhost:1":             http.StatusMisdirectedRequest,
		"127.0.0.1.nip.io" + port: http.StatusMisdirectedRequest,
		"":                        http.StatusMisdirectedRequest,
	} {
		if c := rawGet(t, addr, "/api/summary", "Host: "+host, auth); c != want {
			t.Errorf("Host %q: %d, want %d", host, c, want)
		}
	}
	if c := rawGet(t, addr, "/api/summary", auth); c != http.StatusBadRequest && c != http.StatusMisdirectedRequest {
		t.Errorf("no Host: %d", c)
	}
	h := "Host: " + addr
	for _, c := range []struct {
		header []string
		want   int
	}{
		{[]string{"Origin: http://" + addr}, http.StatusOK},
		{[]string{"Origin: http://localhost" + port}, http.StatusOK},
		{[]string{"Origin: http://evil.example"}, http.StatusForbidden},
		{[]string{"Origin: http://127.0.0.1:1"}, http.StatusForbidden},
		{[]string{"Origin: null"}, http.StatusForbidden},
		{[]string{"Sec-Fetch-Site: same-origin", "Sec-Fetch-Mode: cors"}, http.StatusOK},
		{[]string{"Sec-Fetch-Site: none", "Sec-Fetch-Mode: navigate"}, http.StatusOK},
		{[]string{"Sec-Fetch-Site: cross-site", "Sec-Fetch-Mode: navigate"}, http.StatusForbidden},
		{[]string{"Sec-Fetch-Site: same-site", "Sec-Fetch-Mode: no-cors"}, http.StatusForbidden},
		{[]string{"Sec-Fetch-Site: same-site", "Sec-Fetch-Mode: navigate"}, http.StatusOK},
	} {
		if got := rawGet(t, addr, "/api/summary", append([]string{h, auth}, c.header...)...); got != c.want {
			t.Errorf("%q: %d, want %d", c.header, got, c.want)
		}
	}
}

// Listen refuses an address other machines can reach unless told it may.
func TestListenLoopbackOnly(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:0", "[::]:0"} {
		if l, err := Listen(addr, false); !errors.Is(err, ErrNotLoopback) {
			if l != nil {
				l.Close()
			}
			t.Errorf("Listen(%s) = %v, want ErrNotLoopback", addr, err)
		}
	}
	l, err := Listen("0.0.0.0:0", true)
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	for _, addr := range []string{"127.0.0.1:0", "localhost:0"} {
		l, err := Listen(addr, false)
		if err != nil {
			t.Errorf("Listen(%s): %v", addr, err)
			continue
		}
		l.Close()
	}
}

// In Chromium: the URL with the token opens the page, which works and
// drops the token from its address, the cookie hidden from scripts; a
// fresh browser without the token gets nothing; a page of another origin
// on this host (another port) that the user opens reads nothing of the
// API, and its requests do no work; a DNS-rebinding name (evil.example
// resolved to 127.0.0.1) gets nothing either, even with the token.
func TestGuardBrowser(t *testing.T) {
	path := trace(t, "report_known")
	x, _ := serveTrace(t, path)
	inner := &counting{h: New(x)}
	srv := newTestServer(t, inner)
	ctx := browser(t, chromedp.Flag("host-resolver-rules", "MAP evil.example 127.0.0.1"))
	settle(t, ctx, visit(srv, "/?tab=sites"))
	if s := eval[string](t, ctx, `location.search`); s != "?tab=sites" {
		t.Errorf("the address after the visit: %q, want ?tab=sites without the token", s)
	}
	if c := eval[string](t, ctx, `document.cookie`); c != "" {
		t.Errorf("document.cookie = %q: the cookie is not HttpOnly", c)
	}
	rep, err := report.Load(path, report.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	fn := rep.Document(1).Leaks[0].Stack[0].Function
	if top := eval[string](t, ctx, `document.querySelector("#sites-leaks tr:nth-child(2) .fn").textContent`); !strings.HasPrefix(top, fn+" ") {
		t.Errorf("the top leak on the page after the token's exchange: %q, the report's %q", top, fn)
	}
	// Reloaded without the token, the page still works by the cookie.
	settle(t, ctx, chromedp.Navigate(srv.URL+"/?tab=flame"))
	if e := eval[bool](t, ctx, `document.getElementById("errors").hidden`); !e {
		t.Errorf("the page by the cookie shows errors: %s", eval[string](t, ctx, `document.getElementById("errors").textContent`))
	}

	// Another origin of this host, opened by the user in the same browser.
	foreign := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprintf(w, `<!doctype html><body><img src="%[1]s/api/sites?top=0"><script>
window.results = [];
const api = "%[1]s/api/summary";
Promise.all([
  fetch(api, {credentials: "include"}).then(r => r.text()).then(t => "cors: " + t, e => "cors failed"),
  fetch(api, {mode: "no-cors", credentials: "include"}).then(r => "no-cors: " + r.type, e => "no-cors failed"),
]).then(r => { window.results = r; document.body.setAttribute("data-done", "1"); });
</script></body>`, srv.URL)
	}))
	defer foreign.Close()
	do(t, ctx, chromedp.Navigate(foreign.URL+"/"), chromedp.WaitReady(chromedp.CSS(`body[data-done]`)))
	res := eval[[]string](t, ctx, `window.results`)
	for _, r := range res {
		if strings.Contains(r, "leaked") || strings.Contains(r, "report_known") {
			t.Errorf("a page of another origin read the API: %.100q", r)
		}
	}
	if n := inner.by(foreign.URL + "/"); n != 0 {
		t.Errorf("%d requests of a page of another origin reached the server (%q)", n, res)
	}

	// DNS rebinding: evil.example is this server's address, not its name.
	rebound := strings.Replace(srv.login("/"), "127.0.0.1", "evil.example", 1)
	do(t, ctx, chromedp.Navigate(rebound))
	if b := eval[string](t, ctx, `document.body.textContent`); !strings.Contains(b, "not this server's name") {
		t.Errorf("evil.example: the page says %.100q", b)
	}
	if n := inner.by("evil.example"); n != 0 {
		t.Errorf("%d requests by the name evil.example reached the server", n)
	}

	// A browser without the cookie gets nothing without the token.
	fresh := browser(t)
	do(t, fresh, chromedp.Navigate(srv.URL+"/"))
	if b := eval[string](t, fresh, `document.body.textContent`); !strings.Contains(b, "token") || strings.Contains(b, "report_known") {
		t.Errorf("without the token the page says %.100q", b)
	}
}
