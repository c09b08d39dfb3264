package push_test

import (
	"context"
	"encoding/json"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/pprof/profile"
	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/heapscope/heapscope/export"
	"github.com/heapscope/heapscope/export/internal/exporttest"
	"github.com/heapscope/heapscope/export/push"
	"github.com/heapscope/heapscope/internal/collector"
	"github.com/heapscope/heapscope/internal/testutil"
)

func TestMain(m *testing.M) { testutil.Main(m) }

// nth is iv moved to start n seconds after base: the intervals of one
// test are told apart by their start.
func nth(iv *export.Interval, base time.Time, n int) *export.Interval {
	c := *iv
	c.Start = base.Add(time.Duration(n) * time.Second)
	c.End = c.Start.Add(time.Second)
	return &c
}

func target(t *testing.T, c *collector.Collector, transport string) push.Target {
	t.Helper()
	s := "otlp=http://" + c.HTTP
	if transport == "grpc" {
		s = "otlp=grpc://" + c.GRPC
	}
	tg, err := push.ParseTarget(s)
	if err != nil {
		t.Fatal(err)
	}
	return tg
}

// starts returns the start of each profile message, in the file's order.
func starts(t *testing.T, ms []pprofile.Profiles, base time.Time) []int {
	t.Helper()
	var out []int
	for _, m := range ms {
		prof := m.ResourceProfiles().At(0).ScopeProfiles().At(0).Profiles().At(0)
		out = append(out, int(prof.Time().AsTime().Sub(base)/time.Second))
	}
	return out
}

