package tracefile

import (
	"bufio"
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/internal/testutil"
)

// The python3 run both tools record: PYTHONMALLOC=malloc sends every
// object allocation through malloc, as in heaptrack's own examples.
const pythonScript = `
import json, re, collections
d = {}
for i in range(200000):
    d[str(i)] = [i, str(i*2), {"k": i}]
s = json.dumps(d)
o = json.loads(s)
c = collections.Counter(re.findall(r"\d+", s[:2000000]))
print(len(o), len(c))
`

// gapHistogram is the distribution of the time between consecutive
// malloc/free calls of pythonScript run natively (no tracer), measured on
// this machine with an LD_PRELOAD shim that read CLOCK_MONOTONIC in each
// call: gapHistogram[b] calls were 2^b to 2^(b+1) ns after the previous
// one. heaptrack's raw data has no per-event times, so the comparison
// draws them from this.
var gapHistogram = [...]uint64{4: 232469, 6380868, 4063773, 1535282, 439233, 187957, 79496, 36286, 10840, 6897,
	4923, 1352, 1100, 172, 211, 224, 121, 169, 70, 42, 21, 20, 15, 6, 3}

type gapSampler struct {
	rng *rand.Rand
	cum []uint64
}

func newGapSampler(seed uint64) *gapSampler {
	g := &gapSampler{rng: rand.New(rand.NewPCG(seed, 3))}
	var sum uint64
	for _, n := range gapHistogram {
		sum += n
		g.cum = append(g.cum, sum)
	}
	return g
}

func (g *gapSampler) next() int64 {
	x := g.rng.Uint64N(g.cum[len(g.cum)-1])
	b := 0
	for g.cum[b] <= x {
		b++
	}
	return 1<<b + g.rng.Int64N(1<<b)
}

// heaptrackRun runs pythonScript under heaptrack, keeping its raw data, and
// interprets that data into the .zst file heaptrack itself would have
// written (heaptrack_interpret, then zstd at its default level, as the
// heaptrack script does). It returns the paths of both.
func heaptrackRun(t testing.TB, dir string) (raw, interpreted string) {
	t.Helper()
	for _, tool := range []string{"heaptrack", "zstd", "/usr/bin/python3.11"} {
		testutil.Tool(t, tool)
	}
	interp := "/usr/lib/heaptrack/libexec/heaptrack_interpret"
	if _, err := os.Stat(interp); err != nil {
		testutil.SkipWithout(t, err)
	}
	cmd := exec.Command("heaptrack", "-r", "-o", filepath.Join(dir, "py"), "/usr/bin/python3.11", "-c", pythonScript)
	cmd.Env = append(os.Environ(), "PYTHONMALLOC=malloc")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("heaptrack: %v\n%s", err, out)
	}
	matches, _ := filepath.Glob(filepath.Join(dir, "py*.raw.zst"))
	if len(matches) != 1 {
		t.Fatalf("heaptrack wrote %q", matches)
	}
	raw = matches[0]
	interpreted = filepath.Join(dir, "py.zst")
	sh := exec.Command("sh", "-c", `zstd -dc "$1" | "$2" | zstd -c > "$3"`, "sh", raw, interp, interpreted)
	if out, err := sh.CombinedOutput(); err != nil {
		t.Fatalf("interpreting: %v\n%s", err, out)
	}
	return raw, interpreted
}

