package main

import (
	"bufio"
	"math"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/heapscope/heapscope/internal/testutil"
	"github.com/heapscope/heapscope/internal/tracetest"
	"github.com/heapscope/heapscope/report"
)

// recordPreload runs bin under the preload provider into a trace file at
// path, as `heapscope run` does: collector → trace writer.
func recordPreload(t *testing.T, path string, bin string, args ...string) {
	t.Helper()
	tracetest.Record(t, path, bin, args...)
}

// site totals by the function of the first frame outside the allocator.
type fnTotals struct {
	calls, bytes, temporary, peak, leaked, leakedBlocks, peakBlocks uint64
}

func byFunction(d *report.JSON) map[string]*fnTotals {
	m := map[string]*fnTotals{}
	get := func(st []report.JSONFrame) *fnTotals {
		fn := "[no stack]"
		if len(st) > 0 {
			fn = st[0].Function
		}
		if m[fn] == nil {
			m[fn] = &fnTotals{}
		}
		return m[fn]
	}
	for _, s := range d.Allocations {
		f := get(s.Stack)
		f.calls += s.Allocations + s.Reallocations
		f.bytes += s.Bytes
		f.temporary += s.Temporary
	}
	for _, s := range d.Peak {
		f := get(s.Stack)
		f.peak += s.Bytes
		f.peakBlocks += s.Blocks
	}
	for _, s := range d.Leaks {
		f := get(s.Stack)
		f.leaked += s.Bytes
		f.leakedBlocks += s.Blocks
	}
	return m
}

// The sites of report_known.c and what each does (see its comment).
var knownSites = map[string]fnTotals{
	"leak_site":    {calls: 3, bytes: 3000, leaked: 3000, leakedBlocks: 3, peak: 3000, peakBlocks: 3},
	"calloc_site":  {calls: 1, bytes: 1024, leaked: 1024, leakedBlocks: 1, peak: 1024, peakBlocks: 1},
	"peak_site":    {calls: 10, bytes: 100000, peak: 100000, peakBlocks: 10},
	"temp_site":    {calls: 50, bytes: 50 * 64, temporary: 50},
	"realloc_site": {calls: 1, bytes: 100, temporary: 1},  // the realloc moves it right away
	"grow_site":    {calls: 1, bytes: 5000, temporary: 1}, // freed right after
	"aligned_site": {calls: 2, bytes: 4096 + 256},
}

func TestEndToEndPreload(t *testing.T) {
	t.Cleanup(testutil.Cleanup)
	bin := testutil.MustBuild(t, "report_known", testutil.Options{})
	dir := t.TempDir()
	trace := filepath.Join(dir, "known.hst")
	recordPreload(t, trace, bin)
	d := reportJSON(t, trace)
	if d.Trace.Events == 0 || len(d.Leaks) == 0 {
		t.Fatalf("the trace has %d events and %d leak sites: the provider delivered nothing", d.Trace.Events, len(d.Leaks))
	}
	got := byFunction(d)
	for fn, want := range knownSites {
		g := got[fn]
		if g == nil {
			t.Errorf("no site %s in the report", fn)
			continue
		}
		if *g != want {
			t.Errorf("%s: got %+v, want %+v", fn, *g, want)
		}
	}
	// Nothing of the allocator or the interposer is left at the top.
	for fn := range got {
		switch fn {
		case "malloc", "calloc", "realloc", "free", "posix_memalign", "aligned_alloc",
			"__libc_malloc", "__libc_calloc", "__libc_realloc", "__posix_memalign", "_int_malloc", "_mid_memalign":
			t.Errorf("a site starts in the allocator: %s", fn)
		}
	}
	for _, s := range d.Allocations {
		if len(s.Stack) > 0 && strings.Contains(filepath.Base(s.Stack[0].Module), "libheapscope") {
			t.Errorf("a site starts in the interposer: %+v", s.Stack[0])
		}
	}
	// Frames have file:line and module.
	leak := d.Leaks[0]
	for _, l := range d.Leaks {
		if l.Stack[0].Function == "leak_site" {
			leak = l
		}
	}
	if f := leak.Stack[0]; !strings.HasSuffix(f.File, "report_known.c") || f.Line == 0 || f.Module != bin {
		t.Errorf("leak_site frame %+v", f)
	}
	if len(leak.Stack) < 2 || leak.Stack[1].Function != "main" {
		t.Errorf("leak_site is not called from main: %+v", leak.Stack)
	}

	// Totals: the program's own allocations are all of them (it uses no
	// stdio), and the peak is its known peak, reached in peak_site.
	s := d.Summary
	if s.Allocations != 67 || s.Reallocations != 1 || s.LeakedBytes != 4024 || s.LeakedBlocks != 4 ||
		s.PeakBytes != 104024 || s.PeakBlocks != 14 || s.TemporaryAllocations != 52 || s.UnmatchedFrees != 0 {
		t.Errorf("summary %+v", s)
	}
	var peakSum uint64
	for _, p := range d.Peak {
		peakSum += p.Bytes
	}
	if peakSum != s.PeakBytes {
		t.Errorf("peak consumers add up to %d, peak is %d", peakSum, s.PeakBytes)
	}
	if d.Trace.LostEvents != 0 || d.Trace.Events == 0 || len(d.Processes) != 1 || !d.Processes[0].Exited {
		t.Errorf("trace %+v processes %+v", d.Trace, d.Processes)
	}

	// The pprof export carries the same numbers.
	pb := filepath.Join(dir, "known.pb.gz")
	if code, errs := runCLI(t, "export", "-o", pb, trace); code != 0 {
		t.Fatalf("export: exit %d: %s", code, errs)
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("need the go command: %v", err)
	}
	top, err := exec.Command(goTool, "tool", "pprof", "-top", "-sample_index=inuse_space", pb).CombinedOutput()
	if err != nil || !strings.Contains(string(top), "leak_site") || !strings.Contains(string(top), "calloc_site") {
		t.Errorf("go tool pprof -top: %v\n%s", err, top)
	}
}

