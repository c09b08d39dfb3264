package census

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime"
	"sort"
	"sync"
	"time"

	"github.com/heapscope/heapscope/internal/errs"
)

// What glibc's malloc.c defines for x86-64 and the DWARF does not say; the
// versions in knownVersions have these.
const (
	sizeSz      = 8               // SIZE_SZ
	align       = 16              // MALLOC_ALIGNMENT
	minSize     = 32              // MINSIZE
	prevInuse   = 1               // PREV_INUSE
	isMmapped   = 2               // IS_MMAPPED
	flagBits    = 7               // SIZE_BITS
	heapMaxSize = 2 * 4 << 20 * 8 // HEAP_MAX_SIZE: 2 * DEFAULT_MMAP_THRESHOLD_MAX (4 MiB * sizeof(long))
	maxArenas   = 1 << 12         // bounds the arena list: more than any arena_max takes
	maxHeaps    = 1 << 16         // bounds one arena's heap list
)

var pageSize = uint64(os.Getpagesize())

// bigChunk is the average chunk size past which the walk reads each
// header, not windows of the heap.
const bigChunk = 4096

// run is the chunks walked in one stretch of a heap, in address order.
type run struct {
	arena      int32
	start, end uint64 // what was walked
	buf        chunkBuf
	text       []textRef // chunk is the index in the run; off, in the walkOut's text, then in Census.textBuf
}

// chunkBuf holds the chunks of a run, and each one's second word of user
// data (a free chunk's bk), in blocks that do not move as it grows: a heap
// of millions of chunks is copied once, into Census.Chunks.
type chunkBuf struct {
	chunks [][]Chunk
	second [][]uint64
	n      int
}

const chunkBlock = 1 << 14

func (b *chunkBuf) add(c Chunk, second uint64) {
	if k := len(b.chunks); k == 0 || len(b.chunks[k-1]) == cap(b.chunks[k-1]) {
		size := min(chunkBlock, 16<<len(b.chunks))
		b.chunks = append(b.chunks, make([]Chunk, 0, size))
		b.second = append(b.second, make([]uint64, 0, size))
	}
	k := len(b.chunks) - 1
	b.chunks[k] = append(b.chunks[k], c)
	b.second[k] = append(b.second[k], second)
	b.n++
}

// last returns the last chunk added, nil if none.
func (b *chunkBuf) last() *Chunk {
	if b.n == 0 {
		return nil
	}
	blk := b.chunks[len(b.chunks)-1]
	return &blk[len(blk)-1]
}

func (b *chunkBuf) appendTo(cs []Chunk, second []uint64) ([]Chunk, []uint64) {
	for i := range b.chunks {
		cs, second = append(cs, b.chunks[i]...), append(second, b.second[i]...)
	}
	return cs, second
}

// gap is a stretch of a heap the walk could not go through: from a
// corrupted header to the end of the heap.
type gap struct {
	arena      int32
	start, end uint64
	top        uint64
	problem    int // the index of its problem in the walkOut's, then in Census.Problems; -1 if not kept
}

// walker holds a census being taken.
type walker struct {
	l    *Libc
	lay  *Layout
	mem  *memory
	c    *Census
	runs []run
	gaps []gap
	jobs []walkJob // heaps to walk

	pid    int      // for pagemap, 0 if not known
	second []uint64 // the runs' second words, merged as c.Chunks is

	// What Read keeps for Finish, which reads nothing of the process.
	merged  bool                 // c.Chunks has every run's chunks
	live    bool                 // the process is stopped: it may be read
	structs [][]byte             // each arena's malloc_state, nil if it cannot be read
	threads []threadRead         // each thread's tcache and thread vector
	key     uint64               // tcache_key, 0 if not known
	cache   map[uint64][2]uint64 // the first two words of list nodes the walk did not find, read while stopped
	heapMax uint64
	par     []byte
}

