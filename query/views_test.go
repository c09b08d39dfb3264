package query

import (
	"math/rand"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/heapscope/heapscope/internal/testutil/tracetest"

	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/tracefile"
)

// The consumed chart's series add up to the heap of the timeline in each
// bucket, and in the bucket of the window's peak each series is its bytes
// at the peak.
func TestConsumed(t *testing.T) {
	path := filepath.Join(t.TempDir(), "random.hst")
	writeRandomTrace(t, path, 11)
	x := build(t, path)
	rng := rand.New(rand.NewSource(11))
	span := x.End() - x.Start()
	only := Match{Exclude: []Term{{FieldFunction, "0x1048"}}}.String()
	for k := 0; k < 8; k++ {
		f := Filter{}
		if k > 0 {
			f.From = x.Start() + rng.Int63n(span)
			f.To = f.From + 1 + rng.Int63n(x.End()-f.From+1)
		}
		if k%2 == 1 {
			f.Match = only
		}
		res := x.Window(f)
		c := x.Consumed(res, 5, 97)
		tl := x.TimelineOf(f, res.Span, 97)
		if len(c.Total) != len(tl) || len(c.Series) != 6 || !c.Series[5].Other {
			t.Fatalf("window %d: %d buckets against %d, %d series", k, len(c.Total), len(tl), len(c.Series))
		}
		for b := range tl {
			var sum uint64
			for _, s := range c.Series {
				sum += s.Values[b]
			}
			if sum != c.Total[b] || c.Total[b] != tl[b].MaxBytes || c.Times[b] != tl[b].Time {
				t.Fatalf("window %d bucket %d: series add up to %d, total %d, the timeline's largest %d", k, b, sum, c.Total[b], tl[b].MaxBytes)
			}
		}
		if res.PeakSeq >= 0 && res.Peak.Time >= res.Span.From {
			b := int((res.Peak.Time - res.Span.From) / c.Width)
			var peak uint64
			for i, s := range c.Series {
				peak += s.Peak
				if s.Values[b] != s.Peak {
					t.Errorf("window %d: series %d (%s) holds %d in the peak's bucket, %d at the peak", k, i, s.Name, s.Values[b], s.Peak)
				}
			}
			if peak != res.Peak.Bytes {
				t.Errorf("window %d: the series hold %d at the peak, the heap %d", k, peak, res.Peak.Bytes)
			}
		}
		for i := 1; i < 5; i++ {
			if c.Series[i].Peak > c.Series[i-1].Peak {
				t.Errorf("window %d: series not by their peak: %d before %d", k, c.Series[i-1].Peak, c.Series[i].Peak)
			}
		}
	}
}

// Each column of a tree is the flame graph of its cost: the same nodes
// with the same values, top-down and bottom-up.
func TestTreeColumnsAreFlames(t *testing.T) {
	path := filepath.Join(t.TempDir(), "random.hst")
	writeRandomTrace(t, path, 12)
	x := build(t, path)
	for _, f := range []Filter{{}, {From: x.Start() + (x.End()-x.Start())/3, To: x.Start() + (x.End()-x.Start())/2}} {
		res := x.Window(f)
		for _, inv := range []bool{false, true} {
			tr := x.Tree(res, CostCalls, inv, 0, 0)
			paths := treePaths(tr)
			for col, c := range TreeCosts {
				fl := x.Flame(res, c, inv, 0, 0)
				n := 0
				for i, node := range fl.Nodes {
					p := flamePath(fl, i)
					tn, ok := paths[p]
					if !ok || tn.Values[col] != node.Value || tn.Self[col] != node.Self {
						t.Fatalf("%v inverted %v cost %v: flame node %q (%d, self %d), tree %+v", f, inv, c, p, node.Value, node.Self, tn)
					}
					n++
				}
				m := 0
				for _, tn := range tr.Nodes {
					if tn.Values[col] > 0 || tn.Parent < 0 {
						m++
					}
				}
				if n != m || fl.Suppressed != tr.Suppressed && c == CostLeaks {
					t.Errorf("%v inverted %v cost %v: %d flame nodes, %d tree nodes with a value", f, inv, c, n, m)
				}
			}
			for i, tn := range tr.Nodes {
				if i > 0 && tn.Parent >= i {
					t.Fatalf("node %d after its parent %d", i, tn.Parent)
				}
			}
		}
	}
	// A node limit keeps the largest, as a tree.
	res := x.Window(Filter{})
	small := x.Tree(res, CostPeak, false, 0, 10)
	if len(small.Nodes) != 10 || small.Hidden == 0 {
		t.Errorf("%d nodes kept, %d hidden", len(small.Nodes), small.Hidden)
	}
}

