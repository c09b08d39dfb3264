package ebpf

import (
	"fmt"
	"math"
	"testing"

	"github.com/heapscope/heapscope/analyze"
	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/internal/testutil"
)

// chainSite is one site of preload_rechain: the range of its code, what it
// allocated and leaked, and the variance of their estimates.
type chainSite struct {
	name                             string
	start, end                       uint64
	bytes, bytesVar, leaked, leakVar float64
}

// TestSampleReallocChains samples preload_rechain (realloc chains of 16 B
// to 64 KiB, freed, and to 8 KiB, leaked, and plain mallocs of the same
// sizes) at 64 KiB in BPF, 10 runs in stream mode and 10 in aggregate mode,
// each read by the analysis side. The estimates of bytes allocated and
// leaked at each site, averaged over the runs, must be within 3 standard
// errors of the truth, and each run's within 5. The realloc of a sampled
// block used to be recorded whatever its draw and weigh by its new size:
// the chains came out at about twice their bytes. (The interposer follows
// the same rule: internal/preload's TestSampleReallocChains.)
func TestSampleReallocChains(t *testing.T) {
	t.Cleanup(testutil.Cleanup)
	bin := testutil.MustBuild(t, "preload_rechain", testutil.Options{})
	const rate, runs = 64 << 10, 10
	for _, mode := range []event.CaptureMode{event.Stream, event.Aggregate} {
		t.Run(mode.String(), func(t *testing.T) {
			var sites []chainSite
			sum := make([][2]float64, 3)
			for run := 1; run <= runs; run++ {
				m := analyze.New(analyze.Options{SampleRate: rate})
				tr := newTracer(t, Config{Mode: mode, Sample: rate}, m)
				w := startWorkload(t, bin, fmt.Sprint(rate), "wait")
				if err := tr.Attach(w.pid()); err != nil {
					t.Fatal(err)
				}
				w.release(t)
				sites = parseChainSites(t, w.lines(t, "done"))
				w.wait(t)
				mustFlush(t, tr)
				if err := tr.Close(); err != nil {
					t.Fatal(err)
				}
				if st := tr.Stats(); st.TotalLost() != 0 {
					t.Fatalf("run %d: %d events lost", run, st.TotalLost())
				}
				bytes, leaked := chainEstimates(m.Profile(), sites)
				for i, s := range sites {
					if d := math.Abs(bytes[i] - s.bytes); d > 5*math.Sqrt(s.bytesVar) {
						t.Errorf("run %d: %s: estimated %.0f bytes allocated, truth %.0f ± %.0f (5 sd)", run, s.name, bytes[i], s.bytes, 5*math.Sqrt(s.bytesVar))
					}
					if d := math.Abs(leaked[i] - s.leaked); d > 5*math.Sqrt(s.leakVar) {
						t.Errorf("run %d: %s: estimated %.0f bytes leaked, truth %.0f ± %.0f (5 sd)", run, s.name, leaked[i], s.leaked, 5*math.Sqrt(s.leakVar))
					}
					sum[i][0] += bytes[i]
					sum[i][1] += leaked[i]
				}
			}
			for i, s := range sites {
				mb, ml := sum[i][0]/runs, sum[i][1]/runs
				seB, seL := math.Sqrt(s.bytesVar/runs), math.Sqrt(s.leakVar/runs)
				t.Logf("%s: allocated %.0f, mean estimate %+.2f%% (se %.2f%%); leaked %.0f, mean estimate %.0f (se %.0f)",
					s.name, s.bytes, 100*(mb/s.bytes-1), 100*seB/s.bytes, s.leaked, ml, seL)
				if math.Abs(mb-s.bytes) > 3*seB {
					t.Errorf("%s: mean estimate of bytes allocated %.0f, truth %.0f ± %.0f (3 se)", s.name, mb, s.bytes, 3*seB)
				}
				if math.Abs(ml-s.leaked) > 3*seL {
					t.Errorf("%s: mean estimate of bytes leaked %.0f, truth %.0f ± %.0f (3 se)", s.name, ml, s.leaked, 3*seL)
				}
			}
		})
	}
}

func parseChainSites(t *testing.T, lines []string) []chainSite {
	t.Helper()
	var sites []chainSite
	for _, l := range lines {
		var s chainSite
		if n, _ := fmt.Sscanf(l, "site %s %v %v %g %g %g %g", &s.name, &s.start, &s.end, &s.bytes, &s.bytesVar, &s.leaked, &s.leakVar); n == 7 {
			sites = append(sites, s)
		}
	}
	if len(sites) != 3 {
		t.Fatalf("preload_rechain said %q", lines)
	}
	return sites
}

// chainEstimates sums, per site, the estimated bytes allocated and leaked
// of the profile's stacks whose innermost frame returns into the site.
func chainEstimates(p *analyze.Profile, sites []chainSite) (bytes, leaked []float64) {
	bytes, leaked = make([]float64, len(sites)), make([]float64, len(sites))
	for _, st := range p.Stacks {
		if len(st.Frames) == 0 {
			continue
		}
		for i, s := range sites {
			if f := st.Frames[0]; f > s.start && f <= s.end {
				bytes[i] += float64(st.Bytes)
				leaked[i] += float64(st.LiveBytes)
			}
		}
	}
	return bytes, leaked
}
