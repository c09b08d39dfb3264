package preload

import (
	"fmt"
	"math"
	"os/exec"
	"strings"
	"testing"

	"github.com/heapscope/heapscope/analyze"
	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/internal/testutil"
)

// TestSampling runs two threads that allocate (malloc, calloc), reallocate
// and free blocks of 8 to 12000 bytes, freeing some in the other thread,
// at a sampling rate of 16 KiB: only a sample of the allocations is
// recorded; every free and realloc recorded is of a block whose allocation
// was (a block not sampled leaves no trace); and every block recorded is
// freed by the end, as the program frees everything.
func TestSampling(t *testing.T) {
	bin := testutil.MustBuild(t, "sample_threads", testutil.Options{})
	r := trace(t, Config{SampleRate: 16 << 10, SampleSeed: 42}, bin, "20000")
	live := map[uint64]bool{}
	var allocs, frees, reallocs, bytes uint64
	for _, e := range r.of(r.pid) {
		switch e.Kind {
		case event.KindAlloc:
			if e.Addr == 0 {
				t.Errorf("a failed allocation recorded while sampling: %+v", e)
				continue
			}
			if live[e.Addr] {
				t.Errorf("allocation of %#x, recorded live already", e.Addr)
			}
			live[e.Addr] = true
			allocs++
			bytes += e.Size
		case event.KindFree:
			if !live[e.Addr] {
				t.Errorf("free of %#x, whose allocation was not recorded", e.Addr)
			}
			delete(live, e.Addr)
			frees++
		case event.KindRealloc:
			if e.OldAddr != 0 {
				if !live[e.OldAddr] {
					t.Errorf("realloc of %#x, whose allocation was not recorded", e.OldAddr)
				}
				delete(live, e.OldAddr)
			}
			if e.Addr != 0 {
				live[e.Addr] = true
			}
			reallocs++
		}
	}
	// 2 × 20000 allocations of 3 KB on average and a realloc of a third:
	// about 160 MB, 10000 samples at 16 KiB; far fewer than the calls.
	calls := uint64(2 * 20000 * 4 / 3)
	if allocs+reallocs == 0 || allocs+reallocs > calls/4 {
		t.Errorf("%d allocations and %d reallocations recorded of %d calls: not sampled", allocs, reallocs, calls)
	}
	if len(live) != 0 {
		t.Errorf("%d blocks recorded and never freed; the program frees every block", len(live))
	}
	t.Logf("recorded %d allocations (%d bytes), %d reallocations, %d frees", allocs, bytes, reallocs, frees)
}

// chainSite is one site of preload_rechain: the range of its code, what it
// allocated and leaked, and the variance of their estimates.
type chainSite struct {
	name                             string
	start, end                       uint64
	bytes, bytesVar, leaked, leakVar float64
}

func parseChainSites(t *testing.T, out string) []chainSite {
	t.Helper()
	var sites []chainSite
	for _, l := range strings.Split(out, "\n") {
		var s chainSite
		if n, _ := fmt.Sscanf(l, "site %s %v %v %g %g %g %g", &s.name, &s.start, &s.end, &s.bytes, &s.bytesVar, &s.leaked, &s.leakVar); n == 7 {
			sites = append(sites, s)
		}
	}
	if len(sites) != 3 {
		t.Fatalf("preload_rechain said %q", out)
	}
	return sites
}

// chainEstimates sums, per site of preload_rechain, the estimated bytes
// allocated and leaked of the profile's stacks whose innermost frame is in
// the site's code.
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

// TestSampleReallocChains samples preload_rechain at 64 KiB with 10 seeds:
// realloc chains of 16 B to 64 KiB (freed) and to 8 KiB (leaked), and
// plain mallocs of the same sizes. The estimates of bytes allocated and
// leaked at each site, averaged over the seeds, must be within 3 standard
// errors of the truth, and each run's within 5. A realloc's result used to
// keep its old block's place in the sample and weigh by its new size alone:
// the chains came out at about twice their bytes.
func TestSampleReallocChains(t *testing.T) {
	bin := testutil.MustBuild(t, "preload_rechain", testutil.Options{})
	const rate, seeds = 64 << 10, 10
	var sites []chainSite
	sum := make([][2]float64, 3)
	for seed := uint64(1); seed <= seeds; seed++ {
		m := analyze.New(analyze.Options{SampleRate: rate})
		cmd := exec.Command(bin, fmt.Sprint(rate))
		var out strings.Builder
		cmd.Stdout = &out
		runUnder(t, Config{SampleRate: rate, SampleSeed: seed}, m, cmd)
		sites = parseChainSites(t, out.String())
		bytes, leaked := chainEstimates(m.Profile(), sites)
		for i, s := range sites {
			if d := math.Abs(bytes[i] - s.bytes); d > 5*math.Sqrt(s.bytesVar) {
				t.Errorf("seed %d: %s: estimated %.0f bytes allocated, truth %.0f ± %.0f (5 sd)", seed, s.name, bytes[i], s.bytes, 5*math.Sqrt(s.bytesVar))
			}
			if d := math.Abs(leaked[i] - s.leaked); d > 5*math.Sqrt(s.leakVar) {
				t.Errorf("seed %d: %s: estimated %.0f bytes leaked, truth %.0f ± %.0f (5 sd)", seed, s.name, leaked[i], s.leaked, 5*math.Sqrt(s.leakVar))
			}
			sum[i][0] += bytes[i]
			sum[i][1] += leaked[i]
		}
	}
	for i, s := range sites {
		mb, ml := sum[i][0]/seeds, sum[i][1]/seeds
		seB, seL := math.Sqrt(s.bytesVar/seeds), math.Sqrt(s.leakVar/seeds)
		t.Logf("%s: allocated %.0f, mean estimate %+.2f%% (se %.2f%%); leaked %.0f, mean estimate %.0f (se %.0f)", s.name, s.bytes,
			100*(mb/s.bytes-1), 100*seB/s.bytes, s.leaked, ml, seL)
		if math.Abs(mb-s.bytes) > 3*seB {
			t.Errorf("%s: mean estimate of bytes allocated %.0f, truth %.0f ± %.0f (3 se)", s.name, mb, s.bytes, 3*seB)
		}
		if math.Abs(ml-s.leaked) > 3*seL {
			t.Errorf("%s: mean estimate of bytes leaked %.0f, truth %.0f ± %.0f (3 se)", s.name, ml, s.leaked, 3*seL)
		}
	}
}
