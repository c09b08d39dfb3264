package main

import (
	"bufio"
	"bytes"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/heapscope/heapscope/internal/ebpf"
	"github.com/heapscope/heapscope/internal/testutil"
)

// TestSampleAccuracy runs sample_sites (sites of known totals, from 64 KB
// to 400 MiB, in blocks of 64 bytes to 4 MiB) under `heapscope run --sample
// 64KiB` with several seeds, and checks the report's estimates against the
// totals the program prints (see sampleSites). It logs each site's mean
// error and spread over the seeds: an unbiased estimator's mean error is
// near 0.
func TestSampleAccuracy(t *testing.T) {
	t.Cleanup(testutil.Cleanup)
	bin := testutil.MustBuild(t, "sample_sites", testutil.Options{})
	dir := t.TempDir()
	seeds := []int{1, 2, 3, 4, 5}
	errs := map[string][][2]float64{} // site → per seed: alloc error, leak error
	var sites map[string]siteTruth
	for _, seed := range seeds {
		var got map[string][2]float64
		sites, got = sampleSites(t, bin, filepath.Join(dir, fmt.Sprintf("s%d", seed)), fmt.Sprintf("seed %d", seed),
			[]string{fmt.Sprintf("HEAPSCOPE_SAMPLE_SEED=%d", seed)})
		for name, e := range got {
			errs[name] = append(errs[name], e)
		}
	}
	logSampleErrors(t, sites, errs)
}

// TestSampleAccuracyEBPF is TestSampleAccuracy's check with the sampling
// done in BPF (`run --provider ebpf --sample 64KiB`), once: the BPF
// program draws from the kernel's generator, which takes no seed, and a
// run takes minutes (about 8 million allocations, each still trapping).
func TestSampleAccuracyEBPF(t *testing.T) {
	sampleOnceEBPF(t, "ebpf", "--provider", "ebpf")
}

// TestSampleAccuracyEBPFAggregate is TestSampleAccuracyEBPF in aggregate
// mode (`--mode aggregate`): the kernel keeps per-stack sums, each sampled
// block adding the bytes and objects it stands for, weighed in BPF, and
// its free taking them away; the same bounds hold.
func TestSampleAccuracyEBPFAggregate(t *testing.T) {
	sampleOnceEBPF(t, "ebpf aggregate", "--provider", "ebpf", "--mode", "aggregate")
}

// sampleOnceEBPF runs sampleSites once with the eBPF provider and flags,
// and logs its errors (the eBPF provider takes no seed: runs cannot be
// repeated alike, and each takes minutes).
func sampleOnceEBPF(t *testing.T, label string, flags ...string) {
	t.Helper()
	testutil.SkipWithoutEBPF(t, ebpf.Available())
	if testing.Short() {
		t.Skip("-short: this run takes minutes")
	}
	t.Cleanup(testutil.Cleanup)
	bin := testutil.MustBuild(t, "sample_sites", testutil.Options{})
	sites, got := sampleSites(t, bin, filepath.Join(t.TempDir(), "e"), label, nil, flags...)
	errs := map[string][][2]float64{}
	for name, e := range got {
		errs[name] = append(errs[name], e)
	}
	logSampleErrors(t, sites, errs)
}

type siteTruth struct{ alloc, leak float64 }

