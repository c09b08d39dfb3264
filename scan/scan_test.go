package scan

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sort"
	"testing"
)

// memory is a sparse address space for tests: regions of bytes, and holes
// that fail to read.
type memory struct {
	regions []region
}

type region struct {
	addr uint64
	b    []byte
}

var errHole = errors.New("hole")

func (m *memory) add(addr uint64, size int) []byte {
	b := make([]byte, size)
	m.regions = append(m.regions, region{addr, b})
	sort.Slice(m.regions, func(i, j int) bool { return m.regions[i].addr < m.regions[j].addr })
	return b
}

func (m *memory) ReadAt(p []byte, off int64) (int, error) {
	at := uint64(off)
	n := 0
	for n < len(p) {
		found := false
		for _, r := range m.regions {
			if at >= r.addr && at < r.addr+uint64(len(r.b)) {
				c := copy(p[n:], r.b[at-r.addr:])
				n += c
				at += uint64(c)
				found = true
				break
			}
		}
		if !found {
			return n, errHole
		}
	}
	return n, nil
}

func (m *memory) put(addr, v uint64) {
	for _, r := range m.regions {
		if addr >= r.addr && addr+8 <= r.addr+uint64(len(r.b)) {
			binary.LittleEndian.PutUint64(r.b[addr-r.addr:], v)
			return
		}
	}
	panic(fmt.Sprintf("put outside memory at %#x", addr))
}

// world is a heap laid out from heapBase and one root range at rootBase.
type world struct {
	mem    *memory
	blocks []Block
	roots  Roots
	names  []string
}

const (
	heapBase = 0x100000
	rootBase = 0x10000
)

func newWorld() *world {
	w := &world{mem: &memory{}}
	w.mem.add(heapBase, 1<<16)
	w.mem.add(rootBase, 4096)
	w.roots.Ranges = []Range{{Addr: rootBase, Size: 4096, Name: "globals"}}
	return w
}

// block adds a block of size bytes, 16-byte aligned after the last, and
// returns its address.
func (w *world) block(name string, size uint64) uint64 {
	addr := uint64(heapBase + 16)
	if n := len(w.blocks); n > 0 {
		last := w.blocks[n-1]
		addr = (last.Addr + last.Size + 16 + 15) &^ 15
	}
	w.blocks = append(w.blocks, Block{Addr: addr, Size: size, ID: uint64(len(w.blocks))})
	w.names = append(w.names, name)
	return addr
}

var rootSlot uint64

func (w *world) root(v uint64) {
	w.mem.put(rootBase+rootSlot%4096, v)
	rootSlot += 8
}

func (w *world) scan(t *testing.T, opt Options) map[string]Verdict {
	t.Helper()
	res, err := Scan(w.blocks, w.mem, w.roots, opt)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]Verdict{}
	for i, v := range res.Verdicts {
		if v.ID != w.blocks[i].ID {
			t.Fatalf("verdict %d has ID %d, want %d", i, v.ID, w.blocks[i].ID)
		}
		out[w.names[i]] = v
	}
	return out
}

func expect(t *testing.T, got map[string]Verdict, want map[string]Class) {
	t.Helper()
	for name, c := range want {
		if got[name].Class != c {
			t.Errorf("%s: %v, want %v", name, got[name].Class, c)
		}
	}
}

func TestClasses(t *testing.T) {
	rootSlot = 0
	w := newWorld()
	a, b, c := w.block("a", 32), w.block("b", 32), w.block("c", 32)
	w.root(a)
	w.mem.put(a, b)
	w.mem.put(b+8, c)
	// a lost list: d -> e -> f
	d, e, f := w.block("d", 48), w.block("e", 48), w.block("f", 48)
	w.mem.put(d, e)
	w.mem.put(e+16, f)
	// a lost cycle x <-> y
	x, y := w.block("x", 64), w.block("y", 64)
	w.mem.put(x, y)
	w.mem.put(y, x)
	// held through an interior pointer only, and what it holds
	p, q := w.block("p", 100), w.block("q", 24)
	w.root(p + 40)
	w.mem.put(p, q)
	// an interior pointer first, a start pointer later
	u := w.block("u", 80)
	w.root(u + 8 + 3)
	w.root(u)
	// a register, and a zero-sized block held at its start
	r, z := w.block("r", 16), w.block("z", 0)
	w.roots.Words = []Word{{Value: r, Name: "rax"}, {Value: z, Name: "rbx"}}
	// a lost block that points into a reachable one changes nothing
	l := w.block("l", 32)
	w.mem.put(l, a)

	expect(t, w.scan(t, Options{}), map[string]Class{
		"a": StillReachable, "b": StillReachable, "c": StillReachable,
		"d": DefinitelyLost, "e": IndirectlyLost, "f": IndirectlyLost,
		"x": DefinitelyLost, "y": IndirectlyLost,
		"p": PossiblyLost, "q": PossiblyLost,
		"u": StillReachable, "r": StillReachable, "z": StillReachable,
		"l": DefinitelyLost,
	})
	expect(t, w.scan(t, Options{Rules: LeakSanitizer}), map[string]Class{
		"a": StillReachable, "b": StillReachable, "c": StillReachable,
		"d": DefinitelyLost, "e": IndirectlyLost, "f": IndirectlyLost,
		"x": IndirectlyLost, "y": IndirectlyLost,
		"p": StillReachable, "q": StillReachable,
		"u": StillReachable, "r": StillReachable, "z": StillReachable,
		"l": DefinitelyLost,
	})
}