// Take reads the heap of the process t describes, which must be stopped
// (every thread) until it returns: Read, then Finish.
func (l *Libc) Take(t Target, o TakeOptions) (*Census, error) {
	r, err := l.Read(t, o)
	if err != nil {
		return nil, err
	}
	return r.Finish(), nil
}

// Reading is a census read from a stopped process, not yet finished.
type Reading struct {
	w *walker
}

// Read reads what a census needs of the process t describes, which must be
// stopped (every thread) for as long as it runs: every arena and heap, the
// mmapped chunks, each thread's tcache and the arenas' bins and fastbins.
// It does not resume the process. Finish, which needs nothing more of the
// process, can wait until it runs again: it follows the free lists
// through what Read kept.
//
// An error means the census could not start (the arena or mp_ cannot be
// read, the TLS offset of libc cannot be found); a heap it finds corrupted
// is a census with Problems, not an error.
func (l *Libc) Read(t Target, o TakeOptions) (*Reading, error) {
	start := time.Now()
	w := &walker{l: l, lay: l.layout, mem: newMemory(t.Mem, t.Maps), heapMax: heapMaxSize, pid: t.PID,
		live: true, cache: map[uint64][2]uint64{}}
	c := &Census{PID: t.PID, Libc: "glibc " + l.Version, Time: start, Internal: map[uint64]string{},
		mmapLead: map[uint64]uint64{}}
	c.heapMax, c.chunkStruct = w.heapMax, uint64(l.layout.chunk.size) // heapMax again once mp_ is read
	w.c = c
	if o.RSS && t.PID > 0 {
		// Before anything reads the heap, which maps the kernel's zero
		// page where the program never wrote: the residency is the
		// program's, not the census's.
		res, err := readResidency(t.PID)
		if err != nil {
			return nil, fmt.Errorf("census: pid %d: %w", t.PID, err)
		}
		c.res = res
	}
	for _, th := range t.Threads {
		for _, s := range l.code {
			if th.PC >= s.Start && th.PC < s.End {
				c.Busy = append(c.Busy, fmt.Sprintf("thread %d stopped in malloc's code (%#x)", th.TID, th.PC))
				c.BusyThreads = append(c.BusyThreads, th.TID)
			}
		}
		// The kernel's page of uretprobe trampolines: a thread there has
		// returned from a traced call (malloc done) whose tracer has
		// not recorded it yet, so a census and the trace disagree on
		// its block.
		for _, m := range t.Maps {
			if m.Path == "[uprobes]" && th.PC >= m.Start && th.PC < m.End {
				c.Busy = append(c.Busy, fmt.Sprintf("thread %d stopped returning from a traced call (%#x)", th.TID, th.PC))
				c.BusyThreads = append(c.BusyThreads, th.TID)
			}
		}
	}
	tls, err := w.tlsOffset()
	if err != nil {
		return nil, fmt.Errorf("census: pid %d: %w", t.PID, err)
	}
	if err := w.arenas(); err != nil {
		return nil, fmt.Errorf("census: pid %d: %w", t.PID, err)
	}
	w.walkAll()
	w.mmapped(t.Maps)
	w.readThreads(t.Threads, tls)
	// A corrupted header stops the walk of its heap; the free lists may
	// name chunks past it to walk on from. Otherwise what is left to do
	// needs nothing more of the process, and waits for Finish.
	if len(w.gaps) > 0 {
		w.merge()
		w.resume(w.lists(false))
		w.merged = false
	}
	w.live = false
	c.Took = time.Since(start)
	c.Reads, c.Bytes = w.mem.reads, w.mem.bytes
	return &Reading{w}, nil
}

// Finish follows the free lists through what Read kept and gives each
// chunk its state. It reads nothing of the process.
func (r *Reading) Finish() *Census {
	start := time.Now()
	w := r.w
	if !w.merged {
		w.merge()
	}
	w.states(w.lists(true))
	w.internal()
	w.c.Finish = time.Since(start)
	return w.c
}