// TestAgainstHeaptrack records the same program with heaptrack and with
// heapscope and compares heaptrack_print's totals and per-site numbers with
// the report's. The program links libstdc++ so that both runs load the same
// libraries: heaptrack's own interposer needs libstdc++, whose start-up
// allocates a 71 KiB exception pool in the traced process.
func TestAgainstHeaptrack(t *testing.T) {
	if _, err := exec.LookPath("heaptrack"); err != nil {
		t.Fatalf("heaptrack is needed (CI installs it): %v", err)
	}
	t.Cleanup(testutil.Cleanup)
	bin := testutil.MustBuild(t, "report_known", testutil.Options{Flags: []string{"-Wl,--no-as-needed", "-lstdc++"}})
	dir := t.TempDir()

	htBase := filepath.Join(dir, "ht")
	if out, err := exec.Command("heaptrack", "-o", htBase, bin).CombinedOutput(); err != nil {
		t.Fatalf("heaptrack: %v\n%s", err, out)
	}
	files, _ := filepath.Glob(htBase + ".*")
	if len(files) != 1 {
		t.Fatalf("heaptrack wrote %v", files)
	}
	htOut, err := exec.Command("heaptrack_print", "-l", "1", "-n", "100", files[0]).Output()
	if err != nil {
		t.Fatalf("heaptrack_print: %v", err)
	}
	ht := parseHeaptrack(t, string(htOut))

	trace := filepath.Join(dir, "hs.hst")
	recordPreload(t, trace, bin)
	d := reportJSON(t, trace)
	s := d.Summary

	ht.peak.compare(t, "peak heap memory consumption", s.PeakBytes)
	// At exit heaptrack calls __gnu_cxx::__freeres, which frees
	// libstdc++'s exception pool; heapscope reports what the program left.
	leaked := s.LeakedBytes
	for _, l := range d.Leaks {
		if len(l.Stack) > 0 && strings.HasPrefix(filepath.Base(l.Stack[0].Module), "libstdc++") {
			leaked -= l.Bytes
		}
	}
	ht.leaked.compareLeak(t, "total memory leaked (but libstdc++'s pool)", leaked)
	if calls := s.Allocations + s.Reallocations; calls != ht.calls {
		t.Errorf("calls to allocation functions: heapscope %d, heaptrack %d", calls, ht.calls)
	}
	ours := byFunction(d)
	for fn := range knownSites {
		h, o := ht.sites[fn], ours[fn]
		if h == nil || o == nil {
			t.Errorf("%s: heaptrack %v, heapscope %v", fn, h, o)
			continue
		}
		if h.calls != o.calls {
			t.Errorf("%s: %d calls, heaptrack %d", fn, o.calls, h.calls)
		}
		h.peak.compare(t, fn+" peak", o.peak)
		h.leaked.compareLeak(t, fn+" leaked", o.leaked)
		// heaptrack decides "temporary" by comparing the (size, stack) of
		// a free's block with that of the last allocation, not the block:
		// after peak_site's ten equal blocks, freeing blocks[0] right after
		// allocating blocks[9] counts as temporary there. heapscope looks at
		// the block itself.
		if fn != "peak_site" && h.temporary != o.temporary {
			t.Errorf("%s: %d temporary, heaptrack %d", fn, o.temporary, h.temporary)
		}
	}
	// The count by heaptrack's own definition is heaptrack's, but one: at
	// exit heaptrack's __gnu_cxx::__freeres frees libstdc++'s pool, the
	// process's first allocation, whose allocation info is number 0, and
	// heaptrack resets its last allocation to 0 after every free, so that
	// free counts as a temporary there.
	if s.HeaptrackTemporary+1 != ht.temporary {
		t.Errorf("temporaries by heaptrack's definition: heapscope %d, heaptrack %d (want heaptrack's less the pool's)", s.HeaptrackTemporary, ht.temporary)
	}
}

