package query

import (
	"errors"
	"math/rand"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/tracefile"
)

// subsetHeap replays a trace's heap events directly, without the index,
// and returns after each event (in the order the index numbers them) the
// live bytes and blocks of the blocks whose stack keep accepts, and
// whether the event made or ended such a block (by a call: a process's
// exit, an event of the index when it had blocks live, takes them out of
// the heap but frees none).
func subsetHeap(t *testing.T, path string, keep func(pid uint32, st event.StackID) bool) (bytes, blocks []uint64, made, ended []bool) {
	t.Helper()
	r, err := tracefile.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	c := &evCollector{}
	if err := r.Replay(c, tracefile.Window{}); err != nil {
		t.Fatal(err)
	}
	type key struct {
		pid  uint32
		addr uint64
	}
	type blk struct {
		size uint64
		kept bool
	}
	live := map[key]blk{}
	var b, n uint64
	exits := c.exits
	exit := func(x event.Exit) {
		any := false
		for k, old := range live {
			if k.pid != x.PID {
				continue
			}
			any = true
			if old.kept {
				b -= old.size
				n--
			}
			delete(live, k)
		}
		if any {
			bytes, blocks = append(bytes, b), append(blocks, n)
			made, ended = append(made, false), append(ended, false)
		}
	}
	for i, e := range c.evs {
		for ; len(exits) > 0 && exits[0].n <= i; exits = exits[1:] {
			exit(exits[0].x)
		}
		if e.Kind == event.KindFree && e.Addr == 0 {
			continue // free(NULL): not an event of the index
		}
		var mk, en bool
		drop := func(pid uint32, addr uint64) {
			if old, ok := live[key{pid, addr}]; ok {
				if old.kept {
					b -= old.size
					n--
					en = true
				}
				delete(live, key{pid, addr})
			}
		}
		add := func(pid uint32, addr, size uint64, st event.StackID) {
			k := keep(pid, st)
			live[key{pid, addr}] = blk{size, k}
			if k {
				b += size
				n++
				mk = true
			}
		}
		switch e.Kind {
		case event.KindAlloc:
			if e.Addr != 0 {
				drop(e.PID, e.Addr)
				add(e.PID, e.Addr, e.Size, e.Stack)
			}
		case event.KindFree:
			drop(e.PID, e.Addr)
		case event.KindRealloc:
			if e.Addr == 0 && (e.Size != 0 || e.OldAddr == 0) {
				break // failed: nothing changed
			}
			if e.OldAddr != 0 {
				drop(e.PID, e.OldAddr)
			}
			if e.Addr != 0 {
				add(e.PID, e.Addr, e.Size, e.Stack)
			}
		}
		bytes, blocks = append(bytes, b), append(blocks, n)
		made, ended = append(made, mk), append(ended, en)
	}
	for _, x := range exits {
		exit(x.x)
	}
	return
}

// evCollector keeps a trace's heap events, and its exits after the first
// n of them.
type evCollector struct {
	evs   []event.Event
	exits []struct {
		n int
		x event.Exit
	}
}

func (c *evCollector) Process(event.Process) error { return nil }
func (c *evCollector) Exit(x event.Exit) error {
	c.exits = append(c.exits, struct {
		n int
		x event.Exit
	}{len(c.evs), x})
	return nil
}
func (c *evCollector) Module(event.Module) error     { return nil }
func (c *evCollector) Stack(event.Stack) error       { return nil }
func (c *evCollector) Snapshot(event.Snapshot) error { return nil }
func (c *evCollector) Note(event.Note) error         { return nil }
func (c *evCollector) Stats(event.Stats) error       { return nil }
func (c *evCollector) Events(evs []event.Event) error {
	c.evs = append(c.evs, evs...)
	return nil
}