// tlsOffset returns libc's static TLS offset (l_tls_offset): on x86-64 a
// thread's block of libc's thread-local variables starts that far below its
// thread pointer. It is in libc's link_map, found from ld.so's _r_debug by
// libc's dynamic section.
func (w *walker) tlsOffset() (uint64, error) {
	if w.l.rDebug == 0 {
		return 0, fmt.Errorf("%w: no _r_debug in ld.so to find libc's TLS block by", errs.ErrNoLayout)
	}
	lm, err := w.mem.u64(w.l.rDebug + uint64(w.lay.rDebug.rMap.off))
	if err != nil {
		return 0, fmt.Errorf("%w: reading _r_debug: %v", errs.ErrNoLayout, err)
	}
	lay := w.lay.linkMap
	for i := 0; lm != 0 && i < 1<<12; i++ {
		b, err := w.mem.block(lm, uint64(lay.tlsModid.off+8))
		if err != nil {
			return 0, fmt.Errorf("%w: reading a link_map: %v", errs.ErrNoLayout, err)
		}
		if get(b, lay.ld) == w.l.dynamic {
			off := int64(get(b, lay.tlsOffset))
			if off <= 0 || off > 1<<30 {
				return 0, fmt.Errorf("%w: libc's l_tls_offset is %d, not a static TLS offset", errs.ErrNoLayout, off)
			}
			return uint64(off), nil
		}
		lm = get(b, lay.next)
	}
	return 0, fmt.Errorf("%w: libc is not in ld.so's list of loaded objects", errs.ErrNoLayout)
}

// arenas reads mp_ and every arena, and walks their heaps.
func (w *walker) arenas() error {
	c, lay := w.c, w.lay
	var size int64
	for _, f := range []field{lay.par.nMmaps, lay.par.mmappedMem, lay.par.sbrkBase, lay.par.hpPagesize} {
		size = max(size, f.off+f.size)
	}
	par, err := w.mem.block(w.l.mp, uint64(size))
	if err != nil {
		return fmt.Errorf("reading mp_: %w", err)
	}
	w.par = par
	c.NMmaps, c.MmappedMem = get(par, lay.par.nMmaps), get(par, lay.par.mmappedMem)
	if hp := get(par, lay.par.hpPagesize); hp != 0 && hp&(hp-1) == 0 && hp <= 1<<30 {
		w.heapMax = 4 * hp // heap_max_size() with glibc.malloc.hugetlb
	}
	c.heapMax = w.heapMax
	addr := w.l.mainArena
	seen := map[uint64]bool{}
	for i := 0; i < maxArenas; i++ {
		if seen[addr] {
			break
		}
		seen[addr] = true
		st, err := w.mem.block(addr, uint64(lay.state.size))
		if err != nil {
			if i == 0 {
				return fmt.Errorf("reading main_arena: %w", err)
			}
			c.problem(addr, 0, "the arena list points at memory that cannot be read: the arenas from here on are not walked")
			break
		}
		w.structs = append(w.structs, st)
		a := Arena{Addr: addr, Main: i == 0, Top: get(st, lay.state.top), SystemMem: get(st, lay.state.systemMem)}
		if get(st, lay.state.mutex) != 0 {
			c.Busy = append(c.Busy, fmt.Sprintf("arena %#x was locked", addr))
		}
		c.Arenas = append(c.Arenas, a)
		idx := int32(len(c.Arenas) - 1)
		if a.Main {
			w.mainHeap(idx, get(par, lay.par.sbrkBase))
		} else {
			w.heaps(idx)
		}
		addr = get(st, lay.state.next)
		if addr == w.l.mainArena {
			return nil
		}
	}
	c.problem(addr, 0, "the arena list does not come back to main_arena")
	return nil
}

