package web

import (
	"context"
	"errors"
	"net"
	"net/http"
	"runtime"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// What a server holds is bounded, whoever asks: the size of each answer
// (the limits below, reported in the answer when they cut it: Capped), the
// questions worked on at once (gate), and the connections and how long an
// idle one is kept (Serve).

// Limits of the answers: a browser is never sent more than these.
const (
	maxPoints   = 4000
	defPoints   = 1000
	defMaxNodes = 5000
	maxMaxNodes = 50000
	defTop      = 200
	// maxTop bounds every list of sites, functions, callers and diff rows:
	// top=0 ("all") and larger asks get this many (about 10 MB of JSON
	// for the sites of stacks of 30 frames).
	maxTop      = 1000
	defMinShare = 0.001
)

// Capped says which of the server's limits cut an answer: its lists hold
// at most Top entries where the question asked for more (or for all), its
// flame graph at most MaxNodes nodes, its timeline Points buckets.
type Capped struct {
	Top      int `json:"top,omitempty"`
	MaxNodes int `json:"max_nodes,omitempty"`
	Points   int `json:"points,omitempty"`
}

// ErrBusy is the reason of a question refused because the server works on
// as many as it takes and has as many waiting (a 503, with Retry-After).
var ErrBusy = errors.New("the server is busy: ask again in a moment")

// gate bounds the heavy questions answered at once, each of which reads a
// window's rows or every site and builds an answer up to the limits: as
// many at once as the machine has cores, and up to queue more waiting.
type gate struct {
	work chan struct{} // one per question worked on
	all  chan struct{} // one per question worked on or waiting
}

// gateQueue is how many questions may wait for the gate: the page asks up
// to 8 at once, and a user may have a few tabs open.
const gateQueue = 32

func newGate() *gate {
	n := max(runtime.GOMAXPROCS(0), 1)
	return &gate{work: make(chan struct{}, n), all: make(chan struct{}, n+gateQueue)}
}

// enter waits for the gate, and returns the function that leaves it; it
// fails at once with ErrBusy when the queue is full, or when ctx ends.
func (g *gate) enter(ctx context.Context) (func(), error) {
	select {
	case g.all <- struct{}{}:
	default:
		return nil, ErrBusy
	}
	select {
	case g.work <- struct{}{}:
	case <-ctx.Done():
		<-g.all
		return nil, ctx.Err()
	}
	return func() { <-g.work; <-g.all }, nil
}

// heavyWrite is how long an answer of the gate may take to be sent: a
// client that reads it slower frees its place.
const heavyWrite = 2 * time.Minute

// heavy enters s's gate for r, or answers why it cannot (503 with
// Retry-After when the queue is full) and returns false.
func (s *Server) heavy(w http.ResponseWriter, r *http.Request) (func(), bool) {
	leave, err := s.gate.enter(r.Context())
	if err != nil {
		if errors.Is(err, ErrBusy) {
			writeErr(w, err)
		}
		return nil, false // else the client went away
	}
	// Not supported by a recorder (WriteHTML): nothing to bound there.
	http.NewResponseController(w).SetWriteDeadline(time.Now().Add(heavyWrite))
	return leave, true
}

// Connection limits of Serve.
const (
	// maxConns is how many connections are kept at once: a browser opens
	// six per server. Past it, the oldest idle one is closed for a new
	// one, or, with none idle, new ones wait to be accepted (connLimit).
	maxConns          = 128
	readHeaderTimeout = 10 * time.Second
	idleTimeout       = 30 * time.Second
	maxHeaderBytes    = 16 << 10
)

// Serve serves h on l until ctx ends, within the connection limits above
// (an idle connection is kept idleTimeout; one that has sent no request
// header readHeaderTimeout; headers are at most maxHeaderBytes), then
// shuts down, waiting at most 2 s for the answers under way.
func Serve(ctx context.Context, l net.Listener, h http.Handler) error {
	ll := limitListener(l, maxConns)
	srv := &http.Server{Handler: h, ReadHeaderTimeout: readHeaderTimeout, IdleTimeout: idleTimeout,
		MaxHeaderBytes: maxHeaderBytes, ConnState: ll.state}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ll) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
			return err
		}
		return nil
	}
}