// TestTemporariesAgainstHeaptrack: on single-threaded sqlite3 heaptrack
// counts several times the temporaries heapscope counts, because it
// compares a free's (stack, size) with the last allocation's, not its
// block. The report's count by heaptrack's definition is heaptrack's own
// (two runs of the same program: within 1%), and heapscope's is far below
// it, as the report's definitions say.
func TestTemporariesAgainstHeaptrack(t *testing.T) {
	testutil.Tool(t, "heaptrack")
	sqlite := testutil.Tool(t, "sqlite3")
	t.Cleanup(testutil.Cleanup)
	dir := t.TempDir()
	args := []string{":memory:", "create table t(x text); insert into t select hex(randomblob(64)) from generate_series(1,50000); " +
		"create index i on t(x); select count(distinct x) from t;"}
	htBase := filepath.Join(dir, "ht")
	if out, err := exec.Command("heaptrack", append([]string{"-o", htBase, sqlite}, args...)...).CombinedOutput(); err != nil {
		t.Fatalf("heaptrack: %v\n%s", err, out)
	}
	files, _ := filepath.Glob(htBase + ".*")
	if len(files) != 1 {
		t.Fatalf("heaptrack wrote %v", files)
	}
	htOut, err := exec.Command("heaptrack_print", "-l", "1", "-n", "1", files[0]).Output()
	if err != nil {
		t.Fatalf("heaptrack_print: %v", err)
	}
	ht := parseHeaptrack(t, string(htOut))
	trace := filepath.Join(dir, "hs.hst")
	recordPreload(t, trace, sqlite, args...)
	d := reportJSON(t, trace)
	s := d.Summary
	t.Logf("temporaries: heaptrack %d; heapscope %d, by heaptrack's definition %d", ht.temporary, s.TemporaryAllocations, s.HeaptrackTemporary)
	if ht.temporary == 0 || math.Abs(float64(s.HeaptrackTemporary)-float64(ht.temporary)) > 0.01*float64(ht.temporary) {
		t.Errorf("temporaries by heaptrack's definition: heapscope %d, heaptrack %d (want within 1%%)", s.HeaptrackTemporary, ht.temporary)
	}
	if 3*s.TemporaryAllocations > ht.temporary {
		t.Errorf("heapscope's temporaries %d, heaptrack's %d: want heaptrack's several times more", s.TemporaryAllocations, ht.temporary)
	}
	for _, want := range []string{"whichever block", "same stack", "of any thread"} {
		if !strings.Contains(d.Definitions["temporary"], want) {
			t.Errorf("definitions.temporary %q lacks %q", d.Definitions["temporary"], want)
		}
	}
}

// htSize is a size as heaptrack_print writes it ("176.73K", "1000B") and
// the rounding that writing lost.
type htSize struct {
	v, tol float64
	seen   bool
}

func (h htSize) compare(t *testing.T, what string, ours uint64) {
	t.Helper()
	if !h.seen {
		if ours != 0 {
			t.Errorf("%s: heapscope %d, heaptrack none", what, ours)
		}
		return
	}
	if d := float64(ours) - h.v; d > h.tol || d < -h.tol {
		t.Errorf("%s: heapscope %d bytes, heaptrack %.0f (±%.0f)", what, ours, h.v, h.tol)
	}
}

// compareLeak is compare for leaks, which heaptrack_print omits when 0.
func (h htSize) compareLeak(t *testing.T, what string, ours uint64) {
	t.Helper()
	h.seen = true
	h.compare(t, what, ours)
}

func parseHTSize(t *testing.T, s string) htSize {
	t.Helper()
	mult := map[byte]float64{'B': 1, 'K': 1e3, 'M': 1e6, 'G': 1e9}[s[len(s)-1]]
	num := s[:len(s)-1]
	v, err := strconv.ParseFloat(num, 64)
	if mult == 0 || err != nil {
		t.Fatalf("heaptrack size %q", s)
	}
	tol := 0.0
	if i := strings.IndexByte(num, '.'); i >= 0 {
		tol = 0.5 * mult / float64(pow10(len(num)-i-1))
	}
	return htSize{v: v * mult, tol: tol, seen: true}
}

