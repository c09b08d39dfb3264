package web

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
)

// Guard lets through only the requests of the user who started serve: a
// trace holds command lines (with whatever secrets their arguments hold),
// paths and stacks, and the port of a loopback server is open to every
// local user and, through DNS rebinding, to any web page the user visits.
//
// Each Guard has a secret of its own, in the URL it prints (URL). A visit
// to that URL trades the secret for a cookie (HttpOnly, SameSite=Strict,
// named with the port) and gets the page, which takes the secret out of the
// address bar; from then on the page and every request need the cookie, or
// the secret in an "Authorization: Bearer" header (for scripts). A request
// whose Host is not one of the server's own names (the address it listens
// on, 127.0.0.1, [::1] and localhost, each with its port) or that comes
// from another origin (see sameOrigin) is refused before that, whatever it
// carries. Cookies do not tell ports apart: a server of another program on
// this host that the browser visits is sent the cookie too.
type Guard struct {
	next    http.Handler
	token   string
	cookie  string          // the cookie's name, with the port: cookies do not tell ports apart
	hosts   map[string]bool // allowed Host headers, lower case
	origins map[string]bool // allowed Origin headers
	url     string
}

// NewGuard returns a Guard for next served at addr, the listener's
// address; names are further host names the server is reached by (e.g.
// the host of --listen), the first of them the URL's. An unspecified
// address (0.0.0.0, [::]) also allows the addresses of every interface and
// the machine's host name, which its URL then names.
func NewGuard(next http.Handler, addr net.Addr, names ...string) (*Guard, error) {
	ta, ok := addr.(*net.TCPAddr)
	if !ok {
		return nil, fmt.Errorf("web: guard: %v is not a TCP address", addr)
	}
	var secret [24]byte
	if _, err := rand.Read(secret[:]); err != nil {
		return nil, fmt.Errorf("web: guard: %w", err)
	}
	port := strconv.Itoa(ta.Port)
	g := &Guard{next: next, token: base64.RawURLEncoding.EncodeToString(secret[:]), cookie: "heapscope-" + port,
		hosts: map[string]bool{}, origins: map[string]bool{}}
	hosts := append([]string{ta.IP.String(), "127.0.0.1", "::1", "localhost"}, names...)
	urlHost := ta.IP.String()
	if len(names) > 0 {
		urlHost = names[0]
	}
	if ta.IP.IsUnspecified() {
		if as, err := net.InterfaceAddrs(); err == nil {
			for _, a := range as {
				if ipn, ok := a.(*net.IPNet); ok {
					hosts = append(hosts, ipn.IP.String())
				}
			}
		}
		if h, err := os.Hostname(); err == nil {
			hosts = append(hosts, h)
			if len(names) == 0 {
				urlHost = h // the name other machines know it by
			}
		}
	}
	for _, h := range hosts {
		if h == "" {
			continue
		}
		hp := strings.ToLower(net.JoinHostPort(h, port))
		g.hosts[hp], g.origins["http://"+hp] = true, true
		if port == "80" {
			bare := strings.ToLower(h)
			if strings.Contains(bare, ":") {
				bare = "[" + bare + "]"
			}
			g.hosts[bare], g.origins["http://"+bare] = true, true
		}
	}
	g.url = "http://" + net.JoinHostPort(urlHost, port) + "/?token=" + g.token
	return g, nil
}

// URL is the address to open: the server's, with the secret.
func (g *Guard) URL() string { return g.url }

// Token is the secret, for an "Authorization: Bearer" header.
func (g *Guard) Token() string { return g.token }

// ErrForbidden is the reason of a refused request.
var ErrForbidden = errors.New("forbidden")

func (g *Guard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	if !g.hosts[strings.ToLower(r.Host)] {
		g.refuse(w, r, http.StatusMisdirectedRequest, fmt.Sprintf("Host %q is not this server's name", r.Host))
		return
	}
	if !g.sameOrigin(r) {
		g.refuse(w, r, http.StatusForbidden, "a request from another site")
		return
	}
	q := r.URL.Query()
	if q.Has("token") && r.URL.Path == "/" && (r.Method == http.MethodGet || r.Method == http.MethodHead) {
		g.exchange(w, r, q.Get("token"))
		return
	}
	if !g.authorized(r) {
		g.refuse(w, r, http.StatusUnauthorized, "this server answers only with the token of the URL `heapscope serve` printed")
		return
	}
	g.next.ServeHTTP(w, r)
}

// sameOrigin reports whether r may come from where it says: no Origin
// but the server's own, and by the browser's Sec-Fetch-Site, nothing from
// another site, and from another origin of this site (another port of
// 127.0.0.1) nothing but a navigation (a link to the URL serve printed).
func (g *Guard) sameOrigin(r *http.Request) bool {
	if o := r.Header.Get("Origin"); o != "" && !g.origins[strings.ToLower(o)] {
		return false
	}
	switch r.Header.Get("Sec-Fetch-Site") {
	case "cross-site":
		return false
	case "same-site":
		return r.Header.Get("Sec-Fetch-Mode") == "navigate"
	}
	return true
}

// valid compares a secret given with the Guard's, in constant time.
func (g *Guard) valid(s string) bool {
	return subtle.ConstantTimeCompare([]byte(s), []byte(g.token)) == 1
}

func (g *Guard) authorized(r *http.Request) bool {
	if c, err := r.Cookie(g.cookie); err == nil && g.valid(c.Value) {
		return true
	}
	a := r.Header.Get("Authorization")
	return len(a) > 7 && strings.EqualFold(a[:7], "Bearer ") && g.valid(strings.TrimSpace(a[7:]))
}

// exchange trades the secret of the URL for the cookie and answers with
// the page itself, which takes the secret out of the address bar. Not by a
// redirect: a SameSite=Strict cookie is not sent along a redirect that
// another site's link began (a URL clicked in a chat), while the page's
// own requests always carry it.
func (g *Guard) exchange(w http.ResponseWriter, r *http.Request, token string) {
	if !g.valid(token) {
		g.refuse(w, r, http.StatusForbidden, "a wrong token: open the URL this run of `heapscope serve` printed")
		return
	}
	http.SetCookie(w, &http.Cookie{Name: g.cookie, Value: g.token, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode})
	w.Header().Set("Cache-Control", "no-store")
	r = r.Clone(r.Context())
	r.URL.RawQuery = ""
	g.next.ServeHTTP(w, r)
}

// refuse answers a refused request: JSON under /api/ (as every error of
// the API), text elsewhere.
func (g *Guard) refuse(w http.ResponseWriter, r *http.Request, code int, why string) {
	w.Header().Set("Cache-Control", "no-store")
	if strings.HasPrefix(r.URL.Path, "/api/") {
		writeErrCode(w, code, fmt.Errorf("%s: %w", why, ErrForbidden))
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(code)
	fmt.Fprintf(w, "heapscope serve: %s\n", why)
}