// mainHeap walks the main arena: from mp_.sbrk_base to the end of its top
// chunk. An arena that never took memory from sbrk has no chunks.
func (w *walker) mainHeap(a int32, sbrkBase uint64) {
	arena := &w.c.Arenas[a]
	if sbrkBase == 0 {
		return // malloc has not run, or only mmapped
	}
	top, ok := w.topEnd(arena.Top)
	if !ok {
		w.c.problem(arena.Top, 0, "main_arena's top chunk cannot be read: its heap is not walked")
		return
	}
	// The first chunk is sbrk_base aligned so that its block is.
	first := sbrkBase
	if mis := (first + 2*sizeSz) & (align - 1); mis != 0 {
		first += align - mis
	}
	if top < first || top-first > 1<<46 {
		w.c.problem(sbrkBase, 0, "main_arena's top chunk (%#x) is not above mp_.sbrk_base: its heap is not walked", arena.Top)
		return
	}
	arena.Heaps = append(arena.Heaps, Span{sbrkBase, top})
	w.jobs = append(w.jobs, walkJob{a, first, top, arena.Top})
}

// topEnd returns the end of a top chunk, from its header.
func (w *walker) topEnd(top uint64) (uint64, bool) {
	b, err := w.mem.small(top, 2*sizeSz)
	if err != nil {
		return 0, false
	}
	end := top + binary.LittleEndian.Uint64(b[sizeSz:])&^flagBits
	return end, end > top && w.mem.readable(top, end-top)
}

// heaps walks the heaps of a non-main arena: from the one that holds its
// top chunk back through each _heap_info's prev. Each heap starts at a
// multiple of HEAP_MAX_SIZE, with its _heap_info; the first also has the
// arena's malloc_state.
func (w *walker) heaps(a int32) {
	lay := w.lay
	arena := &w.c.Arenas[a]
	h := arena.Top &^ (w.heapMax - 1)
	top := arena.Top
	seen := map[uint64]bool{}
	for i := 0; h != 0 && i < maxHeaps; i++ {
		if seen[h] {
			w.c.problem(h, 0, "the heap list of arena %#x comes back to this heap", arena.Addr)
			return
		}
		seen[h] = true
		hi, err := w.mem.block(h, uint64(lay.heap.size))
		if err != nil {
			w.c.problem(h, 0, "the heap of arena %#x here cannot be read: %v", arena.Addr, err)
			return
		}
		owner, prev, size := get(hi, lay.heap.arena), get(hi, lay.heap.prev), get(hi, lay.heap.length)
		if owner != arena.Addr {
			w.c.problem(h, 0, "this heap's _heap_info names arena %#x, not %#x: it and the heaps before it are not walked", owner, arena.Addr)
			return
		}
		if size < uint64(lay.heap.size) || size > w.heapMax || !w.mem.readable(h, size) {
			w.c.problem(h, 0, "this heap's _heap_info says it is %d bytes, which cannot be read: it and the heaps before it are not walked", size)
			return
		}
		arena.Heaps = append(arena.Heaps, Span{h, h + size})
		first := h + uint64(lay.heap.size)
		if arena.Addr >= h && arena.Addr < h+size {
			// The arena's first heap: its malloc_state follows _heap_info.
			first = arena.Addr + uint64(lay.state.size)
		}
		if mis := (first + 2*sizeSz) & (align - 1); mis != 0 {
			first += align - mis
		}
		end := h + size
		if top >= h && top < end {
			w.jobs = append(w.jobs, walkJob{a, first, end, top})
		} else {
			w.jobs = append(w.jobs, walkJob{a, first, end, 0})
		}
		h = prev
	}
	// The heaps come newest first: the walk wants them in address order.
	hs := arena.Heaps
	sort.Slice(hs, func(i, j int) bool { return hs[i].Start < hs[j].Start })
}