func flamePath(fl *Flame, i int) string {
	var parts []string
	for ; i > 0; i = fl.Nodes[i].Parent {
		parts = append(parts, fl.Nodes[i].Name)
	}
	return strings.Join(parts, "<")
}

func treePaths(tr *Tree) map[string]*TreeNode {
	out := map[string]*TreeNode{}
	for i := range tr.Nodes {
		var parts []string
		for j := i; j > 0; j = tr.Nodes[j].Parent {
			parts = append(parts, tr.Nodes[j].Name)
		}
		out[strings.Join(parts, "<")] = &tr.Nodes[i]
	}
	return out
}

// Resident memory is each process's latest sample summed, from its first
// sample to its exit, in the window asked.
func TestMemory(t *testing.T) {
	path := filepath.Join(t.TempDir(), "mem.hst")
	const start = int64(1_000_000_000)
	w, must := tracetest.Create(t, path, tracefile.Header{Session: "mem", Provider: "preload", MonoStart: start, WallStart: time.Unix(1700000000, 0)}, tracefile.Options{})
	ms := func(n int64) int64 { return start + n*1e6 }
	must(w.Process(event.Process{PID: 1, Time: start, Exe: "/bin/a"}))
	must(w.Process(event.Process{PID: 2, Time: start, Exe: "/bin/b"}))
	must(w.Events([]event.Event{{Time: ms(1), PID: 1, TID: 1, Kind: event.KindAlloc, Func: event.FuncMalloc, Addr: 0x1000, Size: 100}}))
	must(w.Note(event.Memory{PID: 1, Time: ms(10), RSS: 1000, Anon: 600, File: 400}))
	must(w.Note(event.Memory{PID: 2, Time: ms(20), RSS: 5000, Anon: 5000}))
	must(w.Note(event.Memory{PID: 1, Time: ms(30), RSS: 3000, Anon: 2600, File: 400}))
	must(w.Exit(event.Exit{PID: 2, Time: ms(35)}))
	must(w.Note(event.Memory{PID: 1, Time: ms(40), RSS: 2000, Anon: 1600, File: 400}))
	must(w.Events([]event.Event{{Time: ms(50), PID: 1, TID: 1, Kind: event.KindFree, Func: event.FuncFree, Addr: 0x1000}}))
	must(w.Close())
	x := build(t, path)
	m := x.Memory(0, 0, 0, 100)
	rss := func(ps []Resident) []uint64 {
		var out []uint64
		for _, p := range ps {
			out = append(out, p.RSS)
		}
		return out
	}
	if got, want := rss(m.Points), []uint64{1000, 6000, 8000, 3000, 2000}; !equalU(got, want) {
		t.Errorf("points %v, want %v", got, want)
	}
	if m.Peak.RSS != 8000 || m.Peak.Time != ms(30) || m.Peak.Anon != 7600 || m.Samples != 4 {
		t.Errorf("peak %+v, %d samples", m.Peak, m.Samples)
	}
	if len(m.Processes) != 2 || m.Processes[0].Peak.RSS != 3000 || m.Processes[1].Peak.RSS != 5000 {
		t.Errorf("processes %+v", m.Processes)
	}
	// A window that starts between samples starts with what was resident.
	m = x.Memory(ms(25), ms(38), 0, 100)
	if got, want := rss(m.Points), []uint64{6000, 8000, 3000}; !equalU(got, want) {
		t.Errorf("window: points %v, want %v", got, want)
	}
	if m = x.Memory(0, 0, 2, 100); m.Peak.RSS != 5000 || len(m.Processes) != 1 {
		t.Errorf("pid 2: %+v", m)
	}
	if m = x.Memory(0, 0, 0, 2); len(m.Points) != 2 || m.Points[0].RSS != 6000 || m.Points[1].RSS != 8000 {
		t.Errorf("two points: %+v", m.Points)
	}
}

func equalU(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
