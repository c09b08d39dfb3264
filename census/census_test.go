package census

import (
	"bufio"
	"io"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/heapscope/heapscope/internal/testutil"
)

func TestMain(m *testing.M) { testutil.Main(m) }

// workload is a running test program that printed what it knows of its
// heap and waits for a line on stdin to exit.
type workload struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	out    *bufio.Reader
	blocks map[uint64]known // by address
	tids   []int
	mi     Mallinfo
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

// takeStopped stops pid, takes its census and resumes it.
func takeStopped(tb testing.TB, pid int, o TakeOptions) *Census {
	tb.Helper()
	s := stop(tb, pid)
	defer s.Resume()
	l, err := Open(pid, s.target.Maps, Options{})
	if err != nil {
		tb.Fatal(err)
	}
	c, err := l.Take(s.target, o)
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

func TestKnownHeap(t *testing.T) {
	bin := testutil.MustBuild(t, "census_known", testutil.Options{CXX: true})
	w := start(t, bin)
	c := takeStopped(t, w.pid(), TakeOptions{RSS: true})
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
	if got := c.Mallinfo(); got != w.mi {
		t.Errorf("mallinfo2 from the census:\n%+v\nthe process's:\n%+v", got, w.mi)
	}
	tot := c.Totals()
	t.Logf("%d arenas, %d chunks: %d in use, %d mmapped, %d free, %d tcache, %d fastbin; %d reads, %d bytes, %v",
		len(c.Arenas), len(c.Chunks), tot.Chunks[InUse], tot.Chunks[Mmapped], tot.Chunks[Free], tot.Chunks[Tcache], tot.Chunks[Fastbin],
		c.Reads, c.Bytes, c.Took)
	if tot.Chunks[Tcache] == 0 || tot.Chunks[Fastbin] == 0 || tot.Chunks[Free] == 0 || len(c.Arenas) < 5 {
		t.Errorf("the workload should have chunks in every free list and 5 arenas")
	}
}
