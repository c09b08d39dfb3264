// Package push sends interval heap profiles to a collector without ever
// holding up its caller: an OpenTelemetry Collector (or any OTLP profiles
// endpoint) over HTTP/protobuf or gRPC, or a Pyroscope-compatible /ingest
// as pprof.
//
// A Sender queues what it is given, up to a bound, and a goroutine of its
// own encodes and sends it, retrying a failed send with exponential backoff
// (and jitter) while the failure is one worth retrying: the collector is
// down or slow, or answers that it is overloaded. When the queue is full,
// the oldest queued export is dropped to make room; an export that fails
// for good (the endpoint rejects it) or is still failing after MaxElapsed is
// dropped too. Every drop is counted, exactly: Stats says how many exports
// were sent, retried and dropped.
package push

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/heapscope/heapscope/export"
)

// Format is what a Target receives.
type Format uint8

// The formats.
const (
	OTLP  Format = iota + 1 // OTLP profiles (v1development)
	Pprof                   // pprof, to Pyroscope's /ingest
)

func (f Format) String() string {
	switch f {
	case OTLP:
		return "otlp"
	case Pprof:
		return "pprof"
	}
	return fmt.Sprintf("Format(%d)", uint8(f))
}

// Target is where exports go.
type Target struct {
	Format Format
	// URL is, for OTLP, http://HOST:PORT[/PATH] or https://… (HTTP/protobuf
	// to PATH, by default /v1development/profiles) or grpc://HOST:PORT
	// (gRPC without TLS); for pprof, http(s)://HOST:PORT[/PATH] of a
	// Pyroscope server (PATH by default /ingest).
	URL *url.URL
}

// ParseTarget parses FORMAT=URL ("otlp=http://127.0.0.1:4318",
// "otlp=grpc://127.0.0.1:4317", "pprof=http://127.0.0.1:4040").
func ParseTarget(s string) (Target, error) {
	f, u, ok := strings.Cut(s, "=")
	if !ok {
		return Target{}, fmt.Errorf("export target %q: want FORMAT=URL (otlp=http://HOST:4318, otlp=grpc://HOST:4317, pprof=http://HOST:4040)", s)
	}
	var t Target
	switch f {
	case "otlp":
		t.Format = OTLP
	case "pprof":
		t.Format = Pprof
	default:
		return Target{}, fmt.Errorf("export target %q: format %q is not otlp or pprof", s, f)
	}
	pu, err := url.Parse(u)
	if err != nil {
		return Target{}, fmt.Errorf("export target %q: %w", s, err)
	}
	if pu.Host == "" {
		return Target{}, fmt.Errorf("export target %q: the URL has no host", s)
	}
	switch {
	case pu.Scheme == "http" || pu.Scheme == "https":
	case pu.Scheme == "grpc" && t.Format == OTLP:
	default:
		return Target{}, fmt.Errorf("export target %q: scheme %q (want http, https%s)", s, pu.Scheme,
			map[bool]string{true: " or grpc", false: ""}[t.Format == OTLP])
	}
	t.URL = pu
	return t, nil
}

func (t Target) String() string {
	if t.URL == nil {
		return t.Format.String() + "="
	}
	return t.Format.String() + "=" + t.URL.String()
}

// Config configures a Sender. Zero values take the defaults.
type Config struct {
	Target Target
	// Queue bounds the exports waiting to be sent, the one being sent
	// not included (default 8).
	Queue int
	// Timeout bounds one attempt (default 10 s).
	Timeout time.Duration
	// MinBackoff and MaxBackoff bound the wait before a retry, which
	// doubles from MinBackoff (default 500 ms) to MaxBackoff (default
	// 30 s), each with up to 20% jitter.
	MinBackoff, MaxBackoff time.Duration
	// MaxElapsed is how long an export is retried before it is dropped
	// (default 5 min).
	MaxElapsed time.Duration
	// Encode is what the encoders are given: symbolization, the version.
	Encode export.Options
}

