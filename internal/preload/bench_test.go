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

func nsPerPair(out []byte) (float64, error) {
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 2 && f[0] == "ns_per_pair" {
			return strconv.ParseFloat(f[1], 64)
		}
	}
	return 0, fmt.Errorf("no ns_per_pair in %q", out)
}

// BenchmarkChurn measures the cost per malloc+free pair of the churn
// workload traced by a Collector (frame-pointer stacks on allocations,
// the default), with one and two threads, against the untraced workload.
// Each iteration is one run of 2M pairs per thread; ns/pair is the median
// reported by the workload over the iterations.
func BenchmarkChurn(b *testing.B) {
	for _, mode := range []struct {
		name string
		cfg  *Config
	}{
		{"untraced", nil},
		{"fp", &Config{}},
		{"nostacks", &Config{Stacks: NoStacks}},
		{"dwarf", &Config{Unwind: UnwindDWARF}},
	} {
		for _, threads := range []int{1, 2} {
			b.Run(fmt.Sprintf("%s/threads=%d", mode.name, threads), func(b *testing.B) {
				var samples []float64
				for i := 0; i < b.N; i++ {
					ns, events := churn(b, mode.cfg, 2_000_000, threads)
					if mode.cfg != nil && events < uint64(4_000_000*threads) {
						b.Fatalf("sink saw %d events, want at least %d", events, 4_000_000*threads)
					}
					samples = append(samples, ns)
				}
				b.ReportMetric(median(samples), "ns/pair")
			})
		}
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