// A filtered window's timeline, peak and costs are those of the blocks of
// the sites its Match keeps, computed directly from the events; a Match
// that keeps every site changes nothing; a Match and its opposite add up
// to the whole.
func TestSubsetHeap(t *testing.T) {
	path := filepath.Join(t.TempDir(), "random.hst")
	writeRandomTrace(t, path, 7)
	x := build(t, path)
	// Stack 9 of every process is the site whose innermost frame is 0x1048.
	mustSpec := func(in, ex []string) string {
		var m Match
		for _, s := range in {
			tm, err := ParseTerm(s)
			if err != nil {
				t.Fatal(err)
			}
			m.Include = append(m.Include, tm)
		}
		for _, s := range ex {
			tm, err := ParseTerm(s)
			if err != nil {
				t.Fatal(err)
			}
			m.Exclude = append(m.Exclude, tm)
		}
		return m.String()
	}
	all := mustSpec(nil, []string{"function:no_such_function"})
	only9 := mustSpec([]string{"0x1048"}, nil)
	not9 := mustSpec(nil, []string{"function:0x1048"})
	bytes, blocks, made, ended := subsetHeap(t, path, func(_ uint32, st event.StackID) bool { return st != 9 })
	if len(bytes) != x.evs.len() {
		t.Fatalf("%d events replayed, %d indexed", len(bytes), x.evs.len())
	}

	rng := rand.New(rand.NewSource(7))
	span := x.End() - x.Start()
	for k := 0; k < 12; k++ {
		f := Filter{}
		if k > 0 {
			f.From = x.Start() + rng.Int63n(span)
			f.To = f.From + 1 + rng.Int63n(x.End()-f.From+1)
		}
		if k%3 == 1 {
			f.PID = 2
		}
		sp := x.Span(f)
		whole := x.Window(f)

		fa := f
		fa.Match = all
		// (A process's peak and timeline are its heap's, with a Match or
		// without.)
		if got := x.Window(fa); !sameResult(got, whole) {
			t.Errorf("window %d: a match of every site changed the answer: %+v, want %+v", k, got.Total, whole.Total)
		}
		for _, points := range []int{1, 13, 500} {
			want := x.TimelineOf(f, sp, points)
			if f.PID == 0 && !reflect.DeepEqual(want, x.Timeline(sp, points)) {
				t.Fatalf("window %d, %d points: the timeline of the empty filter differs from the heap's", k, points)
			}
			if got := x.TimelineOf(fa, sp, points); !reflect.DeepEqual(got, want) {
				t.Fatalf("window %d, %d points: the timeline of every site differs from the heap's", k, points)
			}
		}

		// The sites without 0x1048 against the direct replay.
		fn := f
		fn.Match = not9
		if f.PID == 0 {
			got := x.TimelineOf(fn, sp, 37)
			want := oneByOne(x, sp, 37, bytes, blocks, made, ended)
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("window %d: the filtered timeline differs from the replay's:\n got %+v\nwant %+v", k, got[:3], want[:3])
			}
			res := x.Window(fn)
			p, best := int64(-1), uint64(0)
			for s := max(sp.S0-1, 0); s < sp.S1; s++ {
				if p < 0 || bytes[s] > best {
					p, best = s, bytes[s]
				}
			}
			if best == 0 {
				p = -1
			}
			if res.PeakSeq != p || p >= 0 && (res.Peak.Bytes != bytes[p] || res.Peak.Blocks != blocks[p]) {
				t.Errorf("window %d: filtered peak at %d (%d B), replay's at %d (%d B)", k, res.PeakSeq, res.Peak.Bytes, p, best)
			}
			if _, tp, ok := x.TimelinePeakOf(fn, sp, 37); ok != (p >= 0) || tp != res.Peak {
				t.Errorf("window %d: the timeline's peak %+v (%v), the window's %+v", k, tp, ok, res.Peak)
			}
			if p >= 0 && res.Total.Peak.Bytes != res.Peak.Bytes {
				t.Errorf("window %d: the sites' bytes at the filtered peak %d, the peak %d", k, res.Total.Peak.Bytes, res.Peak.Bytes)
			}
		}

		// A match and its opposite add up to the whole, site by site.
		f9 := f
		f9.Match = only9
		a, b := x.Window(fn), x.Window(f9)
		for i := range whole.Sites {
			w, s := whole.Sites[i], a.Sites[i]
			s.add(&b.Sites[i])
			w.Peak, s.Peak = Amount{}, Amount{} // the peaks are instants of their own
			if w != s {
				t.Fatalf("window %d, site %d: %+v and %+v do not add up to %+v", k, i, a.Sites[i], b.Sites[i], whole.Sites[i])
			}
		}
		var hist [65]uint64
		for i := range hist {
			hist[i] = a.Hist[i] + b.Hist[i]
		}
		if hist != whole.Hist || a.Lifetime.Live+b.Lifetime.Live != whole.Lifetime.Live {
			t.Errorf("window %d: the histograms do not add up", k)
		}
		if f.PID == 0 {
			ta, tb, tw := x.TimelineOf(fn, sp, 50), x.TimelineOf(f9, sp, 50), x.Timeline(sp, 50)
			for i := range tw {
				if ta[i].EndBytes+tb[i].EndBytes != tw[i].EndBytes || ta[i].Allocs+tb[i].Allocs < tw[i].Allocs {
					t.Fatalf("window %d bucket %d: %+v and %+v against %+v", k, i, ta[i], tb[i], tw[i])
				}
			}
		}
	}
}