func (c *Config) defaults() {
	if c.Queue <= 0 {
		c.Queue = 8
	}
	if c.Timeout <= 0 {
		c.Timeout = 10 * time.Second
	}
	if c.MinBackoff <= 0 {
		c.MinBackoff = 500 * time.Millisecond
	}
	if c.MaxBackoff < c.MinBackoff {
		c.MaxBackoff = max(30*time.Second, c.MinBackoff)
	}
	if c.MaxElapsed <= 0 {
		c.MaxElapsed = 5 * time.Minute
	}
}

// Stats are a Sender's counters. An export is one interval for OTLP (one
// message for all its processes) and one process's interval for pprof.
type Stats struct {
	Target  string `json:"target"`
	Queued  uint64 `json:"queued"`  // exports waiting now, the one being sent included
	Sent    uint64 `json:"sent"`    // exports the endpoint accepted
	Retried uint64 `json:"retried"` // attempts that failed and were tried again
	Dropped uint64 `json:"dropped"` // exports given up: queue full, rejected, or failing past MaxElapsed
	// Rejected counts the Dropped exports that the endpoint refused for
	// good (a malformed request, an unknown path), or that could not be
	// encoded.
	Rejected  uint64 `json:"rejected"`
	LastError string `json:"last_error,omitempty"`
}

// ErrClosed is returned by Send after Close.
var ErrClosed = errors.New("push: sender closed")

// errPermanent marks a failure that a retry cannot cure.
type errPermanent struct{ err error }

func (e errPermanent) Error() string { return e.err.Error() }
func (e errPermanent) Unwrap() error { return e.err }

// transport sends one encoded export.
type transport interface {
	// encode turns an interval into its exports.
	encode(iv *export.Interval, o *export.Options) ([]message, error)
	send(ctx context.Context, m message) error
	close() error
}

// message is one encoded export.
type message struct {
	body []byte
	// For OTLP over gRPC: the profiles (the client encodes them).
	profiles pprofile.Profiles
	// For pprof: the process's application name and the interval's times.
	name, contentType string
	from, until       time.Time
}

// Sender sends intervals to one target.
type Sender struct {
	cfg Config
	tr  transport

	mu       sync.Mutex
	wake     chan struct{}
	queue    []*export.Interval
	pending  []message // the current interval's exports not yet sent
	stats    Stats
	closed   bool
	stop     chan struct{} // closed by Close: give up waiting
	stopped1 sync.Once
	done     chan struct{} // closed when the goroutine returns
}

// New returns a Sender for cfg.Target and starts its goroutine. It does not
// connect: a collector that is not there yet is retried.
func New(cfg Config) (*Sender, error) {
	cfg.defaults()
	var tr transport
	var err error
	switch {
	case cfg.Target.URL == nil:
		return nil, fmt.Errorf("push: no target URL")
	case cfg.Target.Format == OTLP && cfg.Target.URL.Scheme == "grpc":
		tr, err = newGRPC(cfg.Target.URL, cfg.MaxBackoff)
	case cfg.Target.Format == OTLP:
		tr, err = newOTLPHTTP(cfg.Target.URL)
	case cfg.Target.Format == Pprof:
		tr, err = newPyroscope(cfg.Target.URL)
	default:
		return nil, fmt.Errorf("push: unknown format %v", cfg.Target.Format)
	}
	if err != nil {
		return nil, err
	}
	s := &Sender{cfg: cfg, tr: tr, wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	s.stats.Target = cfg.Target.String()
	go s.run()
	return s, nil
}

// Send queues iv and returns at once; the Sender owns iv from then on. When
// the queue is full the oldest queued interval is dropped (counted). After
// Close it returns ErrClosed.
func (s *Sender) Send(iv *export.Interval) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if len(s.queue) >= s.cfg.Queue {
		s.dropLocked(s.queue[0], nil)
		s.queue[0] = nil
		s.queue = s.queue[1:]
	}
	s.queue = append(s.queue, iv)
	select {
	case s.wake <- struct{}{}:
	default:
	}
	return nil
}