// waitStats polls s until ok accepts its stats (bounded: a failure says
// what the stats were).
func waitStats(t *testing.T, s *push.Sender, what string, ok func(push.Stats) bool) push.Stats {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		st := s.Stats()
		if ok(st) {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: %+v", what, st)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestSendKnown sends report_known's trace to a real collector over each
// transport and reads what its file exporter wrote: the totals and leaks
// per function are the workload's, and the resource is the process.
func TestSendKnown(t *testing.T) {
	iv, o, bin := exporttest.Interval(t)
	for _, tr := range []string{"http", "grpc"} {
		t.Run(tr, func(t *testing.T) {
			c := collector.Start(t)
			s, err := push.New(push.Config{Target: target(t, c, tr), Encode: o})
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Send(iv); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			st := s.Close(ctx)
			if st.Sent != 1 || st.Dropped != 0 || st.Queued != 0 {
				t.Fatalf("stats %+v", st)
			}
			if err := s.Send(iv); err != push.ErrClosed {
				t.Errorf("Send after Close: %v", err)
			}
			ms, err := c.WaitMessages(ctx, 1, 30*time.Second)
			if err != nil {
				t.Fatalf("%v; collector log:\n%s", err, c.Log())
			}
			if len(ms) != 1 {
				t.Fatalf("%d messages", len(ms))
			}
			totals, err := collector.Totals(ms[0])
			if err != nil {
				t.Fatal(err)
			}
			pid := int64(iv.Processes[0].PID)
			exporttest.Check(t, totals[pid])
			raw := ms[0].ResourceProfiles().At(0).Resource().Attributes().AsRaw()
			for k, v := range map[string]any{
				"process.pid": pid, "process.executable.path": bin, "process.executable.name": filepath.Base(bin),
				"process.command_line": bin + " 50", "host.name": "testhost", "service.name": "unknown_service:" + filepath.Base(bin),
			} {
				if !reflect.DeepEqual(raw[k], v) {
					t.Errorf("%s = %#v, want %#v", k, raw[k], v)
				}
			}
		})
	}
}

// TestCollectorKilled kills the collector while exports go on: the sends
// are queued up to the bound, the oldest dropped past it, exactly counted,
// and they resume when the collector is back.
func TestCollectorKilled(t *testing.T) {
	iv, o, _ := exporttest.Interval(t)
	base := time.Unix(1800000000, 0)
	for _, tr := range []string{"http", "grpc"} {
		t.Run(tr, func(t *testing.T) {
			c := collector.Start(t)
			s, err := push.New(push.Config{Target: target(t, c, tr), Encode: o, Queue: 2,
				MinBackoff: 20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond, Timeout: 5 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			s.Send(nth(iv, base, 0))
			waitStats(t, s, "the first export", func(st push.Stats) bool { return st.Sent == 1 })
			if _, err := c.WaitMessages(ctx, 1, 30*time.Second); err != nil {
				t.Fatal(err)
			}
			c.Kill()

			s.Send(nth(iv, base, 1))
			waitStats(t, s, "a retry of the second", func(st push.Stats) bool { return st.Retried >= 1 })
			for n := 2; n <= 6; n++ {
				if err := s.Send(nth(iv, base, n)); err != nil {
					t.Fatal(err)
				}
			}
			// 1 being retried, 2 queued (5 and 6): 2, 3 and 4 dropped.
			if st := s.Stats(); st.Dropped != 3 || st.Queued != 3 || st.Sent != 1 || st.Rejected != 0 {
				t.Fatalf("with the collector down: %+v", st)
			}

			c.Restart()
			waitStats(t, s, "the exports to resume", func(st push.Stats) bool { return st.Sent == 4 && st.Queued == 0 })
			cctx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			st := s.Close(cctx)
			if st.Sent != 4 || st.Dropped != 3 || st.Queued != 0 || st.Rejected != 0 || st.LastError == "" {
				t.Errorf("final stats %+v", st)
			}
			ms, err := c.WaitMessages(ctx, 4, 30*time.Second)
			if err != nil {
				t.Fatalf("%v (intervals %v)", err, starts(t, ms, base))
			}
			if got := starts(t, ms, base); !reflect.DeepEqual(got, []int{0, 1, 5, 6}) {
				t.Errorf("the collector has intervals %v, want [0 1 5 6]", got)
			}
		})
	}
}

// TestCollectorHung stops the collector (SIGSTOP: it accepts connections
// and answers nothing) while intervals are sent: Send never waits for it,
// the queue keeps its bound, and the exports resume once it runs again.
func TestCollectorHung(t *testing.T) {
	iv, o, _ := exporttest.Interval(t)
	base := time.Unix(1900000000, 0)
	c := collector.Start(t)
	s, err := push.New(push.Config{Target: target(t, c, "http"), Encode: o, Queue: 2,
		MinBackoff: 20 * time.Millisecond, MaxBackoff: 100 * time.Millisecond, Timeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	c.Stop()
	defer c.Continue()
	s.Send(nth(iv, base, 0))
	waitStats(t, s, "an attempt to time out", func(st push.Stats) bool { return st.Retried >= 1 })
	for n := 1; n < 10; n++ {
		s.Send(nth(iv, base, n))
	}
	if st := s.Stats(); st.Dropped != 7 || st.Queued != 3 || st.Sent != 0 {
		t.Fatalf("with the collector hung: %+v", st)
	}
	c.Continue()
	waitStats(t, s, "the exports to resume", func(st push.Stats) bool { return st.Sent == 3 && st.Queued == 0 })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if st := s.Close(ctx); st.Sent != 3 || st.Dropped != 7 {
		t.Errorf("final stats %+v", st)
	}
	// Attempts that timed out may still have reached it (at least once):
	// the intervals it has are the three sent, each at least once.
	var got []int
	for deadline := time.Now().Add(30 * time.Second); ; {
		ms, err := c.Messages()
		if err != nil {
			t.Fatal(err)
		}
		got = starts(t, ms, base)
		slices.Sort(got)
		got = slices.Compact(got)
		if reflect.DeepEqual(got, []int{0, 8, 9}) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the collector has intervals %v, want [0 8 9]", got)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestCloseDeadline: Close with a deadline while the collector is down
// drops what is left, counted, and returns.
func TestCloseDeadline(t *testing.T) {
	iv, o, _ := exporttest.Interval(t)
	c := collector.Start(t)
	c.Kill()
	s, err := push.New(push.Config{Target: target(t, c, "http"), Encode: o, Queue: 4,
		MinBackoff: 20 * time.Millisecond, MaxBackoff: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		s.Send(iv)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if st := s.Close(ctx); st.Sent != 0 || st.Dropped != 3 || st.Queued != 0 {
		t.Errorf("stats %+v", st)
	}
}

// TestPyroscopeRequest checks the requests of the pprof target with a
// stand-in for Pyroscope's /ingest that decodes them as Pyroscope does
// (query parameters, a multipart form with the profile and the sample-type
// config); no Pyroscope server runs here. A 503 is retried, a 400 dropped
// as rejected.
func TestPyroscopeRequest(t *testing.T) {
	iv, o, bin := exporttest.Interval(t)
	var calls atomic.Int32
	type got struct {
		q   url.Values
		p   *profile.Profile
		cfg map[string]export.SampleTypeConfig
	}
	reqs := make(chan got, 4)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := calls.Add(1)
		if n == 1 {
			http.Error(w, "busy", http.StatusServiceUnavailable)
			return
		}
		if r.URL.Path != "/ingest" || r.Method != http.MethodPost {
			http.Error(w, "bad path", http.StatusNotFound)
			return
		}
		if err := r.ParseMultipartForm(32 << 20); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var g got
		g.q = r.URL.Query()
		f, _, err := r.FormFile("profile")
		if err == nil {
			g.p, err = profile.Parse(f)
		}
		if err == nil {
			var cf multipart.File
			cf, _, err = r.FormFile("sample_type_config")
			if err == nil {
				b, _ := io.ReadAll(cf)
				err = json.Unmarshal(b, &g.cfg)
			}
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		reqs <- g
		if n == 3 {
			http.Error(w, "rejected", http.StatusBadRequest)
		}
	}))
	defer srv.Close()
	tg, err := push.ParseTarget("pprof=" + srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	s, err := push.New(push.Config{Target: tg, Encode: o, MinBackoff: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	s.Send(iv)
	s.Send(iv)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st := s.Close(ctx)
	if st.Sent != 1 || st.Retried != 1 || st.Dropped != 1 || st.Rejected != 1 {
		t.Errorf("stats %+v", st)
	}
	g := <-reqs
	name := filepath.Base(bin) + "{pid=" + strconv.Itoa(int(iv.Processes[0].PID)) + ",host=testhost}"
	if g.q.Get("name") != name || g.q.Get("format") != "pprof" || g.q.Get("from") != strconv.FormatInt(iv.Start.Unix(), 10) {
		t.Errorf("query %v, want name %s", g.q, name)
	}
	if !reflect.DeepEqual(g.cfg, export.PyroscopeSampleTypes()) {
		t.Errorf("sample-type config %v", g.cfg)
	}
	var leak int64
	for _, smp := range g.p.Sample {
		for _, l := range smp.Location {
			if len(l.Line) > 0 {
				if l.Line[0].Function.Name == "leak_site" {
					leak += smp.Value[3]
				}
				break
			}
		}
	}
	if leak != 3000 {
		t.Errorf("inuse_space of leak_site %d, want 3000", leak)
	}
}

func TestParseTarget(t *testing.T) {
	for _, ok := range []string{"otlp=http://127.0.0.1:4318", "otlp=https://c:4318/p", "otlp=grpc://127.0.0.1:4317", "pprof=http://h:4040"} {
		if _, err := push.ParseTarget(ok); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
	for _, bad := range []string{"otlp", "json=http://h", "pprof=grpc://h:1", "otlp=ftp://h", "otlp=http://", "otlp=::"} {
		if _, err := push.ParseTarget(bad); err == nil {
			t.Errorf("%s: no error", bad)
		}
	}
}
