//go:build linux && amd64

package preload

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/internal/testutil"
)

// The programs compared with heaptrack: real ones, not workloads of ours.
const (
	sqliteScript = `CREATE TABLE t(a INTEGER PRIMARY KEY, b TEXT, c REAL);
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM n WHERE i < 20000)
INSERT INTO t SELECT i, printf('row-%d-%s', i, hex(randomblob(8))), i * 1.5 FROM n;
CREATE INDEX tb ON t(b);
SELECT count(*), sum(c) FROM t WHERE b LIKE 'row-1%';
SELECT substr(b, 1, 6) AS k, count(*) FROM t GROUP BY k ORDER BY 2 DESC LIMIT 3;
`
	pythonScript = `import json, collections
d = [dict(a=i, b=str(i) * 3, c=[i, i + 1]) for i in range(20000)]
s = json.dumps(d)
e = json.loads(s)
c = collections.Counter(len(x["b"]) for x in e)
print(len(s), sorted(c.items())[:3])
`
)

// heaptrackRun is what heaptrack saw of one run.
type heaptrackRun struct {
	calls uint64
	sizes map[uint64]uint64 // allocation calls per requested size
	wall  time.Duration     // of the traced program, under heaptrack
}

func needTools(t *testing.T, tools ...string) {
	for _, tool := range tools {
		testutil.Tool(t, tool)
	}
}

// runHeaptrack records cmd with heaptrack and reads the totals back with
// heaptrack_print.
func runHeaptrack(t *testing.T, cmd *exec.Cmd) heaptrackRun {
	t.Helper()
	dir := t.TempDir()
	ht := exec.Command("heaptrack", append([]string{"-o", filepath.Join(dir, "trace"), cmd.Path}, cmd.Args[1:]...)...)
	ht.Env, ht.Stdin = cmd.Env, cmd.Stdin
	start := time.Now()
	if out, err := ht.CombinedOutput(); err != nil {
		t.Fatalf("heaptrack: %v\n%s", err, out)
	}
	wall := time.Since(start)
	files, _ := filepath.Glob(filepath.Join(dir, "trace.*"))
	if len(files) != 1 {
		t.Fatalf("heaptrack wrote %v", files)
	}
	hist := filepath.Join(dir, "hist")
	out, err := exec.Command("heaptrack_print", "--print-histogram", hist, files[0]).Output()
	if err != nil {
		t.Fatalf("heaptrack_print: %v", err)
	}
	r := heaptrackRun{sizes: map[uint64]uint64{}, wall: wall}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "calls to allocation functions: "); ok {
			r.calls, err = strconv.ParseUint(strings.Fields(rest)[0], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	if r.calls == 0 {
		t.Fatalf("no allocation total in heaptrack_print's output")
	}
	h, err := os.ReadFile(hist)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(h), "\n") {
		if f := strings.Fields(l); len(f) >= 2 {
			size, err1 := strconv.ParseUint(f[0], 10, 64)
			n, err2 := strconv.ParseUint(f[1], 10, 64)
			if err1 == nil && err2 == nil {
				r.sizes[size] += n
			}
		}
	}
	return r
}

// heaptrackCount counts what heaptrack calls "calls to allocation
// functions": allocations and reallocations that returned a block, through
// the entry points heaptrack wraps (malloc, calloc, realloc,
// posix_memalign, aligned_alloc, valloc; operator new through the malloc it
// calls). memalign and pvalloc it does not wrap, and glibc serves them
// without calling malloc, so heaptrack never sees them.
func heaptrackCount(evs []event.Event) (uint64, map[uint64]uint64) {
	var n uint64
	sizes := map[uint64]uint64{}
	for _, e := range evs {
		if e.Addr == 0 || (e.Kind != event.KindAlloc && e.Kind != event.KindRealloc) ||
			e.Func == event.FuncMemalign || e.Func == event.FuncPvalloc || e.Heap == event.HeapMmap {
			continue
		}
		n++
		sizes[e.Size]++
	}
	return n, sizes
}