// exports is how many exports an interval makes.
func (s *Sender) exports(iv *export.Interval) uint64 {
	if s.cfg.Target.Format == Pprof {
		return uint64(len(iv.Processes))
	}
	return 1
}

func (s *Sender) dropLocked(iv *export.Interval, err error) {
	s.stats.Dropped += s.exports(iv)
	if err != nil {
		s.stats.LastError = err.Error()
	}
}

// Stats returns the counters now.
func (s *Sender) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats
	for _, iv := range s.queue {
		st.Queued += s.exports(iv)
	}
	st.Queued += uint64(len(s.pending))
	return st
}

// Close stops taking intervals and waits until what is queued is sent, or
// ctx is done; what is left then is dropped (counted). It returns the
// final Stats.
func (s *Sender) Close(ctx context.Context) Stats {
	s.mu.Lock()
	if !s.closed {
		s.closed = true
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
	s.mu.Unlock()
	select {
	case <-s.done:
	case <-ctx.Done():
		s.stopped1.Do(func() { close(s.stop) })
		<-s.done
	}
	s.tr.close()
	return s.Stats()
}

// run sends the queue's intervals in order until Close.
func (s *Sender) run() {
	defer close(s.done)
	for {
		s.mu.Lock()
		for len(s.queue) == 0 {
			if s.closed {
				s.mu.Unlock()
				return
			}
			s.mu.Unlock()
			select {
			case <-s.wake:
			case <-s.stop:
			}
			if s.stopped() {
				s.mu.Lock()
				s.dropAllLocked()
				s.mu.Unlock()
				return
			}
			s.mu.Lock()
		}
		iv := s.queue[0]
		s.queue[0] = nil
		s.queue = s.queue[1:]
		s.mu.Unlock()

		ms, err := s.tr.encode(iv, &s.cfg.Encode)
		s.mu.Lock()
		if err != nil {
			s.dropLocked(iv, err)
			s.stats.Rejected += s.exports(iv)
			s.mu.Unlock()
			continue
		}
		s.pending = ms
		s.mu.Unlock()
		for len(ms) > 0 {
			ok := s.deliver(ms[0])
			s.mu.Lock()
			ms = ms[1:]
			s.pending = ms
			s.mu.Unlock()
			if !ok && s.stopped() {
				s.mu.Lock()
				s.stats.Dropped += uint64(len(ms))
				s.pending = nil
				s.dropAllLocked()
				s.mu.Unlock()
				return
			}
		}
	}
}

func (s *Sender) stopped() bool {
	select {
	case <-s.stop:
		return true
	default:
		return false
	}
}

func (s *Sender) dropAllLocked() {
	for _, iv := range s.queue {
		s.dropLocked(iv, nil)
	}
	s.queue = nil
}

// deliver sends m, retrying with backoff, and counts the outcome: sent, or
// dropped (rejected, past MaxElapsed, or stopped).
func (s *Sender) deliver(m message) bool {
	start := time.Now()
	backoff := s.cfg.MinBackoff
	for {
		ctx, cancel := context.WithTimeout(context.Background(), s.cfg.Timeout)
		go func() {
			select {
			case <-s.stop:
				cancel()
			case <-ctx.Done():
			}
		}()
		err := s.tr.send(ctx, m)
		cancel()
		s.mu.Lock()
		if err == nil {
			s.stats.Sent++
			s.mu.Unlock()
			return true
		}
		s.stats.LastError = err.Error()
		var perm errPermanent
		if errors.As(err, &perm) || s.stopped() || time.Since(start)+backoff > s.cfg.MaxElapsed {
			s.stats.Dropped++
			if errors.As(err, &perm) {
				s.stats.Rejected++
			}
			s.mu.Unlock()
			return false
		}
		s.stats.Retried++
		s.mu.Unlock()
		wait := backoff + time.Duration(rand.Int64N(int64(backoff)/5+1))
		select {
		case <-time.After(wait):
		case <-s.stop:
			s.mu.Lock()
			s.stats.Dropped++
			s.mu.Unlock()
			return false
		}
		backoff = min(2*backoff, s.cfg.MaxBackoff)
	}
}