// sampleSites runs sample_sites (bin) under `heapscope run --sample 64KiB`
// with the extra flags and environment, reports the trace at path+".hst"
// as JSON, and checks the estimates against the totals the program prints:
// bytes allocated within 5% for every site of at least 64 MiB, bytes
// leaked within 10% for every site leaking at least 16 MiB; a site that
// leaks nothing (site_realloc too) has no estimated leak; no free is
// unmatched (a free recorded for a block whose allocation was not) nor
// missed. The sites are big enough that a run fails with a probability of
// about 1e-4 (4 standard deviations). It returns the truth and, per site,
// the relative error of the estimated bytes allocated and leaked.
func sampleSites(t *testing.T, bin, path, label string, env []string, flags ...string) (map[string]siteTruth, map[string][2]float64) {
	t.Helper()
	trace := path + ".hst"
	args := append([]string{"run", "-q", "--sample", "64KiB", "-o", trace}, flags...)
	cmd := cli(t, append(args, "--", bin)...)
	cmd.Env = append(cmd.Env, env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: %v: %s", label, err, stderr.String())
	}
	sites := map[string]siteTruth{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 4 && f[0] == "site" {
			a, _ := strconv.ParseFloat(f[2], 64)
			l, _ := strconv.ParseFloat(f[3], 64)
			sites[f[1]] = siteTruth{a, l}
		}
	}
	if len(sites) != 8 {
		t.Fatalf("%s: the workload printed %d sites: %s", label, len(sites), out)
	}
	js := path + ".json"
	if code, e := runCLI(t, "report", "--format", "json", "-o", js, trace); code != 0 {
		t.Fatalf("%s: report: exit %d: %s", label, code, e)
	}
	d := readReportJSON(t, js)
	if d.Trace.SampleRate != 64<<10 || !strings.Contains(d.Trace.Estimated, "estimated (sampled every 64 KiB on average)") {
		t.Fatalf("%s: the report does not say it is sampled: %+v", label, d.Trace)
	}
	recorded, most := d.Trace.SampledAllocations, uint64(8_000_000/50)
	if d.Trace.Aggregate && d.Stats != nil {
		// Snapshots hold sums: what the kernel's tables took in are
		// the sampled allocations and their frees.
		recorded, most = d.Stats.Delivered, 2*most
	}
	if recorded == 0 || recorded > most {
		t.Errorf("%s: %d allocations or calls recorded of about 8 million: not sampled", label, recorded)
	}
	if d.Trace.LostEvents != 0 {
		t.Errorf("%s: %d events lost", label, d.Trace.LostEvents)
	}
	// A free is recorded only for a block whose allocation was: none
	// is unmatched, and none is missed (a sampled block's free lost).
	if d.Summary.UnmatchedFrees != 0 || d.Summary.MissedFrees != 0 {
		t.Errorf("%s: %d unmatched frees, %d missed frees; want none", label, d.Summary.UnmatchedFrees, d.Summary.MissedFrees)
	}
	got := byFunction(d)
	errs := map[string][2]float64{}
	for name, tr := range sites {
		g := got[name]
		if g == nil {
			// Not one of its allocations was sampled: likely for a
			// site of less than R bytes, an error for a big one.
			g = &fnTotals{}
			if tr.alloc >= 1<<20 {
				t.Errorf("%s: no site %s in the report", label, name)
			}
		}
		ea := float64(g.bytes)/tr.alloc - 1
		el := 0.0
		if tr.leak > 0 {
			el = float64(g.leaked)/tr.leak - 1
		} else if g.leaked != 0 {
			t.Errorf("%s: %s leaked nothing, estimated %d bytes", label, name, g.leaked)
		}
		errs[name] = [2]float64{ea, el}
		if tr.alloc >= 64<<20 && math.Abs(ea) > 0.05 {
			t.Errorf("%s: %s: %.0f bytes allocated, estimated %d (%+.1f%%, more than 5%%)", label, name, tr.alloc, g.bytes, 100*ea)
		}
		if tr.leak >= 16<<20 && math.Abs(el) > 0.10 {
			t.Errorf("%s: %s: %.0f bytes leaked, estimated %d (%+.1f%%, more than 10%%)", label, name, tr.leak, g.leaked, 100*el)
		}
	}
	return sites, errs
}

// logSampleErrors logs each site's mean error and its spread over runs.
func logSampleErrors(t *testing.T, sites map[string]siteTruth, errs map[string][][2]float64) {
	stat := func(v []float64) (mean, sd float64) {
		for _, x := range v {
			mean += x
		}
		mean /= float64(len(v))
		for _, x := range v {
			sd += (x - mean) * (x - mean)
		}
		return mean, math.Sqrt(sd / float64(len(v)-1))
	}
	for _, name := range []string{"site_large", "site_small", "site_medium", "site_mixed", "site_tiny", "leak_large", "leak_small", "site_realloc"} {
		var a, l []float64
		for _, e := range errs[name] {
			a, l = append(a, e[0]), append(l, e[1])
		}
		if len(a) == 0 {
			continue
		}
		if len(a) == 1 {
			line := fmt.Sprintf("%-12s allocated %6.0f MiB: error %+.2f%%", name, sites[name].alloc/(1<<20), 100*a[0])
			if sites[name].leak > 0 {
				line += fmt.Sprintf("; leaked %4.0f MiB: error %+.2f%%", sites[name].leak/(1<<20), 100*l[0])
			}
			t.Log(line)
			continue
		}
		am, as := stat(a)
		line := fmt.Sprintf("%-12s allocated %6.0f MiB: error mean %+.2f%%, sd %.2f%%", name, sites[name].alloc/(1<<20), 100*am, 100*as)
		if sites[name].leak > 0 {
			lm, ls := stat(l)
			line += fmt.Sprintf("; leaked %4.0f MiB: error mean %+.2f%%, sd %.2f%%", sites[name].leak/(1<<20), 100*lm, 100*ls)
		}
		t.Log(line)
	}
}