// walk goes through the chunks of one heap from start to end, where top
// (if not 0) is the arena's top chunk. A header it cannot trust stops it:
// the rest is a gap, which resume may walk from a chunk the free lists
// know.
func (w *walker) walk(o *walkOut, j walkJob) {
	a, start, end, top := j.arena, j.start, j.end, j.top
	r := run{arena: a, start: start}
	main := w.c.Arenas[a].Main
	p := start
	defer func() {
		r.end = p
		if r.buf.n > 0 {
			o.runs = append(o.runs, r)
		}
	}()
	// Each header read gives the previous chunk's state (PREV_INUSE).
	prevState := func(hdr uint64) {
		if last := r.buf.last(); last != nil && last.State == 0 {
			if hdr&prevInuse != 0 {
				last.State = InUse
			} else {
				last.State = Free
			}
		}
	}
	unknownPrev := func() {
		if last := r.buf.last(); last != nil && last.State == 0 {
			last.State = Unknown
		}
	}
	avg := uint64(0) // the chunks' sizes, averaged (an exponential moving average, weight 1/8)
	for p < end {
		if end-p < 2*sizeSz {
			o.problem(p, end-p, "the heap ends inside a chunk header")
			unknownPrev()
			return
		}
		limit := end
		if top > p && top < limit {
			limit = top + 4*sizeSz
		}
		if avg >= bigChunk {
			// Among big chunks, read each header (and what the text and
			// the first words need): a window would read their data.
			// A read costs about what copying bigChunk bytes does.
			limit = min(limit, p+2*sizeSz+maxText+1)
		}
		b, err := o.mem.view(p, min(4*sizeSz, end-p), limit)
		if err != nil {
			o.problem(p, end-p, "cannot read this chunk's header: %v", err)
			unknownPrev()
			return
		}
		hdr := binary.LittleEndian.Uint64(b[sizeSz:])
		size := hdr &^ flagBits
		var first, second uint64
		if len(b) >= 4*sizeSz {
			first, second = binary.LittleEndian.Uint64(b[2*sizeSz:]), binary.LittleEndian.Uint64(b[3*sizeSz:])
		}
		if p == top {
			prevState(hdr)
			if p+size != end {
				o.problem(p, 0, "the top chunk's size (%d) does not reach the end of its heap (%#x)", size, end)
			}
			r.buf.add(Chunk{Addr: p, Size: end - p, First: first, Arena: a, State: Top}, second)
			p = end
			return
		}
		if size == 0 && top == 0 && end-p <= minSize+2*sizeSz {
			// The fencepost that ends a heap that is not the newest.
			prevState(hdr)
			r.buf.add(Chunk{Addr: p, Size: end - p, Arena: a, State: Fencepost}, 0)
			p = end
			return
		}
		if size == 2*sizeSz && (top == 0 || main) {
			// The first of the two fenceposts (a main arena whose sbrk
			// was not contiguous has two of this kind). Its PREV_INUSE
			// is clear when the old top before it was freed.
			prevState(hdr)
			r.buf.add(Chunk{Addr: p, Size: size, Arena: a, State: Fencepost}, 0)
			p += size
			continue
		}
		if bad := w.badHeader(hdr, size, p, end); bad != "" {
			pi := len(o.problems)
			o.problem(p, end-p, "corrupted chunk header %#x: %s", hdr, bad)
			unknownPrev()
			o.gaps = append(o.gaps, gap{a, p, end, top, pi})
			return
		}
		prevState(hdr)
		if last := r.buf.last(); last != nil && last.State == Fencepost && main {
			o.problem(p, end-p, "main_arena is not contiguous here (its sbrk was moved by someone else): the rest up to its top chunk is not walked")
			return
		}
		if len(b) >= 4*sizeSz && b[2*sizeSz] >= 0x20 && b[2*sizeSz] < 0x7f {
			if s, ok := printable(o.mem, p+2*sizeSz, size-sizeSz, end); ok {
				r.text = append(r.text, o.keepText(r.buf.n, s))
			}
		}
		r.buf.add(Chunk{Addr: p, Size: size, First: first, Arena: a}, second)
		avg = avg - avg/8 + size/8
		p += size
	}
	// The heap ended without its top chunk or fencepost.
	unknownPrev()
	if top != 0 {
		o.problem(p, 0, "the walk of this heap went past its top chunk %#x", top)
	}
}

