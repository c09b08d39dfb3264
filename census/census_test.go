package census

import (
	"bufio"
	"io"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/heapscope/heapscope/internal/proc"
	"github.com/heapscope/heapscope/internal/stopped"
	"github.com/heapscope/heapscope/internal/testutil"
)

func TestMain(m *testing.M) { testutil.Main(m) }

// workload is a running test program that printed what it knows of its
// heap and waits for a line on stdin to exit.
type workload struct {
	cmd       *exec.Cmd
	stdin     io.WriteCloser
	out       *bufio.Reader
	blocks    map[uint64]known // by address
	tids      []int
	clobbered uint64 // the chunk whose header the program overwrote
	mi        Mallinfo
}

type known struct {
	usable uint64
	kind   string
}

// start runs a workload and reads its report up to "ready".
func start(tb testing.TB, bin string, args ...string) *workload {
	tb.Helper()
	cmd := exec.Command(bin, args...)
	stdin, stdout := testutil.StartPiped(tb, cmd)
	w := &workload{cmd: cmd, stdin: stdin, out: bufio.NewReaderSize(stdout, 1<<20), blocks: map[uint64]known{}}
	tb.Cleanup(func() {
		stdin.Close()
		cmd.Wait()
	})
	for {
		line, err := w.out.ReadString('\n')
		if err != nil {
			tb.Fatalf("reading the workload's report: %v (after %d blocks)", err, len(w.blocks))
		}
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		hex := func(s string) uint64 {
			v, err := strconv.ParseUint(s, 16, 64)
			if err != nil {
				tb.Fatalf("bad line %q", line)
			}
			return v
		}
		switch f[0] {
		case "ready":
			return w
		case "b":
			w.blocks[hex(f[1])] = known{hex(f[2]), f[3]}
		case "t":
			w.tids = append(w.tids, int(hex(f[1])))
		case "c":
			w.clobbered = hex(f[1])
		case "m":
			v := make([]uint64, 10)
			for i := range v {
				v[i] = hex(f[1+i])
			}
			w.mi = Mallinfo{v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8], v[9]}
		}
	}
}

func (w *workload) pid() int { return w.cmd.Process.Pid }