// heaptrackEvents replays heaptrack's raw data as heapscope records: every
// '+' an allocation (with its trace as the stack), every '-' a free. The
// raw data has no threads and no per-event times: all events are on one
// thread, and times come from gaps.
func heaptrackEvents(t testing.TB, raw string, sink event.Sink, gaps *gapSampler) (events int) {
	t.Helper()
	f, err := os.Open(raw)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := zstd.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	defer zr.Close()
	const pid = 4242
	check(t, sink.Process(event.Process{PID: pid, Exe: "/usr/bin/python3.11", Cmdline: []string{"python3.11", "-c", "..."}}))
	type node struct{ ip, parent uint64 }
	trace := []node{{}} // index 0: the root
	defined := map[uint64]bool{}
	now := int64(1e9)
	batch := make([]event.Event, 0, 1024)
	flush := func() {
		if len(batch) > 0 {
			check(t, sink.Events(batch))
			events += len(batch)
			batch = batch[:0]
		}
	}
	sc := bufio.NewScanner(zr)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	hex := func(b []byte) uint64 {
		v, err := strconv.ParseUint(string(b), 16, 64)
		if err != nil {
			t.Fatalf("heaptrack raw data: %q: %v", b, err)
		}
		return v
	}
	for sc.Scan() {
		line := sc.Bytes()
		if len(line) < 2 || line[1] != ' ' {
			continue
		}
		f := bytes.Fields(line[2:])
		switch line[0] {
		case 't':
			trace = append(trace, node{hex(f[0]), hex(f[1])})
		case '+':
			size, tr, ptr := hex(f[0]), hex(f[1]), hex(f[2])
			if !defined[tr] && tr < uint64(len(trace)) {
				var frames []uint64
				for k := tr; k != 0 && k < uint64(len(trace)) && len(frames) < 256; k = trace[k].parent {
					frames = append(frames, trace[k].ip)
				}
				flush()
				check(t, sink.Stack(event.Stack{PID: pid, ID: event.StackID(tr), Frames: frames}))
				defined[tr] = true
			}
			now += gaps.next()
			batch = append(batch, event.Event{Time: now, PID: pid, TID: pid, Kind: event.KindAlloc, Func: event.FuncMalloc,
				Stack: event.StackID(tr), Addr: ptr, Size: size})
		case '-':
			now += gaps.next()
			batch = append(batch, event.Event{Time: now, PID: pid, TID: pid, Kind: event.KindFree, Func: event.FuncFree, Addr: hex(f[0])})
		default:
			continue
		}
		if len(batch) == cap(batch) {
			flush()
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	flush()
	return events
}

func fileSize(t testing.TB, path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// TestCompactVsHeaptrack records the same python3 run as heaptrack and as
// heapscope and compares bytes per event: the goal is within twice
// heaptrack's at the default time resolution, although heapscope keeps a
// time and a thread per event and heaptrack keeps neither.
func TestCompactVsHeaptrack(t *testing.T) {
	if testing.Short() {
		t.Skip("runs python3 under heaptrack")
	}
	dir := t.TempDir()
	raw, ht := heaptrackRun(t, dir)
	htSize := fileSize(t, ht)

	resolutions := []time.Duration{1, time.Microsecond, DefaultTimeResolution}
	var sinks []event.Sink
	var writers []*Writer
	for _, res := range resolutions {
		w, err := Create(filepath.Join(dir, fmt.Sprintf("hs-%d.hst", res)), testHeader(Sequential, 0), Options{TimeResolution: res})
		check(t, err)
		writers = append(writers, w)
		sinks = append(sinks, w)
	}
	n := heaptrackEvents(t, raw, event.Tee(sinks...), newGapSampler(1))
	htPer := float64(htSize) / float64(n)
	t.Logf("%d events (allocations and frees); heaptrack's .zst: %d bytes, %.4f bytes/event", n, htSize, htPer)
	for i, w := range writers {
		check(t, w.Close())
		path := w.Files()[0]
		size := fileSize(t, path)
		per := float64(size) / float64(n)
		t.Logf("heapscope, times to %v: %d bytes, %.4f bytes/event, %.2f times heaptrack's", resolutions[i], size, per, per/htPer)
		if resolutions[i] == DefaultTimeResolution && per > 2*htPer {
			t.Errorf("at the default resolution, %.4f bytes/event: more than twice heaptrack's %.4f", per, htPer)
		}

		// The file holds what was written.
		r, err := Open(path)
		check(t, err)
		c := &counter{Sink: event.Discard}
		check(t, r.Replay(c, Window{}))
		r.Close()
		if c.events != n {
			t.Errorf("read %d events, wrote %d", c.events, n)
		}
	}
}