// badHeader says what is wrong with a chunk header in an arena, or "".
func (w *walker) badHeader(hdr, size, p, end uint64) string {
	switch {
	case size < minSize:
		return fmt.Sprintf("size %d is below the minimum", size)
	case size%align != 0:
		return fmt.Sprintf("size %d is not a multiple of %d", size, align)
	case size > end-p:
		return fmt.Sprintf("size %d runs past the end of the heap (%#x)", size, end)
	case hdr&isMmapped != 0:
		return "a chunk in an arena is marked mmapped"
	}
	return ""
}

// maxText is the most of a block's text the census keeps.
const maxText = 48

// walkJob is a heap to walk: from start to end, top its arena's top chunk
// when it is in this heap (else 0).
type walkJob struct {
	arena           int32
	start, end, top uint64
}

// walkOut is what the walks of heaps find, one walker goroutine's: the
// census takes them in, in the order of the jobs.
type walkOut struct {
	mem      *memory
	runs     []run
	gaps     []gap // their problem is an index in problems
	problems []Problem
	text     []byte
}

func (o *walkOut) problem(addr, skipped uint64, format string, args ...any) {
	o.problems = append(o.problems, Problem{addr, skipped, fmt.Sprintf(format, args...)})
}

// keepText keeps text b of chunk i (of a run).
func (o *walkOut) keepText(i int, b []byte) textRef {
	t := textRef{i, uint32(len(o.text)), uint32(len(b))}
	o.text = append(o.text, b...)
	return t
}

// walkers bounds the goroutines that walk heaps at once: each reads the
// process on its own, and a heap of big chunks costs a read per chunk.
var walkers = runtime.GOMAXPROCS(0)

// walkAll walks the heaps of w.jobs, several at once, and takes in what
// they found, in the order of the jobs: the census is the same whatever
// the goroutines do.
func (w *walker) walkAll() {
	outs := make([]*walkOut, len(w.jobs))
	next := make(chan int)
	var wg sync.WaitGroup
	for k := 0; k < min(walkers, len(w.jobs)); k++ {
		mem := w.mem.clone()
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				o := &walkOut{mem: mem}
				w.walk(o, w.jobs[i])
				outs[i] = o
			}
		}()
	}
	for i := range w.jobs {
		next <- i
	}
	close(next)
	wg.Wait()
	for _, o := range outs {
		w.take(o)
	}
	w.jobs = nil
}

// take takes in what a walk found.
func (w *walker) take(o *walkOut) {
	base := uint32(len(w.c.textBuf))
	w.c.textBuf = append(w.c.textBuf, o.text...)
	for _, r := range o.runs {
		for i := range r.text {
			r.text[i].off += base
		}
		w.runs = append(w.runs, r)
	}
	kept := make([]int, len(o.problems))
	for i, p := range o.problems {
		kept[i] = -1
		if len(w.c.Problems) < maxProblems {
			kept[i] = len(w.c.Problems)
		}
		w.c.problem(p.Addr, p.Skipped, "%s", p.What)
	}
	for _, g := range o.gaps {
		if g.problem >= 0 {
			g.problem = kept[g.problem]
		}
		w.gaps = append(w.gaps, g)
	}
	if o.mem != w.mem {
		w.mem.reads += o.mem.reads
		w.mem.bytes += o.mem.bytes
		o.mem.reads, o.mem.bytes = 0, 0
	}
}