// connLimit is a listener that keeps at most max connections: when a new
// one would pass it, the connection idle the longest is closed (kept alive
// with no request under way, or connected newConnGrace ago or more and
// nothing sent yet), and with none such the new one waits. The server tells
// it each connection's state (state).
type connLimit struct {
	net.Listener
	max    int
	mu     sync.Mutex
	conns  map[net.Conn]connInfo
	freed  chan struct{} // a connection closed
	done   chan struct{} // closed by Close
	closed bool
}

// connInfo is what a connLimit knows of a connection.
type connInfo struct {
	since  time.Time // idle, or connected, since
	active bool      // a request under way
	fresh  bool      // no request yet
}

// newConnGrace is how long a new connection may take to send the first
// bytes of its request before it can be closed for another: a client sends
// them with the handshake's last packet. One whose bytes wait to be read
// (the server is busy) is never closed: that would fail a request that was
// never refused.
const newConnGrace = 50 * time.Millisecond

// pending reports whether bytes sent on c wait to be read.
func pending(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	n := 0
	rc.Control(func(fd uintptr) { n, _ = unix.IoctlGetInt(int(fd), unix.SIOCINQ) })
	return n > 0
}

func limitListener(l net.Listener, max int) *connLimit {
	return &connLimit{Listener: l, max: max, conns: map[net.Conn]connInfo{},
		freed: make(chan struct{}, 1), done: make(chan struct{})}
}

func (l *connLimit) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	for {
		l.mu.Lock()
		if l.closed {
			l.mu.Unlock()
			c.Close()
			return nil, net.ErrClosed
		}
		if len(l.conns) < l.max {
			l.conns[c] = connInfo{since: time.Now(), fresh: true}
			l.mu.Unlock()
			return c, nil
		}
		wait := l.closeIdle(time.Now())
		l.mu.Unlock()
		if wait == 0 {
			continue
		}
		var timer <-chan time.Time
		if wait > 0 {
			timer = time.After(wait)
		}
		select {
		case <-l.freed:
		case <-timer:
		case <-l.done:
		}
	}
}

// closeIdle closes the connection idle the longest, if one may be, and
// returns 0; else how long until a new one may be closed, or -1 if none
// may be before one changes its state.
func (l *connLimit) closeIdle(now time.Time) time.Duration {
	var oldest net.Conn
	var since time.Time
	wait := time.Duration(-1)
	for c, ci := range l.conns {
		if ci.active {
			continue
		}
		if ci.fresh && (now.Sub(ci.since) < newConnGrace || pending(c)) {
			w := newConnGrace - now.Sub(ci.since)
			if w <= 0 {
				w = newConnGrace // its request is read meanwhile
			}
			if wait < 0 || w < wait {
				wait = w
			}
			continue
		}
		if oldest == nil || ci.since.Before(since) {
			oldest, since = c, ci.since
		}
	}
	if oldest == nil {
		return wait
	}
	delete(l.conns, oldest)
	oldest.Close()
	return 0
}

func (l *connLimit) Close() error {
	l.mu.Lock()
	if !l.closed {
		l.closed = true
		close(l.done)
	}
	l.mu.Unlock()
	return l.Listener.Close()
}

// state follows a connection's state (http.Server.ConnState).
func (l *connLimit) state(c net.Conn, s http.ConnState) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.conns[c]; !ok {
		return // closed for another
	}
	switch s {
	case http.StateActive:
		l.conns[c] = connInfo{active: true}
	case http.StateIdle:
		l.conns[c] = connInfo{since: time.Now()}
	case http.StateClosed, http.StateHijacked:
		delete(l.conns, c)
		select {
		case l.freed <- struct{}{}:
		default:
		}
	}
}