// TestCliqueMerge: a lost block that leads to an earlier clique's leader
// takes it in (Memcheck), so the later one is the definite one.
func TestCliqueMerge(t *testing.T) {
	rootSlot = 0
	w := newWorld()
	a, b := w.block("a", 32), w.block("b", 32)
	c := w.block("c", 32)
	w.mem.put(a, b)
	w.mem.put(c, a)
	expect(t, w.scan(t, Options{}), map[string]Class{"a": IndirectlyLost, "b": IndirectlyLost, "c": DefinitelyLost})
	expect(t, w.scan(t, Options{Rules: LeakSanitizer}), map[string]Class{"a": IndirectlyLost, "b": IndirectlyLost, "c": DefinitelyLost})
}

func TestHeuristics(t *testing.T) {
	rootSlot = 0
	w := newWorld()
	s := w.block("stdstring", 3*8+10+1)
	w.mem.put(s, 5)    // length
	w.mem.put(s+8, 10) // capacity
	w.root(s + 24)
	l := w.block("length64", 64)
	w.mem.put(l, 56)
	w.root(l + 8)
	n := w.block("newarray", 8+3*16)
	w.mem.put(n, 3)
	w.root(n + 8)
	bad := w.block("no heuristic", 8+3*16)
	w.mem.put(bad, 5) // 48 % 5 != 0
	w.root(bad + 8)
	got := w.scan(t, Options{})
	expect(t, got, map[string]Class{"stdstring": StillReachable, "length64": StillReachable, "newarray": StillReachable, "no heuristic": PossiblyLost})
	for name, h := range map[string]string{"stdstring": "stdstring", "length64": "length64", "newarray": "newarray"} {
		if got[name].Heuristic != h {
			t.Errorf("%s: reachable via %q, want %q", name, got[name].Heuristic, h)
		}
	}
	expect(t, w.scan(t, Options{NoHeuristics: true}), map[string]Class{"stdstring": PossiblyLost, "length64": PossiblyLost, "newarray": PossiblyLost})
}

// TestRootOverlapsBlock: the words of a root range that lie in a live
// block are not roots.
func TestRootOverlapsBlock(t *testing.T) {
	rootSlot = 0
	w := newWorld()
	a, b := w.block("a", 64), w.block("b", 32)
	w.mem.put(a+8, b)
	w.roots.Ranges = append(w.roots.Ranges, Range{Addr: heapBase, Size: 1 << 16, Name: "merged mapping"})
	expect(t, w.scan(t, Options{}), map[string]Class{"a": DefinitelyLost, "b": IndirectlyLost})
}