// take takes the census of pid, failing the test on error.
func take(tb testing.TB, pid int, o TakeOptions) *Census {
	tb.Helper()
	c, err := TakeProcess(pid, ProcessOptions{TakeOptions: o})
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

func TestKnownHeap(t *testing.T) {
	bin := testutil.MustBuild(t, "census_known", testutil.Options{CXX: true})
	w := start(t, bin)
	c := take(t, w.pid(), TakeOptions{RSS: true})
	for _, p := range c.Problems {
		t.Errorf("problem: %v", p)
	}
	// The census's live blocks are the program's, and libc's own.
	seen := map[uint64]bool{}
	internal := map[string]int{}
	for _, ch := range c.Chunks {
		if !ch.State.Allocated() {
			continue
		}
		if what, ok := c.Internal[ch.Addr]; ok {
			internal[strings.Fields(what)[1]]++
			continue
		}
		k, ok := w.blocks[ch.User()]
		switch {
		case !ok:
			t.Errorf("census: block %#x (%d bytes, %s) the program does not have", ch.User(), ch.Usable(), ch.State)
		case k.usable != ch.Usable():
			t.Errorf("block %#x: census says %d usable bytes, malloc_usable_size %d", ch.User(), ch.Usable(), k.usable)
		}
		seen[ch.User()] = true
	}
	for addr, k := range w.blocks {
		if !seen[addr] {
			i, _ := c.Containing(addr - 16)
			t.Errorf("program's block %#x (%d bytes) not in the census (chunk %+v)", addr, k.usable, c.Chunks[i])
		}
	}
	if want := len(w.tids); internal["tcache"] != want {
		t.Errorf("%d tcaches named, want %d (one per thread): %v", internal["tcache"], want, c.Internal)
	}
	if want := len(w.tids) - 1; internal["thread"] != want {
		t.Errorf("%d thread vectors named, want %d (one per thread created): %v", internal["thread"], want, c.Internal)
	}
	// Classes, strings and libc's blocks named; nothing else.
	n := NewNamer(w.pid(), c.mapsForTest(), nil)
	for i, ch := range c.Chunks {
		k, ok := w.blocks[ch.User()]
		if !ok || !ch.State.Allocated() {
			continue
		}
		name, text := c.Name(n, i)
		switch k.kind {
		case "-", "holder":
			if name != "" {
				t.Errorf("block %#x named %q %q", ch.User(), name, text)
			}
		case "string":
			if name != "string" || text == "" {
				t.Errorf("string block %#x named %q %q", ch.User(), name, text)
			}
		default:
			if name != k.kind {
				t.Errorf("object %#x of class %s named %q", ch.User(), k.kind, name)
			}
		}
	}
	// Who holds them: the holder's first word points at its child.
	live := c.Live()
	starts := map[uint64]int{}
	for i, b := range live {
		starts[b.Addr] = i
	}
	byFirst := map[int]int{}
	for i, ch := range c.Chunks {
		if j, ok := starts[ch.First]; ok && ch.State.Allocated() {
			byFirst[j] = starts[c.Chunks[i].User()]
		}
	}
	groups := c.Describe(n, func(i int) (int, string) {
		if h, ok := byFirst[i]; ok {
			return h, ""
		}
		return -1, ""
	})
	var heldChild bool
	for _, g := range groups {
		t.Logf("%-12v %-30q %6d blocks %9d B  e.g. %#x %q held by %q (%d)", g.Class, g.Name, g.Blocks, g.Bytes, g.Example, g.Text, g.HeldBy, g.Held)
		if g.Class == ClassOf(4096+16) && g.Name == "" {
			heldChild = g.HeldBy == "a 24 B block" && g.Held == 1
		}
	}
	if !heldChild {
		t.Errorf("the holder's child is not said to be held by a 24 B block")
	}
	if got := c.Mallinfo(); got != w.mi {
		t.Errorf("mallinfo2 from the census:\n%+v\nthe process's:\n%+v", got, w.mi)
	}
	r := checkRSS(t, c)
	// The program wrote every block it holds, but not the calloc'd
	// mmapped one (fresh mappings are zero): the residency is measured.
	var inArenas uint64
	for _, ch := range c.Chunks {
		if _, internal := c.Internal[ch.Addr]; ch.State == InUse && !internal {
			inArenas += ch.Usable()
		}
	}
	if l := r.Line(HeapInUse); l.Bytes != inArenas || l.Rss*100 < l.Bytes*99 {
		t.Errorf("heap in use: %d bytes (%d resident); the program holds %d bytes in arenas, all written", l.Bytes, l.Rss, inArenas)
	}
	if l := r.Line(MmappedChunks); l.Rss+480000 > l.Bytes || l.Rss < 3*200000+300000 {
		t.Errorf("mmapped chunks: %d resident of %d: the 500000 B calloc'd block was never written, the others were", l.Rss, l.Bytes)
	}
	tot := c.Totals()
	t.Logf("%d arenas, %d chunks: %d in use, %d mmapped, %d free, %d tcache, %d fastbin; %d reads, %d bytes, %v",
		len(c.Arenas), len(c.Chunks), tot.Chunks[InUse], tot.Chunks[Mmapped], tot.Chunks[Free], tot.Chunks[Tcache], tot.Chunks[Fastbin],
		c.Reads, c.Bytes, c.Took)
	t.Logf("took %v, paused %v", c.Took, c.Paused)
	if tot.Chunks[Tcache] == 0 || tot.Chunks[Fastbin] == 0 || tot.Chunks[Free] == 0 || len(c.Arenas) < 5 {
		t.Errorf("the workload should have chunks in every free list and 5 arenas")
	}
}

func (c *Census) mapsForTest() []proc.Mapping {
	maps, _ := proc.ReadMaps(c.PID)
	return maps
}

func TestSizeClasses(t *testing.T) {
	prev := SizeClass{}
	for size := uint64(32); size < 64<<20; size += 16 {
		c := ClassOf(size)
		if size < c.Lo || size >= c.Hi {
			t.Fatalf("size %d in class %v", size, c)
		}
		if c != prev && c.Lo != prev.Hi && prev.Hi != 0 {
			t.Fatalf("class %v after %v: a gap or an overlap", c, prev)
		}
		prev = c
	}
}

// checkRSS explains the census's RSS and checks that its parts add up to
// smaps' and that the pages counted in the heap's mappings are the pages
// smaps counts there.
func checkRSS(t *testing.T, c *Census) RSS {
	t.Helper()
	r, err := c.RSS()
	if err != nil {
		t.Fatal(err)
	}
	var rss, pss uint64
	for _, l := range r.Lines {
		t.Logf("%-32s rss %10d pss %10d bytes %10d  %s", l.Part, l.Rss, l.Pss, l.Bytes, l.How)
		rss += l.Rss
		pss += l.Pss
	}
	t.Logf("RSS %d (smaps_rollup %d) PSS %d; trimmable %d; disagreement %d; zero pages known %v", r.Rss, r.Rollup, r.Pss, r.Trimmable, r.Disagreement, r.ZeroPagesKnown)
	if rss != r.Rss || pss != r.Pss {
		t.Errorf("the parts add up to RSS %d, PSS %d; smaps says %d, %d", rss, pss, r.Rss, r.Pss)
	}
	if d := absDiff(r.Rss, r.Rollup); d*100 > r.Rollup {
		t.Errorf("smaps' RSS %d is not smaps_rollup's %d within 1%%", r.Rss, r.Rollup)
	}
	if r.Disagreement*100 > r.Rss {
		t.Errorf("the heap's pages exceed smaps' RSS of its mappings by %d bytes, more than 1%% of %d", r.Disagreement, r.Rss)
	}
	return r
}

func absDiff(a, b uint64) uint64 {
	if a > b {
		return a - b
	}
	return b - a
}

// TestOverflow takes the census of a heap a write past the end of a block
// corrupted: the census reports the clobbered header where it is, resumes
// at the next chunk a free list names, and agrees with the program on every
// block outside the stretch it could not walk.
func TestOverflow(t *testing.T) {
	bin := testutil.MustBuild(t, "census_known", testutil.Options{CXX: true})
	w := start(t, bin, "overflow")
	if w.clobbered == 0 {
		t.Fatal("the program did not say which header it overwrote")
	}
	c := take(t, w.pid(), TakeOptions{})
	var skip Span
	for _, p := range c.Problems {
		t.Logf("problem: %v", p)
		if p.Addr == w.clobbered && strings.Contains(p.What, "corrupted chunk header") {
			skip = Span{p.Addr, p.Addr + p.Skipped}
		}
	}
	if skip.Start == 0 {
		t.Fatalf("no corrupted header reported at %#x", w.clobbered)
	}
	var resumed bool
	for _, p := range c.Problems {
		if p.Addr == w.clobbered && strings.Contains(p.What, "resumed at") {
			resumed = true
		}
	}
	if !resumed {
		t.Fatalf("the walk did not resume past %#x", w.clobbered)
	}
	var missing, found int
	for addr, k := range w.blocks {
		i, ok := c.Find(addr - 16)
		inGap := addr-16 >= skip.Start && addr-16 < skip.End
		switch {
		case inGap && ok:
			t.Errorf("block %#x in the stretch not walked (%#x-%#x) is in the census", addr, skip.Start, skip.End)
		case inGap:
			missing++
		case !ok:
			t.Errorf("block %#x (%d bytes), outside the stretch not walked, is not in the census", addr, k.usable)
		case addr == w.clobbered-16+16 || c.Chunks[i].State == Unknown:
			// the block before the clobbered header: its state is unknown
		case c.Chunks[i].Usable() != k.usable || !c.Chunks[i].State.Allocated():
			t.Errorf("block %#x: census %v %d bytes, program %d", addr, c.Chunks[i].State, c.Chunks[i].Usable(), k.usable)
		default:
			found++
		}
	}
	t.Logf("%d blocks found, %d in the %d bytes not walked", found, missing, skip.End-skip.Start)
	if found == 0 {
		t.Error("no block found")
	}
}

// TestChunkIndex checks the index against a binary search, at every 8
// bytes of stretches of chunks of random sizes, and around them.
func TestChunkIndex(t *testing.T) {
	var cs []Chunk
	addr := uint64(0x55550000_1000)
	seed := uint64(1)
	for run := 0; run < 20; run++ {
		n := 1 + int(seed%300)
		for i := 0; i < n; i++ {
			seed = seed*6364136223846793005 + 1442695040888963407
			size := 32 + (seed>>33)%200*16
			if seed>>60 == 0 {
				size = 4096*3 + 16
			}
			cs = append(cs, Chunk{Addr: addr, Size: size})
			addr += size
		}
		addr += 16 * (1 + (seed>>40)%1000) // a gap: another run
	}
	x := newChunkIndex(cs)
	for a := cs[0].Addr - 64; a < addr+64; a += 8 {
		want := sort.Search(len(cs), func(i int) bool { return cs[i].Addr >= a })
		wantExact := want < len(cs) && cs[want].Addr == a
		if got, exact := x.search(cs, a); got != want || exact != wantExact {
			t.Fatalf("search(%#x) = %d, %v; want %d, %v", a, got, exact, want, wantExact)
		}
	}
}

// TestStopHooks: Stopped is called at each stop with the process stopped,
// WhileStopped with the census kept while it still is, and the census
// names the stop it was read at.
func TestStopHooks(t *testing.T) {
	bin := testutil.MustBuild(t, "census_known", testutil.Options{CXX: true})
	w := start(t, bin, "small")
	var stops []int
	var whileStopped int
	stoppedState := func(what string) {
		if n := testutil.StoppedThreads(t, w.pid()); n != len(w.tids) {
			t.Errorf("%s: %d of the %d threads stopped", what, n, len(w.tids))
		}
	}
	c, err := TakeProcess(w.pid(), ProcessOptions{
		Stopped: func(stop int) {
			stops = append(stops, stop)
			stoppedState("Stopped")
		},
		WhileStopped: func(c *Census, p *stopped.Process) {
			whileStopped++
			stoppedState("WhileStopped")
			if len(c.Live()) < len(w.blocks) {
				t.Errorf("WhileStopped: %d live blocks, the program has %d", len(c.Live()), len(w.blocks))
			}
			if p.PID() != w.pid() {
				t.Errorf("WhileStopped: the process of pid %d, want %d", p.PID(), w.pid())
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(stops) != c.Stops || stops[len(stops)-1] != c.Stop || c.Stop != c.Stops {
		t.Errorf("Stopped called at stops %v; the census says %d stops, read at stop %d", stops, c.Stops, c.Stop)
	}
	if whileStopped != 1 {
		t.Errorf("WhileStopped called %d times, want 1", whileStopped)
	}
	if n := len(c.Live()); n < len(w.blocks) {
		t.Errorf("%d live blocks, the program has %d", n, len(w.blocks))
	}
}