// printable returns the printable text (ASCII, with tab and newlines) that
// the block at addr starts with, when it is text: at least 4 bytes ended by
// a NUL or the block's end, or at least 16 bytes. The bytes are the
// window's, valid until the next read.
func printable(m *memory, addr, usable, end uint64) ([]byte, bool) {
	n := min(usable, maxText+1, end-addr)
	b, err := m.view(addr, n, end)
	if err != nil {
		return nil, false
	}
	i := 0
	for i < len(b) && (b[i] >= 0x20 && b[i] < 0x7f || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	ended := i < len(b) && b[i] == 0 || uint64(i) == usable
	if i >= 16 || i >= 4 && ended {
		return b[:min(i, maxText)], true
	}
	return nil, false
}

// merge puts the runs' chunks in address order in c.Chunks, dropping a run
// that overlaps another (a heap list corrupted into a loop through the same
// memory).
func (w *walker) merge() {
	rs := w.runs
	sort.SliceStable(rs, func(i, j int) bool { return rs[i].start < rs[j].start })
	n := 0
	for _, r := range rs {
		n += r.buf.n
	}
	c := w.c
	c.Chunks = make([]Chunk, 0, n+int(min(c.NMmaps, 1<<16)))
	w.second = make([]uint64, 0, n)
	c.texts = c.texts[:0]
	var last uint64
	kept := rs[:0]
	for _, r := range rs {
		if r.start < last {
			c.problem(r.start, 0, "this heap overlaps one walked before: not counted twice")
			continue
		}
		base := len(c.Chunks)
		for _, t := range r.text {
			t.chunk += base
			c.texts = append(c.texts, t)
		}
		c.Chunks, w.second = r.buf.appendTo(c.Chunks, w.second)
		last = r.end
		kept = append(kept, r)
	}
	w.runs = kept
	c.index = nil // Find makes it again
	w.merged = true
}

// chunkAt returns the index of the chunk at addr in an arena, if the walk
// found one there.
func (w *walker) chunkAt(addr uint64) (int, bool) {
	i, ok := w.c.Find(addr)
	if !ok || w.c.Chunks[i].Arena < 0 {
		return 0, false
	}
	return i, true
}

// firstWord is words' first word alone: a fastbin's link.
func (w *walker) firstWord(i int, found bool, addr uint64) (uint64, error) {
	if found {
		return w.c.Chunks[i].First, nil
	}
	first, _, err := w.words(i, found, addr)
	return first, err
}

// errNotRead is the error of words after Read for a list node Read did
// not see.
var errNotRead = errors.New("not read while the process was stopped")

// words returns the first two words of the block of the chunk at addr:
// from the walk when it found the chunk (chunk i), else read.
func (w *walker) words(i int, found bool, addr uint64) (first, second uint64, err error) {
	if found {
		return w.c.Chunks[i].First, w.second[i], nil
	}
	if v, ok := w.cache[addr]; ok {
		return v[0], v[1], nil
	}
	if !w.live {
		return 0, 0, errNotRead
	}
	b, err := w.mem.small(addr+2*sizeSz, 2*sizeSz)
	if err != nil {
		return 0, 0, err
	}
	v := [2]uint64{binary.LittleEndian.Uint64(b), binary.LittleEndian.Uint64(b[sizeSz:])}
	w.cache[addr] = v
	return v[0], v[1], nil
}

// resume walks each gap from the first chunk in it that a free list names
// (and whose header is good), up to the end of its heap; a walk resumed
// that meets another corrupted header makes another gap, further on, which
// it resumes in turn. Each chunk a list names is tried once.
func (w *walker) resume(l *listed) {
	known := l.known(w.c)
	for _, g := range w.gaps {
		if g.top != 0 {
			known = append(known, g.top)
		}
	}
	sort.Slice(known, func(i, j int) bool { return known[i] < known[j] })
	for len(w.gaps) > 0 {
		g := w.gaps[0]
		w.gaps = w.gaps[1:]
		i := sort.Search(len(known), func(i int) bool { return known[i] > g.start })
		for ; i < len(known) && known[i] < g.end; i++ {
			k := known[i]
			b, err := w.mem.small(k, 2*sizeSz)
			if err != nil {
				continue
			}
			hdr := binary.LittleEndian.Uint64(b[sizeSz:])
			if k != g.top && w.badHeader(hdr, hdr&^flagBits, k, g.end) != "" {
				continue
			}
			if g.problem >= 0 {
				w.c.Problems[g.problem].Skipped = k - g.start
				w.c.Problems[g.problem].What += fmt.Sprintf("; the walk resumed at %#x, a chunk a free list names", k)
			}
			o := &walkOut{mem: w.mem}
			w.walk(o, walkJob{g.arena, k, g.end, g.top})
			w.take(o)
			break
		}
	}
}