func TestUnreadable(t *testing.T) {
	rootSlot = 0
	t.Run("root", func(t *testing.T) {
		w := newWorld()
		a, b := w.block("a", 32), w.block("b", 32)
		w.root(a)
		w.roots.Ranges = append(w.roots.Ranges, Range{Addr: 0x5000, Size: 8192, Name: "gone"})
		res, err := Scan(w.blocks, w.mem, w.roots, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if res.Verdicts[0].Class != StillReachable || res.Verdicts[1].Class != Unclassified {
			t.Errorf("classes %v, want reachable and unclassified", res.Verdicts)
		}
		if len(res.Unread) != 1 || res.Unread[0].Root != "gone" || res.Unread[0].Size != 8192 || res.Unread[0].Block != -1 {
			t.Errorf("unread %+v", res.Unread)
		}
		_ = b
	})
	t.Run("lost block", func(t *testing.T) {
		w := newWorld()
		a, b := w.block("a", 32), w.block("b", 32)
		w.mem.put(a, b)
		w.block("c", 32)
		w.blocks = append(w.blocks, Block{Addr: 0x900000, Size: 64, ID: 99}) // outside memory
		w.names = append(w.names, "unmapped")
		expect(t, w.scan(t, Options{}), map[string]Class{"a": Unclassified, "b": IndirectlyLost, "c": Unclassified, "unmapped": Unclassified})
	})
	t.Run("reached block", func(t *testing.T) {
		w := newWorld()
		w.block("a", 32)
		w.blocks = append(w.blocks, Block{Addr: 0x900000, Size: 64, ID: 99})
		w.names = append(w.names, "unmapped")
		w.root(0x900000)
		expect(t, w.scan(t, Options{}), map[string]Class{"a": Unclassified, "unmapped": StillReachable})
	})
}

func TestOverlap(t *testing.T) {
	for _, bs := range [][]Block{
		{{Addr: 100, Size: 50}, {Addr: 120, Size: 10}},
		{{Addr: 100, Size: 0}, {Addr: 100, Size: 0}},
		{{Addr: 100, Size: 0}, {Addr: 100, Size: 8}},
		{{Addr: ^uint64(0) - 4, Size: 8}},
	} {
		if _, err := Scan(bs, &memory{}, Roots{}, Options{}); !errors.Is(err, ErrOverlap) {
			t.Errorf("%v: %v, want ErrOverlap", bs, err)
		}
	}
	if _, err := Scan([]Block{{Addr: 100, Size: 0}, {Addr: 100 + 0, Size: 0, ID: 1}}[:1], &memory{}, Roots{}, Options{}); err != nil {
		t.Error(err)
	}
}

// TestRandomGraphs checks both rule sets against their definitions, on
// random heaps: Memcheck's still reachable blocks are those a chain of
// start pointers reaches from a root, possibly lost the others any chain
// reaches, and its definitely lost ones those memcheckDefinite finds;
// LeakSanitizer's reachable are those any chain reaches, and a lost block
// is indirect when another lost block references it.
// edge is a reference in TestRandomGraphs' graphs.
type edge struct {
	to       int
	interior bool
}

func TestRandomGraphs(t *testing.T) {
	for seed := uint64(0); seed < 300; seed++ {
		rng := rand.New(rand.NewPCG(seed, 7))
		w := newWorld()
		rootSlot = 0
		n := 1 + rng.IntN(40)
		for i := 0; i < n; i++ {
			w.block(fmt.Sprint(i), uint64(8*(1+rng.IntN(6))))
		}
		out := make([][]edge, n)
		var rootEdges []edge
		pointer := func(to int) (uint64, bool) {
			b := w.blocks[to]
			if b.Size > 8 && rng.IntN(3) == 0 {
				return b.Addr + 8 + uint64(rng.IntN(int(b.Size-8))), true
			}
			return b.Addr, false
		}
		for i := 0; i < n; i++ {
			for k := uint64(0); k < w.blocks[i].Size/8; k++ {
				if rng.IntN(3) != 0 {
					continue
				}
				to := rng.IntN(n)
				p, in := pointer(to)
				if in && p-w.blocks[to].Addr == 8 {
					in = false // avoid the heuristics' offsets: they are tested apart
					p = w.blocks[to].Addr
				}
				w.mem.put(w.blocks[i].Addr+8*k, p)
				out[i] = append(out[i], edge{to, in})
			}
		}
		for k := 0; k < rng.IntN(4); k++ {
			to := rng.IntN(n)
			p, in := pointer(to)
			if in && p-w.blocks[to].Addr == 8 {
				in, p = false, w.blocks[to].Addr
			}
			w.root(p)
			rootEdges = append(rootEdges, edge{to, in})
		}
		// definitions
		closure := func(startOnly bool) []bool {
			seen := make([]bool, n)
			var stack []int
			for _, e := range rootEdges {
				if (!startOnly || !e.interior) && !seen[e.to] {
					seen[e.to] = true
					stack = append(stack, e.to)
				}
			}
			for len(stack) > 0 {
				i := stack[len(stack)-1]
				stack = stack[:len(stack)-1]
				for _, e := range out[i] {
					if (!startOnly || !e.interior) && !seen[e.to] {
						seen[e.to] = true
						stack = append(stack, e.to)
					}
				}
			}
			return seen
		}
		strict, any := closure(true), closure(false)
		mc := w.scan(t, Options{})
		ls := w.scan(t, Options{Rules: LeakSanitizer})
		checkReferrers(t, seed, w, mc, ls, rootEdges, out, strict, any)
		referencedByLost := make([]bool, n)
		for i := 0; i < n; i++ {
			if any[i] {
				continue
			}
			for _, e := range out[i] {
				if e.to != i {
					referencedByLost[e.to] = true
				}
			}
		}
		definite := memcheckDefinite(n, any, func(i int) []int {
			var to []int
			for _, e := range out[i] {
				to = append(to, e.to)
			}
			return to
		})
		for i := 0; i < n; i++ {
			name := fmt.Sprint(i)
			wantMC := IndirectlyLost
			switch {
			case strict[i]:
				wantMC = StillReachable
			case any[i]:
				wantMC = PossiblyLost
			case definite[i]:
				wantMC = DefinitelyLost
			}
			if mc[name].Class != wantMC {
				t.Fatalf("seed %d: block %d: Memcheck rules say %v, want %v", seed, i, mc[name].Class, wantMC)
			}
			wantLS := StillReachable
			if !any[i] {
				wantLS = DefinitelyLost
				if referencedByLost[i] {
					wantLS = IndirectlyLost
				}
			}
			if ls[name].Class != wantLS {
				t.Fatalf("seed %d: block %d: LeakSanitizer rules say %v, want %v", seed, i, ls[name].Class, wantLS)
			}
		}
	}
}

// memcheckDefinite says which lost blocks Memcheck's cliques leave
// definitely lost, by its algorithm (mc_leakcheck.c) run plainly over the
// graph of references between lost blocks (interior ones too): in address
// (here index) order, each block not yet marked leads a clique, and every
// unmarked block a walk from it reaches through unmarked blocks is marked
// indirect, a former leader included, the leader itself excepted. (No
// simpler definition holds: a walk does not go through blocks an earlier
// clique marked, so that a former leader reached only that way stays
// definite, an order that the strongly connected components do not tell.)
func memcheckDefinite(n int, reached []bool, edges func(int) []int) []bool {
	marked := make([]bool, n)
	for leader := 0; leader < n; leader++ {
		if reached[leader] || marked[leader] {
			continue
		}
		stack := []int{leader}
		for len(stack) > 0 {
			v := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			for _, w := range edges(v) {
				if !reached[w] && !marked[w] && w != leader {
					marked[w] = true
					stack = append(stack, w)
				}
			}
		}
	}
	definite := make([]bool, n)
	for i := range definite {
		definite[i] = !reached[i] && !marked[i]
	}
	return definite
}

// FuzzScan feeds arbitrary blocks and memory: Scan never panics, gives one
// verdict per block, and its totals add up.
func FuzzScan(f *testing.F) {
	f.Add([]byte{16, 0, 0, 0, 0, 0, 0, 0, 32, 0, 0, 0, 0, 0, 0, 0}, []byte{0x10, 0, 0, 0, 0, 0, 0, 0}, uint8(0))
	f.Fuzz(func(t *testing.T, layout, contents []byte, rules uint8) {
		var blocks []Block
		for len(layout) >= 16 && len(blocks) < 64 {
			blocks = append(blocks, Block{
				Addr: binary.LittleEndian.Uint64(layout) % 4096,
				Size: binary.LittleEndian.Uint64(layout[8:]) % 512,
				ID:   uint64(len(blocks)),
			})
			layout = layout[16:]
		}
		mem := &memory{}
		b := mem.add(0, 2048) // the upper half of the space is a hole
		copy(b, contents)
		roots := Roots{Ranges: []Range{{Addr: 0, Size: 4096, Name: "all"}}, Words: []Word{{Value: 16}}}
		refs := rules&2 != 0
		res, err := Scan(blocks, mem, roots, Options{Rules: Rules(rules % 2), Referrers: refs})
		if err != nil {
			if !errors.Is(err, ErrOverlap) {
				t.Fatal(err)
			}
			return
		}
		if len(res.Verdicts) != len(blocks) {
			t.Fatalf("%d verdicts for %d blocks", len(res.Verdicts), len(blocks))
		}
		var sum uint64
		for _, tot := range res.Totals {
			sum += tot.Blocks
		}
		if sum != uint64(len(blocks)) {
			t.Fatalf("totals count %d blocks of %d", sum, len(blocks))
		}
		if refs && len(res.Referrers) != len(blocks) {
			t.Fatalf("%d referrers for %d blocks", len(res.Referrers), len(blocks))
		}
		for i, r := range res.Referrers {
			if r.Block >= len(blocks) || r.Block < -1 || r.Block >= 0 && r.Root != "" || r.Block == i {
				t.Fatalf("block %d: referrer %+v", i, r)
			}
		}
	})
}

var _ io.ReaderAt = (*memory)(nil)

// closable fails every read once closed.
type closable struct {
	io.ReaderAt
	closed bool
}

func (c *closable) ReadAt(p []byte, off int64) (int, error) {
	if c.closed {
		return 0, errors.New("closed")
	}
	return c.ReaderAt.ReadAt(p, off)
}

// TestAfterRead: the scan reads nothing after AfterRead (where a stopped
// process is let go), and classifies all the same.
func TestAfterRead(t *testing.T) {
	rootSlot = 0
	w := newWorld()
	a, b := w.block("a", 32), w.block("b", 32)
	w.root(a)
	w.mem.put(a, b)
	l := w.block("l", 32)
	w.mem.put(l, w.block("m", 32))
	mem := &closable{ReaderAt: w.mem}
	calls := 0
	for _, rules := range []Rules{Memcheck, LeakSanitizer} {
		mem.closed = false
		res, err := Scan(w.blocks, mem, w.roots, Options{Rules: rules, AfterRead: func() { calls++; mem.closed = true }})
		if err != nil {
			t.Fatal(err)
		}
		want := []Class{StillReachable, StillReachable, DefinitelyLost, IndirectlyLost}
		for i, v := range res.Verdicts {
			if v.Class != want[i] {
				t.Errorf("%v: %s: %v, want %v", rules, w.names[i], v.Class, want[i])
			}
		}
		if len(res.Unread) != 0 {
			t.Errorf("%v: unread %+v", rules, res.Unread)
		}
	}
	if calls != 2 {
		t.Errorf("AfterRead called %d times for 2 scans", calls)
	}
}

// TestReferrers: with Options.Referrers each block names the block or root
// whose reference reached it, and the classes are those of a scan without.
func TestReferrers(t *testing.T) {
	rootSlot = 0
	w := newWorld()
	a, b, c := w.block("a", 32), w.block("b", 32), w.block("c", 32)
	w.root(a)
	w.mem.put(a, b)
	w.mem.put(b+8, c)
	d, e := w.block("d", 48), w.block("e", 48)
	w.mem.put(d, e)
	p, q := w.block("p", 100), w.block("q", 24)
	w.root(p + 40)
	w.mem.put(p, q)
	u := w.block("u", 80)
	w.root(u + 8 + 3) // interior first: the start pointer from b makes it reachable
	w.mem.put(b+16, u)
	r := w.block("r", 16)
	w.roots.Words = []Word{{Value: r, Name: "rax"}}
	want := map[string]Referrer{
		"a": {Block: -1, Root: "globals"}, "b": {Block: 0}, "c": {Block: 1},
		"d": NoReferrer, "e": {Block: 3},
		"p": {Block: -1, Root: "globals"}, "q": {Block: 5},
		"u": {Block: 1}, "r": {Block: -1, Root: "rax"},
	}
	for _, rules := range []Rules{Memcheck, LeakSanitizer} {
		if rules == LeakSanitizer {
			want["u"] = Referrer{Block: -1, Root: "globals"} // its interior pointer reaches it
		}
		plain := w.scan(t, Options{Rules: rules})
		res, err := Scan(w.blocks, w.mem, w.roots, Options{Rules: rules, Referrers: true})
		if err != nil {
			t.Fatal(err)
		}
		for i, name := range w.names {
			if res.Verdicts[i] != plain[name] {
				t.Errorf("%v: %s: %+v with referrers, %+v without", rules, name, res.Verdicts[i], plain[name])
			}
			if got := res.Referrers[i]; got != want[name] {
				t.Errorf("%v: %s: referrer %+v, want %+v", rules, name, got, want[name])
			}
		}
	}
	if res, _ := Scan(w.blocks, w.mem, w.roots, Options{}); res.Referrers != nil {
		t.Errorf("Referrers without Options.Referrers: %v", res.Referrers)
	}
}

// TestReferrersMany: a block that holds thousands of others is each one's
// referrer (a batch large enough for the radix sort), and a long chain's
// links each name the one before.
func TestReferrersMany(t *testing.T) {
	const n = 6000
	mem := &memory{}
	const base = 0x1000000
	holder := mem.add(base, 8*n)
	var blocks []Block
	blocks = append(blocks, Block{Addr: base, Size: 8 * n, ID: 0})
	heap := mem.add(base+1<<20, 32*2*n)
	for i := 0; i < 2*n; i++ {
		addr := uint64(base + 1<<20 + 32*i)
		blocks = append(blocks, Block{Addr: addr, Size: 32, ID: uint64(i + 1)})
		if i < n {
			binary.LittleEndian.PutUint64(holder[8*i:], addr) // the star
		} else if i+1 < 2*n {
			binary.LittleEndian.PutUint64(heap[32*i:], addr+32) // the chain
		}
	}
	root := mem.add(0x10000, 16)
	binary.LittleEndian.PutUint64(root, base)
	binary.LittleEndian.PutUint64(root[8:], base+1<<20+32*n)
	roots := Roots{Ranges: []Range{{Addr: 0x10000, Size: 16, Name: "globals"}}}
	// Shuffled, so that the caller's order is not the address order.
	rng := rand.New(rand.NewPCG(1, 2))
	rng.Shuffle(len(blocks), func(i, j int) { blocks[i], blocks[j] = blocks[j], blocks[i] })
	index := map[uint64]int{}
	for i, b := range blocks {
		index[b.ID] = i
	}
	for _, rules := range []Rules{Memcheck, LeakSanitizer} {
		res, err := Scan(blocks, mem, roots, Options{Rules: rules, Referrers: true})
		if err != nil {
			t.Fatal(err)
		}
		for i, b := range blocks {
			if res.Verdicts[i].Class != StillReachable {
				t.Fatalf("%v: block %d: %v", rules, b.ID, res.Verdicts[i].Class)
			}
			want := Referrer{Block: -1, Root: "globals"}
			switch k := int(b.ID) - 1; {
			case k >= 0 && k < n:
				want = Referrer{Block: index[0]}
			case k > n:
				want = Referrer{Block: index[b.ID-1]}
			}
			if res.Referrers[i] != want {
				t.Fatalf("%v: block %d: referrer %+v, want %+v", rules, b.ID, res.Referrers[i], want)
			}
		}
	}
}

// checkReferrers scans w again with Options.Referrers, under both rules:
// the classes are mc's and ls's, and every referrer is a true one: a root
// or a block with a reference to the block, itself reached as the block
// is (through start pointers for a block still reachable by Memcheck's
// rules), or lost for a lost block; none for a definitely lost one.
func checkReferrers(t *testing.T, seed uint64, w *world, mc, ls map[string]Verdict, rootEdges []edge, out [][]edge, strict, any []bool) {
	t.Helper()
	for _, rules := range []Rules{Memcheck, LeakSanitizer} {
		plain := mc
		if rules == LeakSanitizer {
			plain = ls
		}
		res, err := Scan(w.blocks, w.mem, w.roots, Options{Rules: rules, Referrers: true})
		if err != nil {
			t.Fatal(err)
		}
		for i, name := range w.names {
			v := res.Verdicts[i]
			if v != plain[name] {
				t.Fatalf("seed %d: %v: block %d: %+v with referrers, %+v without", seed, rules, i, v, plain[name])
			}
			ref := res.Referrers[i]
			startOnly := rules == Memcheck && v.Class == StillReachable
			has := func(es []edge) bool {
				for _, e := range es {
					if e.to == i && (!startOnly || !e.interior) {
						return true
					}
				}
				return false
			}
			switch {
			case v.Class == DefinitelyLost:
				if ref != NoReferrer {
					t.Fatalf("seed %d: %v: definitely lost block %d has referrer %+v", seed, rules, i, ref)
				}
			case ref.Block < 0:
				if ref.Root != "globals" || v.Class.Lost() || !has(rootEdges) {
					t.Fatalf("seed %d: %v: block %d (%v): referrer %+v is not a root that references it", seed, rules, i, v.Class, ref)
				}
			default:
				from := ref.Block
				reached := any[from]
				if startOnly {
					reached = strict[from]
				}
				if !has(out[from]) || reached == v.Class.Lost() {
					t.Fatalf("seed %d: %v: block %d (%v): referrer %d (reached %v) does not reference it as it must", seed, rules, i, v.Class, from, reached)
				}
			}
		}
	}
}
