package census

import (
	"encoding/binary"
	"fmt"
	"sort"
	"sync"
	"testing"

	"github.com/heapscope/heapscope/internal/proc"
	"github.com/heapscope/heapscope/internal/stopped"
	"github.com/heapscope/heapscope/internal/testutil"
)

// image is a copy of a stopped process's memory: what Take reads, which
// the fuzzer corrupts.
type image struct {
	regions []imgRegion // sorted, disjoint
}

type imgRegion struct {
	start uint64
	b     []byte
}

func (im *image) region(addr uint64) *imgRegion {
	i := sort.Search(len(im.regions), func(i int) bool {
		r := im.regions[i]
		return r.start+uint64(len(r.b)) > addr
	})
	if i == len(im.regions) || im.regions[i].start > addr {
		return nil
	}
	return &im.regions[i]
}

func (im *image) ReadAt(p []byte, off int64) (int, error) {
	r := im.region(uint64(off))
	if r == nil {
		return 0, fmt.Errorf("%#x: not in the image", off)
	}
	n := copy(p, r.b[uint64(off)-r.start:])
	if n < len(p) {
		return n, fmt.Errorf("%#x: past the end of its region", uint64(off)+uint64(n))
	}
	return n, nil
}

// word returns the bytes of the word at addr, nil if not in the image.
func (im *image) word(addr uint64) []byte {
	r := im.region(addr)
	if r == nil || addr+8 > r.start+uint64(len(r.b)) {
		return nil
	}
	return r.b[addr-r.start : addr-r.start+8]
}

// fuzzHeap is a real heap copied once for the fuzz test: census_known's
// (small), every readable anonymous or writable mapping of it.
type fuzzHeap struct {
	l   *Libc
	t   Target
	im  *image
	hot []uint64 // the words worth corrupting: headers, links, arena and tcache words
}

var (
	fuzzOnce sync.Once
	fuzzSnap *fuzzHeap
	fuzzErr  error
)

func snapshotHeap(tb testing.TB) *fuzzHeap {
	fuzzOnce.Do(func() { fuzzSnap, fuzzErr = takeSnapshot(tb) })
	if fuzzErr != nil {
		tb.Fatal(fuzzErr)
	}
	return fuzzSnap
}

func takeSnapshot(tb testing.TB) (*fuzzHeap, error) {
	bin, err := testutil.Build("census_known", testutil.Options{CXX: true})
	if err != nil {
		return nil, err
	}
	w := start(tb, bin, "small")
	maps, err := proc.ReadMaps(w.pid())
	if err != nil {
		return nil, err
	}
	l, err := Open(w.pid(), maps, Options{})
	if err != nil {
		return nil, err
	}
	p, err := stopped.Stop(w.pid(), stopped.Options{})
	if err != nil {
		return nil, err
	}
	defer p.Resume()
	h := &fuzzHeap{l: l, im: &image{}}
	h.t.Maps = p.Maps()
	for _, th := range p.Threads() {
		h.t.Threads = append(h.t.Threads, Thread{TID: th.TID, FSBase: th.FSBase(), PC: th.Regs.Rip})
	}
	for _, m := range h.t.Maps {
		if m.Perms[0] != 'r' || m.File() && m.Perms[1] != 'w' || m.End-m.Start > 64<<20 {
			continue
		}
		b := make([]byte, m.End-m.Start)
		if _, err := p.ReadAt(b, int64(m.Start)); err != nil {
			continue // [vvar] and the like: the census reads none of them
		}
		h.im.regions = append(h.im.regions, imgRegion{m.Start, b})
	}
	sort.Slice(h.im.regions, func(i, j int) bool { return h.im.regions[i].start < h.im.regions[j].start })
	h.t.Mem = h.im
	c, err := l.Take(h.t, TakeOptions{})
	if err != nil {
		return nil, err
	}
	if len(c.Problems) > 0 {
		return nil, fmt.Errorf("the copy of the heap has problems: %v", c.Problems)
	}
	for _, ch := range c.Chunks {
		h.hot = append(h.hot, ch.Addr+8, ch.Addr+16, ch.Addr+24, ch.Addr)
	}
	words := func(addr, n uint64) {
		for a := addr; a < addr+n; a += 8 {
			h.hot = append(h.hot, a)
		}
	}
	for _, a := range c.Arenas {
		words(a.Addr, uint64(l.layout.state.size))
		for _, hp := range a.Heaps {
			if !a.Main {
				words(hp.Start, uint64(l.layout.heap.size))
			}
		}
	}
	for _, th := range c.Threads {
		if th.Tcache != 0 {
			words(th.Tcache, uint64(l.layout.tcache.size))
		}
	}
	words(l.mp, 136)
	return h, nil
}

// FuzzTake corrupts words of a real heap (chunk headers and links, the
// arenas, the tcaches, mp_) and takes its census: it must end, without a
// panic, with its reads bounded by the mappings.
func FuzzTake(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f})
	f.Add([]byte{1, 0, 0, 0, 0x10, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0x80, 0xf0, 0, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{5, 1, 0, 0x80, 0x40, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(fuzzTakeOne)
}

func fuzzTakeOne(t *testing.T, patch []byte) {
	h := snapshotHeap(t)
	type saved struct {
		w   []byte
		old [8]byte
	}
	var undo []saved
	defer func() {
		for i := len(undo) - 1; i >= 0; i-- {
			copy(undo[i].w, undo[i].old[:])
		}
	}()
	for len(patch) >= 12 && len(undo) < 64 {
		sel, v := binary.LittleEndian.Uint32(patch), binary.LittleEndian.Uint64(patch[4:])
		patch = patch[12:]
		w := h.im.word(h.hot[int(sel&0x7fffffff)%len(h.hot)])
		if w == nil {
			continue
		}
		var s saved
		s.w = w
		copy(s.old[:], w)
		undo = append(undo, s)
		if sel&0x80000000 != 0 {
			// A plausible corruption: the word off by a little.
			v = binary.LittleEndian.Uint64(w) + uint64(int64(int8(v)))*8
		}
		binary.LittleEndian.PutUint64(w, v)
	}
	c, err := h.l.Take(h.t, TakeOptions{})
	if err != nil {
		return // a census that cannot start says so
	}
	var mapped uint64
	for _, m := range h.t.Maps {
		mapped += m.End - m.Start
	}
	if c.Reads > 1<<20 || c.Bytes > 4*mapped {
		t.Fatalf("%d reads, %d bytes, of %d bytes mapped", c.Reads, c.Bytes, mapped)
	}
	if len(c.Problems) > maxProblems {
		t.Fatalf("%d problems kept", len(c.Problems))
	}
	for i := 1; i < len(c.Chunks); i++ {
		if c.Chunks[i].Addr < c.Chunks[i-1].Addr+c.Chunks[i-1].Size && c.Chunks[i].Arena >= 0 && c.Chunks[i-1].Arena >= 0 {
			t.Fatalf("chunks %#x and %#x overlap", c.Chunks[i-1].Addr, c.Chunks[i].Addr)
		}
	}
	c.Mallinfo()
	c.Describe(nil, nil)
}