func pow10(n int) int {
	p := 1
	for ; n > 0; n-- {
		p *= 10
	}
	return p
}

type htSite struct {
	calls, temporary uint64
	peak, leaked     htSize
}

var (
	htCalls = regexp.MustCompile(`^(\d+) calls to allocation functions with (\S+) peak consumption from$`)
	htPeak  = regexp.MustCompile(`^(\S+) peak memory consumed over (\d+) calls from$`)
	htLeak  = regexp.MustCompile(`^(\S+) leaked over (\d+) calls from$`)
	htTemp  = regexp.MustCompile(`^(\d+) temporary allocations of (\d+) allocations in total \(.*\) from$`)
)

// htParsed is what heaptrack_print said: its totals, and its sections
// keyed by the function of each merged site's first frame.
type htParsed struct {
	calls, temporary uint64
	peak, leaked     htSize
	sites            map[string]*htSite
}

func parseHeaptrack(t *testing.T, out string) *htParsed {
	t.Helper()
	p := &htParsed{sites: map[string]*htSite{}}
	var lines []string
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	site := func(i int) *htSite {
		if i+1 >= len(lines) {
			t.Fatalf("heaptrack_print output ends after %q", lines[i])
		}
		fn := lines[i+1]
		if p.sites[fn] == nil {
			p.sites[fn] = &htSite{}
		}
		return p.sites[fn]
	}
	gotTotals := 0
	for i, l := range lines {
		switch {
		case strings.HasPrefix(l, "calls to allocation functions: "):
			p.calls, _ = strconv.ParseUint(strings.Fields(l)[4], 10, 64)
			gotTotals++
		case strings.HasPrefix(l, "temporary memory allocations: "):
			p.temporary, _ = strconv.ParseUint(strings.Fields(l)[3], 10, 64)
		case strings.HasPrefix(l, "peak heap memory consumption: "):
			p.peak = parseHTSize(t, strings.Fields(l)[4])
			gotTotals++
		case strings.HasPrefix(l, "total memory leaked: "):
			p.leaked = parseHTSize(t, strings.Fields(l)[3])
			gotTotals++
		}
		if m := htCalls.FindStringSubmatch(l); m != nil {
			n, _ := strconv.ParseUint(m[1], 10, 64)
			site(i).calls += n
		} else if m := htPeak.FindStringSubmatch(l); m != nil {
			s := site(i)
			v := parseHTSize(t, m[1])
			s.peak = htSize{v: s.peak.v + v.v, tol: s.peak.tol + v.tol, seen: true}
		} else if m := htLeak.FindStringSubmatch(l); m != nil {
			s := site(i)
			v := parseHTSize(t, m[1])
			s.leaked = htSize{v: s.leaked.v + v.v, tol: s.leaked.tol + v.tol, seen: true}
		} else if m := htTemp.FindStringSubmatch(l); m != nil {
			n, _ := strconv.ParseUint(m[1], 10, 64)
			site(i).temporary += n
		}
	}
	if gotTotals != 3 {
		t.Fatalf("heaptrack_print's summary not found in:\n%s", out)
	}
	return p
}

// TestReportOfHeaptrackFile: a heaptrack trace given to report (as it
// writes it, zstd-compressed, or plain) is named as one, with what opens it.
func TestReportOfHeaptrackFile(t *testing.T) {
	testutil.Tool(t, "heaptrack")
	dir := t.TempDir()
	bin := testutil.MustBuild(t, "report_known", testutil.Options{})
	htBase := filepath.Join(dir, "ht")
	if out, err := exec.Command("heaptrack", "-o", htBase, bin).CombinedOutput(); err != nil {
		t.Fatalf("heaptrack: %v\n%s", err, out)
	}
	files, _ := filepath.Glob(htBase + ".*")
	if len(files) != 1 {
		t.Fatalf("heaptrack wrote %v", files)
	}
	for _, f := range files {
		code, stderr := runCLI(t, "report", f)
		if code == 0 || !strings.Contains(stderr, "it is a heaptrack trace") || !strings.Contains(stderr, "heaptrack_print") {
			t.Errorf("report of heaptrack's %s: exit %d, %s", filepath.Base(f), code, stderr)
		}
	}
	code, stderr := runCLI(t, "report", bin)
	if code == 0 || strings.Contains(stderr, "heaptrack") || !strings.Contains(stderr, "not a heapscope trace file") {
		t.Errorf("report of a program: exit %d, %s", code, stderr)
	}
}