// compareWithHeaptrack runs mk()'s command untraced, under heaptrack and
// traced by us; our total of allocation calls must be within 1% of
// heaptrack's. It logs the sizes where the two differ, and the wall times:
// ours from a run into a sink that only counts (the checking recorder the
// count comes from is far slower than a trace writer).
func compareWithHeaptrack(t *testing.T, mk func() *exec.Cmd) (ours, theirs uint64, diff map[uint64][2]uint64) {
	plain := mk()
	start := time.Now()
	if err := plain.Run(); err != nil {
		t.Fatalf("untraced run: %v", err)
	}
	untraced := time.Since(start)

	ht := runHeaptrack(t, mk())

	cmd := mk()
	start = time.Now()
	runUnder(t, Config{}, &counter{Sink: event.Discard}, cmd)
	wall := time.Since(start)

	r := traceCmd(t, Config{}, mk())
	if !r.state.Success() {
		t.Fatalf("traced run failed: %v", r.state)
	}
	if len(r.procs) != 1 {
		t.Fatalf("%d processes traced, want 1", len(r.procs))
	}
	ours, sizes := heaptrackCount(r.events)

	diff = map[uint64][2]uint64{}
	for s, n := range sizes {
		if ht.sizes[s] != n {
			diff[s] = [2]uint64{n, ht.sizes[s]}
		}
	}
	for s, n := range ht.sizes {
		if _, ok := sizes[s]; !ok {
			diff[s] = [2]uint64{0, n}
		}
	}
	keys := make([]uint64, 0, len(diff))
	for s := range diff {
		keys = append(keys, s)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i] < keys[j] })
	var b strings.Builder
	for i, s := range keys {
		if i == 12 {
			fmt.Fprintf(&b, " …")
			break
		}
		fmt.Fprintf(&b, " %dB:%d/%d", s, diff[s][0], diff[s][1])
	}
	t.Logf("allocation calls: heapscope %d, heaptrack %d (%+d, %.4f%%); sizes that differ (ours/heaptrack):%s",
		ours, ht.calls, int64(ours)-int64(ht.calls), 100*(float64(ours)-float64(ht.calls))/float64(ht.calls), b.String())
	t.Logf("wall time: untraced %v, heaptrack %v, heapscope %v (the session included): %.2f× heaptrack's",
		untraced.Round(time.Millisecond), ht.wall.Round(time.Millisecond), wall.Round(time.Millisecond),
		wall.Seconds()/ht.wall.Seconds())
	if d := float64(ours) - float64(ht.calls); d > 0.01*float64(ht.calls) || -d > 0.01*float64(ht.calls) {
		t.Errorf("heapscope counted %d allocation calls, heaptrack %d: more than 1%% apart", ours, ht.calls)
	}
	return ours, ht.calls, diff
}

// TestHeaptrackSQLite compares with heaptrack on sqlite3 building and
// querying an indexed table.
//
// The counts differ by heaptrack's own doing: its preload library is C++,
// so it brings libstdc++ into the (C) sqlite3 process, and libstdc++'s
// initialisation allocates its emergency exception pool (72704 bytes with
// Debian 12's libstdc++). Our interposer is C and loads nothing. So
// heaptrack sees exactly the calls we see, plus blocks of sizes sqlite3
// never asks for.
func TestHeaptrackSQLite(t *testing.T) {
	needTools(t, "heaptrack", "heaptrack_print", "sqlite3")
	sqlite, _ := exec.LookPath("sqlite3")
	_, _, diff := compareWithHeaptrack(t, func() *exec.Cmd {
		cmd := exec.Command(sqlite, ":memory:")
		cmd.Stdin = strings.NewReader(sqliteScript)
		return cmd
	})
	for size, n := range diff {
		if n[0] != 0 {
			t.Errorf("%d-byte blocks: %d seen by heapscope, %d by heaptrack: beyond libstdc++'s own", size, n[0], n[1])
		}
	}
}

// TestHeaptrackPython compares with heaptrack on the real CPython binary
// (not a shell shim) with PYTHONMALLOC=malloc, so that every object goes
// through malloc.
//
// The residual difference (a few dozen calls in 750 thousand) comes from
// the environments: heaptrack runs Python with its variables
// (LD_PRELOAD=…libheaptrack_preload.so, DUMP_HEAPTRACK_OUTPUT=…), we with
// ours (LD_PRELOAD and two HEAPSCOPE_PRELOAD_ variables), and Python
// allocates for every environment variable (os.environ's keys, values and
// dict growth) and for the paths it derives, so the small sizes differ by a
// few blocks each. libstdc++'s pool, loaded by heaptrack, adds one block.
func TestHeaptrackPython(t *testing.T) {
	needTools(t, "heaptrack", "heaptrack_print")
	const python = "/usr/bin/python3.11"
	testutil.Tool(t, python)
	compareWithHeaptrack(t, func() *exec.Cmd {
		cmd := exec.Command(python, "-c", pythonScript)
		cmd.Env = append(os.Environ(), "PYTHONMALLOC=malloc", "PYTHONHASHSEED=0", "PYTHONDONTWRITEBYTECODE=1")
		return cmd
	})
}