// sameResult compares two answers but for the filter they answer.
func sameResult(a, b *Result) bool {
	a2, b2 := *a, *b
	a2.Filter, b2.Filter = Filter{}, Filter{}
	return reflect.DeepEqual(a2, b2)
}

// oneByOne is the timeline of a heap given event by event (after each
// event: live bytes and blocks, whether it made or ended a block), as
// Timeline cuts the span into buckets.
func oneByOne(x *Index, sp Span, points int, bytes, blocks []uint64, made, ended []bool) []Bucket {
	out, _, _ := x.buckets(sp, points)
	var live, n uint64
	if sp.S0 > 0 {
		live, n = bytes[sp.S0-1], blocks[sp.S0-1]
	}
	for i := range out {
		out[i].MaxBytes, out[i].MaxBlocks = live, n
	}
	b := 0
	for s := sp.S0; s < sp.S1; s++ {
		tm := x.evs.time(int(s))
		for b+1 < len(out) && tm >= out[b+1].Time {
			out[b].EndBytes, out[b].EndBlocks = live, n
			b++
			out[b].MaxBytes, out[b].MaxBlocks = live, n
		}
		live, n = bytes[s], blocks[s]
		o := &out[b]
		if live > o.MaxBytes {
			o.MaxBytes, o.MaxBlocks = live, n
		}
		if made[s] {
			o.Allocs++
		}
		if ended[s] {
			o.Frees++
		}
	}
	for ; b < len(out); b++ {
		out[b].EndBytes, out[b].EndBlocks = live, n
		if b+1 < len(out) {
			out[b+1].MaxBytes, out[b+1].MaxBlocks = live, n
		}
	}
	return out
}

// Terms parse as the API takes them, and a Match reads back what it wrote.
func TestParseMatch(t *testing.T) {
	for _, c := range []struct {
		in   string
		want Term
		bad  bool
	}{
		{in: "ggc", want: Term{FieldFunction, "ggc"}},
		{in: "function:a:b", want: Term{FieldFunction, "a:b"}},
		{in: "module:libc.so", want: Term{FieldModule, "libc.so"}},
		{in: "file:x.c", want: Term{FieldFile, "x.c"}},
		{in: "std::vector", want: Term{FieldFunction, "std::vector"}},
		{in: "", bad: true},
		{in: "module:", bad: true},
		{in: "a\nb", bad: true},
	} {
		got, err := ParseTerm(c.in)
		if (err != nil) != c.bad || !c.bad && got != c.want {
			t.Errorf("ParseTerm(%q) = %v, %v", c.in, got, err)
		}
	}
	m := Match{Include: []Term{{FieldFunction, "a"}, {FieldFile, "b.c"}}, Exclude: []Term{{FieldModule, "libc"}}}
	back, err := ParseMatch(m.String())
	if err != nil || !reflect.DeepEqual(back, m) {
		t.Errorf("ParseMatch(%q) = %+v, %v", m.String(), back, err)
	}
}

// A filter term comes from a URL: any text parses or is refused with
// ErrBadTerm, and what a Match writes it reads back.
func FuzzParseMatch(f *testing.F) {
	for _, s := range []string{"ggc", "module:libc.so", "file:x.c", "function:a:b", "", "+a\n-b\n", "-module:\x01"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if tm, err := ParseTerm(s); err == nil {
			m := Match{Include: []Term{tm}, Exclude: []Term{tm}}
			back, err := ParseMatch(m.String())
			if err != nil || !reflect.DeepEqual(back, m) {
				t.Fatalf("%q: %+v read back as %+v, %v", s, m, back, err)
			}
		} else if !errors.Is(err, ErrBadTerm) {
			t.Fatalf("%q: %v", s, err)
		}
		if m, err := ParseMatch(s); err == nil {
			m.Keeps(nil)
		} else if !errors.Is(err, ErrBadTerm) {
			t.Fatalf("ParseMatch(%q): %v", s, err)
		}
	})
}
