//go:build linux && amd64

package preload

import (
	"bufio"
	"bytes"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/internal/testutil"
)

// counter is the cheapest useful sink: it counts events.
type counter struct {
	event.Sink
	n uint64
}

func (c *counter) Events(evs []event.Event) error { c.n += uint64(len(evs)); return nil }

// churn runs the churn workload (pairs malloc+free per thread) under cfg
// and returns its ns per pair and the events the sink received.
func churn(tb testing.TB, cfg *Config, pairs, threads int) (float64, uint64) {
	bin := testutil.MustBuild(tb, "churn", testutil.Options{})
	cmd := exec.Command(bin, strconv.Itoa(pairs), strconv.Itoa(threads))
	var c *Collector
	sink := &counter{Sink: event.Discard}
	if cfg != nil {
		var err error
		if c, err = New(*cfg, sink); err != nil {
			tb.Fatal(err)
		}
		if err := c.Prepare(cmd); err != nil {
			tb.Fatal(err)
		}
	}
	out, err := cmd.Output()
	if err != nil {
		tb.Fatal(err)
	}
	if c != nil {
		c.Exited(cmd.Process.Pid, 0, 0)
		if err := c.Close(); err != nil {
			tb.Fatal(err)
		}
	}
	ns, err := nsPerPair(out)
	if err != nil {
		tb.Fatal(err)
	}
	return ns, sink.n
}

func nsPerPair(out []byte) (float64, error) { return churnValue(out, "ns_per_pair") }

// churnValue returns the value of one line of churn's output.
func churnValue(out []byte, name string) (float64, error) {
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 2 && f[0] == name {
			return strconv.ParseFloat(f[1], 64)
		}
	}
	return 0, fmt.Errorf("no %s in %q", name, out)
}

// BenchmarkChurn measures the cost per malloc+free pair of the churn
// workload (2M pairs per thread) traced by a Collector whose sink counts
// events, with one and with two threads. Each iteration runs every mode once,
// interleaved, so that the load of a shared machine falls on all of them;
// the metrics are medians over the iterations of the ns per pair the
// workload reports:
//
//	untraced, heaptrack (if installed), fp (the default: frame-pointer
//	stacks on allocations), nostacks, dwarf (--unwind dwarf), tables
//	(--unwind tables, heapscope run's default),
//
// and fp's overhead over untraced as a fraction of heaptrack's.
func BenchmarkChurn(b *testing.B) {
	const pairs = 2_000_000
	type mode struct {
		name string
		run  func(b *testing.B, threads int) float64
	}
	traced := func(cfg Config) func(*testing.B, int) float64 {
		return func(b *testing.B, threads int) float64 {
			ns, events := churn(b, &cfg, pairs, threads)
			if events < uint64(2*pairs*threads) {
				b.Fatalf("sink saw %d events, want at least %d", events, 2*pairs*threads)
			}
			return ns
		}
	}
	modes := []mode{
		{"untraced", func(b *testing.B, threads int) float64 { ns, _ := churn(b, nil, pairs, threads); return ns }},
		{"fp", traced(Config{})},
		{"nostacks", traced(Config{Stacks: event.NoStacks})},
		{"dwarf", traced(Config{Unwind: event.UnwindDWARF})},
		{"tables", traced(Config{Unwind: event.UnwindTables})},
	}
	if _, err := exec.LookPath("heaptrack"); err == nil {
		modes = append(modes, mode{"heaptrack", func(b *testing.B, threads int) float64 {
			bin := testutil.MustBuild(b, "churn", testutil.Options{})
			dir := b.TempDir()
			out, err := exec.Command("heaptrack", "-o", dir+"/trace", bin, strconv.Itoa(pairs), strconv.Itoa(threads)).Output()
			if err != nil {
				b.Fatal(err)
			}
			ns, err := nsPerPair(out)
			if err != nil {
				b.Fatal(err)
			}
			return ns
		}})
	}
	for _, threads := range []int{1, 2} {
		b.Run(fmt.Sprintf("threads=%d", threads), func(b *testing.B) {
			samples := map[string][]float64{}
			for i := 0; i < b.N; i++ {
				for _, m := range modes {
					samples[m.name] = append(samples[m.name], m.run(b, threads))
				}
			}
			med := map[string]float64{}
			for _, m := range modes {
				med[m.name] = median(samples[m.name])
				b.ReportMetric(med[m.name], m.name+"-ns/pair")
			}
			if ht, ok := med["heaptrack"]; ok && ht > med["untraced"] {
				b.ReportMetric((med["fp"]-med["untraced"])/(ht-med["untraced"]), "fp-overhead/heaptrack")
				b.ReportMetric((med["dwarf"]-med["untraced"])/(ht-med["untraced"]), "dwarf-overhead/heaptrack")
				b.ReportMetric((med["tables"]-med["untraced"])/(ht-med["untraced"]), "tables-overhead/heaptrack")
			}
			b.ReportMetric(0, "ns/op")
		})
	}
}

func median(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// BenchmarkThreadStart measures what a new thread's setup costs. The
// preload_bounds workload times, in fresh threads, each way of finding a
// thread's stack bounds (getattr: pthread_getattr_np, which the setup must
// not call; query: PROCMAP_QUERY, the setup's way; parse: reading
// /proc/self/maps, its fallback on kernels before 6.11), with no and with
// 10,000 extra mappings; then preload_threads starts 2,000 threads of one
// malloc+free each, untraced and traced, and the difference per thread is
// the whole setup's cost (a ring handed on or made, the bounds, the first
// stack). Metrics are medians over the iterations.
func BenchmarkThreadStart(b *testing.B) {
	bounds := testutil.MustBuild(b, "preload_bounds", testutil.Options{})
	threads := testutil.MustBuild(b, "preload_threads", testutil.Options{})
	samples := map[string][]float64{}
	wall := func(cfg *Config) float64 {
		cmd := exec.Command(threads, "1000", "2", "1")
		if cfg != nil {
			c, err := New(*cfg, event.Discard)
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			if err := c.Prepare(cmd); err != nil {
				b.Fatal(err)
			}
		}
		start := time.Now()
		if err := cmd.Run(); err != nil {
			b.Fatal(err)
		}
		return float64(time.Since(start).Nanoseconds())
	}
	for i := 0; i < b.N; i++ {
		for _, maps := range []string{"0", "10000"} {
			out, err := exec.Command(bounds, "2000", maps).Output()
			if err != nil {
				b.Fatal(err)
			}
			for _, way := range []string{"getattr", "query", "parse"} {
				ns, err := churnValue(out, way)
				if err != nil {
					b.Fatal(err)
				}
				samples[way+"-maps="+maps] = append(samples[way+"-maps="+maps], ns)
			}
		}
		untraced := wall(nil)
		for _, u := range []event.Unwind{event.UnwindTables, event.UnwindFP} {
			samples["traced-"+u.String()] = append(samples["traced-"+u.String()], (wall(&Config{Unwind: u})-untraced)/2000)
		}
	}
	for name, xs := range samples {
		b.ReportMetric(median(xs), name+"-ns/thread")
	}
	b.ReportMetric(0, "ns/op")
}