// TestSamplePprof: run's summary says it sampled; the pprof profile of a sampled trace carries the
// estimates, already scaled, and the sampling period, and `go tool pprof
// -top` reads them: each big site within 5% of what the program allocated.
func TestSamplePprof(t *testing.T) {
	t.Cleanup(testutil.Cleanup)
	bin := testutil.MustBuild(t, "sample_sites", testutil.Options{})
	dir := t.TempDir()
	trace, prof := filepath.Join(dir, "s.hst"), filepath.Join(dir, "s.pb.gz")
	cmd := cli(t, "run", "--sample", "64KiB", "-o", trace, "--", bin)
	cmd.Env = append(cmd.Env, "HEAPSCOPE_SAMPLE_SEED=7")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	// The run's summary says what it sampled.
	for _, want := range []string{
		"SUMMARY: estimated (sampled every 64 KiB on average)",
		"temporary              not available when sampled",
		"sampling  one allocation per 65536 bytes allocated on average: ",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the summary does not say %q:\n%s", want, out)
		}
	}
	if code, e := runCLI(t, "export", "--format", "pprof", "-o", prof, trace); code != 0 {
		t.Fatalf("export: exit %d: %s", code, e)
	}
	top, err := exec.Command("go", "tool", "pprof", "-top", "-sample_index=alloc_space", "-unit=byte", prof).CombinedOutput()
	if err != nil {
		t.Fatalf("go tool pprof: %v: %s", err, top)
	}
	if !strings.Contains(string(top), "estimated (sampled every 64 KiB on average)") {
		t.Errorf("the profile's comments do not say it is estimated:\n%s", top)
	}
	want := map[string]float64{"site_small": 400 << 20, "site_medium": 400 << 20, "site_large": 400 << 20, "leak_small": 400 << 20}
	for _, line := range strings.Split(string(top), "\n") {
		f := strings.Fields(line)
		if len(f) != 6 {
			continue
		}
		w, ok := want[f[5]]
		if !ok {
			continue
		}
		delete(want, f[5])
		flat, err := strconv.ParseFloat(strings.TrimSuffix(f[0], "B"), 64)
		if err != nil || math.Abs(flat/w-1) > 0.05 {
			t.Errorf("%s: pprof reads %s, want %.0f within 5%%", f[5], f[0], w)
		}
	}
	if len(want) > 0 {
		t.Errorf("sites missing from go tool pprof -top: %v\n%s", want, top)
	}
	raw, err := exec.Command("go", "tool", "pprof", "-raw", prof).CombinedOutput()
	if err != nil || !strings.Contains(string(raw), "Period: 65536") {
		t.Errorf("the profile's period is not the sampling rate: %v\n%s", err, raw)
	}
}

// TestSampleQuery: `heapscope query` on a running sampled session shows the
// rate and how many allocations it recorded.
func TestSampleQuery(t *testing.T) {
	t.Cleanup(testutil.Cleanup)
	bin := testutil.MustBuild(t, "preload_wait", testutil.Options{})
	name := fmt.Sprintf("sample-query-%d", os.Getpid())
	defer runWaiting(t, "run", "-q", "--name", name, "--sample", "4KiB", "--flush-interval", "10ms",
		"-o", filepath.Join(t.TempDir(), "q.hst"), "--", bin, "20000")()
	var err error
	// 20000 blocks of 48 bytes are about 234 samples at 4 KiB: wait until
	// the collector delivered some.
	re := regexp.MustCompile(`sampling  one allocation per 4096 bytes allocated on average: (\d+) allocations recorded`)
	var out []byte
	for i := 0; i < 100; i++ {
		out, err = cli(t, "query", name).CombinedOutput()
		if m := re.FindSubmatch(out); err == nil && m != nil && string(m[1]) != "0" {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Errorf("query never showed the sampling rate and a count above 0: %v\n%s", err, out)
}

// TestSampleAggregateSummary: run's summary of a sampled aggregate session
// says its numbers are estimates and counts what the kernel's tables took
// in (the calls of sampled blocks), not "0 allocations recorded".
func TestSampleAggregateSummary(t *testing.T) {
	testutil.SkipWithoutEBPF(t, ebpf.Available())
	t.Cleanup(testutil.Cleanup)
	bin := testutil.MustBuild(t, "ebpf_churn", testutil.Options{})
	out, err := cli(t, "run", "--provider", "ebpf", "--mode", "aggregate", "--sample", "4KiB",
		"-o", filepath.Join(t.TempDir(), "a.hst"), "--", bin, "20000", "1").CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	re := regexp.MustCompile(`sampling  one allocation per 4096 bytes allocated on average: (\d+) calls of sampled blocks accounted in the kernel's tables`)
	m := re.FindSubmatch(out)
	if m == nil || string(m[1]) == "0" || !strings.Contains(string(out), "SUMMARY: estimated (sampled every 4 KiB on average)") {
		t.Errorf("the summary does not say it is estimated and what it rests on:\n%s", out)
	}
}
