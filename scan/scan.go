package scan

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"runtime"
	"slices"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Block is a live heap block.
type Block struct {
	Addr uint64
	Size uint64 // the size asked for: the bytes scanned, and the extent of interior pointers
	ID   uint64 // the caller's, given back in its Verdict
}

// Range is a root: memory scanned conservatively for references.
type Range struct {
	Addr, Size uint64
	Name       string // what it is, for Result.Unread: "stack of thread 42", "/usr/lib/x/libc.so.6 rw-p", ...
}

// Word is a root value held outside memory, such as a register.
type Word struct {
	Value uint64
	Name  string
}

// Roots are where references start.
type Roots struct {
	Ranges []Range
	Words  []Word
}

// Rules choose whose classification to follow (see the package doc).
type Rules uint8

// The rules.
const (
	Memcheck      Rules = iota // valgrind's Memcheck, with its heuristics (the default)
	LeakSanitizer              // LeakSanitizer: interior pointers reach, lost cycles are indirect
)

func (r Rules) String() string {
	if r == LeakSanitizer {
		return "LeakSanitizer"
	}
	return "Memcheck"
}

// Options tune Scan.
type Options struct {
	Rules Rules
	// NoHeuristics turns Memcheck's heuristics off, as
	// --leak-check-heuristics=none does.
	NoHeuristics bool
	// AfterRead, when set, is called once the scan has read all the
	// memory it needs (the blocks and the roots), before it classifies:
	// where a stopped process can be let go.
	AfterRead func()
	// Referrers also finds, for each block, one block or root that
	// references it (Result.Referrers): the one whose reference marked it
	// reached, possibly or indirectly lost. It costs a word of memory per
	// candidate reference and a slower sort of them.
	Referrers bool
}

// Class is a block's reachability class.
type Class uint8

// The classes. Unclassified is a block whose class memory that could not be
// read might change (see Result.Unread).
const (
	Unclassified Class = iota
	DefinitelyLost
	IndirectlyLost
	PossiblyLost
	StillReachable
	NumClasses = iota
)

var classNames = [NumClasses]string{"unclassified", "definitely lost", "indirectly lost", "possibly lost", "still reachable"}

func (c Class) String() string {
	if int(c) < len(classNames) {
		return classNames[c]
	}
	return fmt.Sprintf("Class(%d)", c)
}

// Lost reports whether the class is definitely or indirectly lost.
func (c Class) Lost() bool { return c == DefinitelyLost || c == IndirectlyLost }

// Verdict is one block's class.
type Verdict struct {
	ID    uint64
	Class Class
	// Heuristic names the Memcheck heuristic that made the block still
	// reachable through an interior pointer ("stdstring", "length64",
	// "newarray"); empty when a start pointer did.
	Heuristic string
}

// Referrer is who references a block: another block, or a root. The
// zero value is not a referrer; NoReferrer is "nothing known".
type Referrer struct {
	Block int    // the referencing block's index in the slice given to Scan; -1 when a root or nothing
	Root  string // the referencing root's name (a Range's or a Word's) when Block is -1
}

// NoReferrer is the Referrer of a block that nothing references (a
// definitely lost block).
var NoReferrer = Referrer{Block: -1}

// Unread is memory the scan needed and could not read.
type Unread struct {
	Root  string // the root's name; empty for a block
	Block int    // the block's index in the slice given to Scan; -1 for a root
	Addr  uint64
	Size  uint64
	Err   error
}

// Total counts blocks and their bytes.
type Total struct{ Blocks, Bytes uint64 }

// Result is what Scan found.
type Result struct {
	Rules    Rules
	Verdicts []Verdict // one per block, in the order given
	// Referrers, with Options.Referrers, holds one referrer per block in
	// the order given: for a reached block the block or root whose
	// reference reached it first (a still reachable block's, the one that
	// made it so: its parent in the marking), for an indirectly lost block
	// the lost block that leads to it; NoReferrer for a definitely lost
	// one. Nil without Options.Referrers.
	Referrers []Referrer
	Totals    [NumClasses]Total // by class
	Unread    []Unread
	Scanned   uint64 // bytes of roots and blocks read and scanned

	ReadTime     time.Duration // reading the blocks and the roots
	ClassifyTime time.Duration // after the reading (AfterRead included)
}

// ErrOverlap is returned for blocks that overlap one another.
var ErrOverlap = errors.New("heap blocks overlap")

// block states while scanning
const (
	unreached uint8 = iota
	possible        // Memcheck: reached through an interior pointer only
	reachable
	indirect
)

// heuristics, as Memcheck names them
const (
	heurNone uint8 = iota
	heurStdString
	heurLength64
	heurNewArray
)

var heurNames = [...]string{"", "stdstring", "length64", "newarray"}

// extent is where a block lies: [start, end).
type extent struct{ start, end uint64 }

type scanner struct {
	opt    Options
	heur   bool
	bl     []extent // the blocks, sorted
	ord    []int32  // sorted position → index in the caller's slice
	lo, hi uint64   // every reference is in [lo, hi)
	segs   []segment
	state  []uint8
	via    []uint8 // heuristic that made a block reachable
	stack  []int32 // blocks to scan
	later  []int32 // possibly lost blocks to scan once stack is empty
	data   []byte  // the blocks' contents
	free   func()  // releases data
	off    []int64 // offset of each block's contents in data, -1 when unread
	res    *Result

	roots    []rootData
	cands    []uint64 // candidate words to look up (marking)
	tmp      []uint64 // the radix sort's other buffer
	definite bool     // the candidates come from roots or still reachable blocks
	indirect bool     // LeakSanitizer's indirect phase: the candidates come from blocks not reached

	incomplete bool // a root or a reached block could not be read

	// With Options.Referrers: the origin of each candidate (see
	// origin), its sort's other buffer, each block's parent by sorted
	// position, the roots' names, and the origin of the root scanned now.
	from      []int32
	tmpFrom   []int32
	parent    []int32
	rootNames []string
	origin    int32
}

// Origins of references, with Options.Referrers: a block's sorted
// position (0 or more), noOrigin, or a root (rootOrigin(k), k an index in
// scanner.rootNames).
const noOrigin int32 = -1

func rootOrigin(k int) int32 { return -2 - int32(k) }

// Scan classifies blocks by what references them from roots, reading the
// roots and the blocks' contents through mem. Memory that cannot be read
// is not an error: it is listed in Result.Unread, and the classes it could
// change are Unclassified. The error is for bad input: overlapping blocks.
func Scan(blocks []Block, mem io.ReaderAt, roots Roots, opt Options) (*Result, error) {
	s := &scanner{opt: opt, heur: opt.Rules == Memcheck && !opt.NoHeuristics, res: &Result{Rules: opt.Rules}}
	if err := s.index(blocks); err != nil {
		return nil, err
	}
	if opt.Referrers {
		s.parent = make([]int32, len(s.bl))
		for j := range s.parent {
			s.parent[j] = noOrigin
		}
		for _, r := range roots.Ranges {
			s.rootNames = append(s.rootNames, r.Name)
		}
		for _, w := range roots.Words {
			s.rootNames = append(s.rootNames, w.Name)
		}
	}
	t0 := time.Now()
	s.read(mem, blocks)
	for k, r := range roots.Ranges {
		s.readRoot(mem, r, k)
	}
	t1 := time.Now()
	if opt.AfterRead != nil {
		opt.AfterRead()
	}
	s.mark(roots)

	n := len(s.bl)
	if opt.Rules == LeakSanitizer {
		// Every block not reached, scanned once, in any order: what
		// each references (itself aside) and was not reached is
		// indirect. The lookups are batched as in the marking.
		s.indirect = true
		for j := 0; j < n; j++ {
			if s.state[j] != reachable {
				s.scanBlock(j, modeLSanIndirect)
			}
		}
		s.flush()
	} else {
		for j := 0; j < n; j++ {
			if s.state[j] == unreached {
				s.push(j)
				s.drain(int32(j))
			}
		}
	}
	s.verdicts(blocks)
	s.free()
	s.res.ReadTime, s.res.ClassifyTime = t1.Sub(t0), time.Since(t1)
	return s.res, nil
}

// index sorts the blocks by address.
func (s *scanner) index(blocks []Block) error {
	n := len(blocks)
	ord := make([]int32, n)
	for i := range ord {
		ord[i] = int32(i)
	}
	slices.SortFunc(ord, func(a, b int32) int {
		x, y := blocks[a], blocks[b]
		switch {
		case x.Addr != y.Addr:
			if x.Addr < y.Addr {
				return -1
			}
			return 1
		case x.Size != y.Size:
			if x.Size < y.Size {
				return -1
			}
			return 1
		}
		return 0
	})
	s.ord = ord
	s.bl = make([]extent, n)
	s.lo = ^uint64(0)
	for j, i := range ord {
		b := blocks[i]
		end := b.Addr + b.Size
		if end < b.Addr {
			return fmt.Errorf("block %#x of %d bytes wraps around the address space: %w", b.Addr, b.Size, ErrOverlap)
		}
		if j > 0 && (b.Addr < s.bl[j-1].end || b.Addr == s.bl[j-1].start) {
			p := blocks[ord[j-1]]
			return fmt.Errorf("block %#x (%d bytes) and block %#x (%d bytes): %w", p.Addr, p.Size, b.Addr, b.Size, ErrOverlap)
		}
		s.bl[j].start, s.bl[j].end = b.Addr, end
		s.lo = min(s.lo, b.Addr)
		if b.Size == 0 {
			end++ // a zero-sized block is referenced at its start
		}
		s.hi = max(s.hi, end)
	}
	if n == 0 {
		s.lo, s.hi = 1, 0
	}
	s.buildSegments()
	s.state = make([]uint8, n)
	s.via = make([]uint8, n)
	s.off = make([]int64, n)
	return nil
}

// maxGap is the widest gap between two blocks read in one span; maxSpan
// bounds a span.
const (
	maxGap  = 4 << 10
	maxSpan = 64 << 20
)

// read reads every block's contents into s.data, in spans of neighbouring
// blocks; a span that cannot be read whole is read block by block.
func (s *scanner) read(mem io.ReaderAt, blocks []Block) {
	type span struct {
		addr, size uint64
		first, end int // sorted positions [first, end)
		off        int64
	}
	var spans []span
	var total int64
	for j := 0; j < len(s.bl); {
		sp := span{addr: s.bl[j].start, first: j, off: total}
		end := s.bl[j].end
		k := j + 1
		for k < len(s.bl) && s.bl[k].start-end <= maxGap && s.bl[k].end-sp.addr <= maxSpan {
			end = max(end, s.bl[k].end)
			k++
		}
		sp.size, sp.end = end-sp.addr, k
		spans = append(spans, sp)
		total += int64(sp.size)
		j = k
	}
	var populate func(from, to int)
	s.data, s.free, populate = buffer(int(total))
	// Several readers, each populating its part of the buffer and reading
	// its spans: the process waits for the copy, and two cores copy (and
	// have the kernel zero pages) faster than one.
	workers := min(runtime.GOMAXPROCS(0), 4)
	if total < 16<<20 {
		workers = 1
	}
	var mu sync.Mutex
	var unread []Unread
	var wg sync.WaitGroup
	for first := 0; first < len(spans); {
		last := first + 1
		for last < len(spans) && spans[last].off-spans[first].off < total/int64(workers) {
			last++
		}
		group := spans[first:last]
		wg.Go(func() {
			g0, g1 := group[0], group[len(group)-1]
			populate(int(g0.off), int(g1.off+int64(g1.size)))
			for _, sp := range group {
				buf := s.data[sp.off : sp.off+int64(sp.size)]
				n, err := mem.ReadAt(buf, int64(sp.addr))
				for j := sp.first; j < sp.end; j++ {
					s.off[j] = sp.off + int64(s.bl[j].start-sp.addr)
					if err == nil || s.bl[j].end-sp.addr <= uint64(n) {
						continue
					}
					// This block was past the failure: read it alone.
					b := s.data[s.off[j] : s.off[j]+int64(s.bl[j].end-s.bl[j].start)]
					if _, berr := mem.ReadAt(b, int64(s.bl[j].start)); berr != nil {
						s.off[j] = -1
						i := int(s.ord[j])
						mu.Lock()
						unread = append(unread, Unread{Block: i, Addr: blocks[i].Addr, Size: blocks[i].Size, Err: berr})
						mu.Unlock()
					}
				}
			}
		})
		first = last
	}
	wg.Wait()
	slices.SortFunc(unread, func(a, b Unread) int { return cmp.Compare(a.Addr, b.Addr) })
	s.res.Unread = append(s.res.Unread, unread...)
}

// buffer returns n bytes for the blocks' contents, what releases them, and
// what populates a part of them. A large buffer is mapped apart, with
// transparent huge pages asked for, and each reader populates its part in
// one call before it copies: filling it page fault by page fault cost more
// than the scan (0.35-0.6 s for 512 MiB here, against 0.07-0.2 s).
func buffer(n int) (b []byte, free func(), populate func(from, to int)) {
	none := func(int, int) {}
	if n < 4<<20 {
		return make([]byte, n), func() {}, none
	}
	b, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return make([]byte, n), func() {}, none
	}
	unix.Madvise(b, unix.MADV_HUGEPAGE)
	populate = func(from, to int) {
		const page = 4096
		from, to = from&^(page-1), min((to+page-1)&^(page-1), len(b))
		// Linux 5.14 on; ignored before (the copy then faults).
		unix.Madvise(b[from:to], unix.MADV_POPULATE_WRITE)
	}
	return b, func() { unix.Munmap(b) }, populate
}

// contents returns block j's bytes, or nil when they could not be read.
func (s *scanner) contents(j int) []byte {
	if s.off[j] < 0 {
		return nil
	}
	return s.data[s.off[j] : s.off[j]+int64(s.bl[j].end-s.bl[j].start)]
}

// segment is a run of blocks with no wide gap between them, and a bucket
// table over its addresses: bucket k holds the blocks that may contain an
// address of [start + k<<shift, start + (k+1)<<shift), as the sorted
// positions first[k] to first[k+1] (inclusive: a block that starts in an
// earlier bucket may reach into this one). The table turns the binary
// search over every block into a search within a bucket (a few blocks).
type segment struct {
	start, end uint64 // [start, end) covers every block of it
	shift      uint
	first      []int32
}

// segGap is the widest gap inside a segment; past it a new one starts, so
// that the tables of a sparse address space stay small.
const segGap = 64 << 20

func (s *scanner) buildSegments() {
	n := len(s.bl)
	end := func(i int) uint64 { return max(s.bl[i].end, s.bl[i].start+1) } // a zero-sized block holds its start
	for j := 0; j < n; {
		k, hi := j+1, end(j)
		for k < n && s.bl[k].start-hi <= segGap {
			hi = max(hi, end(k))
			k++
		}
		seg := segment{start: s.bl[j].start, end: hi, shift: 12}
		for (hi-seg.start)>>seg.shift > uint64(k-j) { // about a bucket per block at most
			seg.shift++
		}
		buckets := int((hi-seg.start-1)>>seg.shift) + 1
		seg.first = make([]int32, buckets+1)
		i := j
		for b := range seg.first {
			// the first block that ends after the bucket's start
			bs := seg.start + uint64(b)<<seg.shift
			for i < k && end(i) <= bs {
				i++
			}
			seg.first[b] = int32(i)
		}
		s.segs = append(s.segs, seg)
		j = k
	}
}

// find returns the sorted position of the block that w points into, or -1.
func (s *scanner) find(w uint64) int {
	segs := s.segs
	i := 0
	if len(segs) > 1 {
		lo, hi := 0, len(segs)
		for lo < hi {
			m := int(uint(lo+hi) >> 1)
			if segs[m].start <= w {
				lo = m + 1
			} else {
				hi = m
			}
		}
		i = lo - 1
		if i < 0 {
			return -1
		}
	}
	seg := &segs[i]
	if w < seg.start || w >= seg.end {
		return -1
	}
	b := (w - seg.start) >> seg.shift
	// the last block of [first[b], first[b+1]] that starts at or before w
	j := int(seg.first[b])
	n := min(int(seg.first[b+1])+1, len(s.bl)) - j
	if n <= 0 {
		return -1
	}
	// the last of the n blocks from j that starts at or before w, or j
	// (branch-free steps: the processor overlaps the lookups of a batch)
	for n > 1 {
		half := n >> 1
		if s.bl[j+half].start <= w {
			j += half
		}
		n -= half
	}
	if e := s.bl[j]; w < e.end && w >= e.start || w == e.start {
		return j
	}
	return -1
}

// Scan modes: a clique leader's sorted position (Memcheck's clique phase),
// or one of these.
const (
	modeMark         int32 = -1 // marking from the roots (batched lookups)
	modeLSanIndirect int32 = -2
)

// push queues block j for scanning. Each block changes state at most twice
// (Memcheck's possible, then reachable), and is queued at each change.
func (s *scanner) push(j int) {
	if s.state[j] == possible {
		s.later = append(s.later, int32(j))
		return
	}
	s.stack = append(s.stack, int32(j))
}

// mark finds every block the roots lead to. The candidate words (those in
// the heap's range) are gathered in batches, sorted and merged with the
// sorted blocks: the lookups walk the index in order instead of jumping
// about it, one cache miss each, which costs several times more than the
// sort. The roots and the blocks they lead to through start pointers are
// taken first (Memcheck's definite prior), then the possibly lost ones:
// what these lead to can only be possibly lost, and by then some have
// become reachable (and were scanned as such), so that no block is
// scanned twice.
func (s *scanner) mark(roots Roots) {
	s.definite = true
	for k, w := range roots.Words {
		s.origin = rootOrigin(len(roots.Ranges) + k)
		s.candidate(w.Value)
	}
	for _, r := range s.roots {
		s.origin = rootOrigin(r.root)
		s.scanOutsideBlocks(r.b, r.addr)
		s.res.Scanned += uint64(len(r.b))
	}
	for {
		s.flush()
		if len(s.stack) == 0 {
			break
		}
		for len(s.stack) > 0 {
			j := int(s.stack[len(s.stack)-1])
			s.stack = s.stack[:len(s.stack)-1]
			s.scanBlock(j, modeMark)
		}
	}
	s.definite = false
	for {
		s.flush()
		if len(s.later) == 0 {
			break
		}
		for len(s.later) > 0 {
			j := int(s.later[len(s.later)-1])
			s.later = s.later[:len(s.later)-1]
			if s.state[j] == possible {
				s.scanBlock(j, modeMark)
			}
		}
	}
}

// drain scans the blocks queued until none is left, looking each word up
// alone (the phases after marking, whose order matters).
func (s *scanner) drain(mode int32) {
	for len(s.stack) > 0 {
		j := int(s.stack[len(s.stack)-1])
		s.stack = s.stack[:len(s.stack)-1]
		s.scanBlock(j, mode)
	}
}

func (s *scanner) scanBlock(j int, mode int32) {
	b := s.contents(j)
	if b == nil {
		if mode == modeMark {
			s.incomplete = true // a reached block hides what it references
		}
		return
	}
	s.res.Scanned += uint64(len(b))
	s.words(b, s.bl[j].start, mode, j)
}

// words looks up every aligned word of b, which is memory at addr, that is
// in the heap's range: gathered for a batch when marking, one by one in
// the other phases.
func (s *scanner) words(b []byte, addr uint64, mode int32, from int) {
	if skip := (8 - addr%8) % 8; skip != 0 {
		if uint64(len(b)) <= skip {
			return
		}
		b = b[skip:]
	}
	lo, span := s.lo, s.hi-s.lo
	if mode == modeMark || mode == modeLSanIndirect {
		// A lost block's references to itself do not make it indirect
		// (LeakSanitizer).
		self, selfSpan := uint64(1), uint64(0)
		if mode == modeLSanIndirect {
			self, selfSpan = s.bl[from].start, s.bl[from].end-s.bl[from].start
		}
		if s.parent != nil {
			s.wordsFrom(b, from, self, selfSpan)
			return
		}
		c := s.cands
		for _, w := range asWords(b) {
			if w-lo < span && w-self >= selfSpan {
				c = append(c, w)
				if len(c) >= maxCands {
					s.cands = c
					s.flush()
					c = s.cands
				}
			}
		}
		s.cands = c
		return
	}
	for _, w := range asWords(b) {
		if w-lo < span {
			if j := s.find(w); j >= 0 {
				s.apply(j, w, mode, from)
			}
		}
	}
}

// wordsFrom is words' batching with Options.Referrers: each candidate's
// origin is kept beside it (block from, or the root being scanned when
// from is negative).
func (s *scanner) wordsFrom(b []byte, from int, self, selfSpan uint64) {
	o := s.origin
	if from >= 0 {
		o = int32(from)
	}
	lo, span := s.lo, s.hi-s.lo
	for _, w := range asWords(b) {
		if w-lo < span && w-self >= selfSpan {
			s.cands = append(s.cands, w)
			s.from = append(s.from, o)
			if len(s.cands) >= maxCands {
				s.flush()
			}
		}
	}
}

// asWords views b as little-endian words (the machine's order: heapscope
// reads memory of its own architecture), the trailing partial word left
// out. A b that is not 8-aligned in memory is copied.
func asWords(b []byte) []uint64 {
	n := len(b) / 8
	if n == 0 {
		return nil
	}
	if uintptr(unsafe.Pointer(&b[0]))%8 != 0 {
		w := make([]uint64, n)
		for i := range w {
			w[i] = binary.LittleEndian.Uint64(b[8*i:])
		}
		return w
	}
	return unsafe.Slice((*uint64)(unsafe.Pointer(&b[0])), n)
}

// maxCands is the size of a batch of candidate words (8 MiB).
const maxCands = 1 << 20

// candidate adds a root word to the batch.
func (s *scanner) candidate(w uint64) {
	if w-s.lo < s.hi-s.lo {
		s.cands = append(s.cands, w)
		if s.parent != nil {
			s.from = append(s.from, s.origin)
		}
		if len(s.cands) >= maxCands {
			s.flush()
		}
	}
}

// flush looks up the batch of candidates: sorted, they are merged with the
// sorted blocks, galloping ahead over the blocks that no candidate points
// into (so that a small batch costs little in a large heap).
func (s *scanner) flush() {
	c := s.cands
	if len(c) == 0 {
		return
	}
	s.sortCands()
	c = s.cands
	bl := s.bl
	n := len(bl)
	j := -1 // the last block that starts at or before the candidate
	for ci, w := range c {
		if j+1 < n && bl[j+1].start <= w {
			lo, step := j+1, 1
			for lo+step < n && bl[lo+step].start <= w {
				lo += step
				step <<= 1
			}
			hi := min(lo+step, n)
			for hi-lo > 1 {
				m := int(uint(lo+hi) >> 1)
				if bl[m].start <= w {
					lo = m
				} else {
					hi = m
				}
			}
			j = lo
		}
		if j >= 0 && (w < bl[j].end || w == bl[j].start) {
			if s.indirect {
				if s.state[j] != reachable {
					s.state[j] = indirect
					if s.parent != nil && s.parent[j] == noOrigin {
						s.parent[j] = s.from[ci]
					}
				}
				continue
			}
			if s.parent == nil {
				s.markRef(j, w)
				continue
			}
			if st := s.state[j]; s.markRef(j, w) != st {
				s.parent[j] = s.from[ci]
			}
		}
	}
	s.cands = s.cands[:0]
	s.from = s.from[:0]
}

// sortCands sorts the batch: a radix sort of the words less the heap's
// lowest address, 16 bits a pass, for a large batch.
func (s *scanner) sortCands() {
	c := s.cands
	if s.parent != nil {
		s.sortCandsFrom()
		return
	}
	if len(c) < 1<<12 {
		slices.Sort(c)
		return
	}
	if cap(s.tmp) < len(c) {
		s.tmp = make([]uint64, len(c), cap(c))
	}
	tmp := s.tmp[:len(c)]
	span := s.hi - s.lo
	var count [1 << 16]int32
	for shift := uint(0); shift < 64 && span>>shift != 0; shift += 16 {
		radixOffsets(&count, c, s.lo, shift)
		for _, w := range c {
			d := ((w - s.lo) >> shift) & 0xffff
			tmp[count[d]] = w
			count[d]++
		}
		c, tmp = tmp, c
	}
	s.cands, s.tmp = c, tmp[:0]
}

// radixOffsets sets count, for one pass of the radix sort of c (the 16
// bits at shift of each word's offset from lo), to where each digit's words
// start in the pass's output.
func radixOffsets(count *[1 << 16]int32, c []uint64, lo uint64, shift uint) {
	clear(count[:])
	for _, w := range c {
		count[((w-lo)>>shift)&0xffff]++
	}
	var sum int32
	for i, k := range count {
		count[i] = sum
		sum += k
	}
}

// sortCandsFrom is sortCands with each candidate's origin moved beside
// it: the same radix sort, stable, so that among the references to a
// block the first gathered comes first.
func (s *scanner) sortCandsFrom() {
	c, f := s.cands, s.from
	if len(c) < 1<<12 {
		// A small batch (a chain of blocks, each leading to the next,
		// flushes a few words at a time): a comparison sort, stable.
		type cand struct {
			w uint64
			o int32
		}
		ps := make([]cand, len(c))
		for i := range c {
			ps[i] = cand{c[i], f[i]}
		}
		slices.SortStableFunc(ps, func(a, b cand) int { return cmp.Compare(a.w, b.w) })
		for i, p := range ps {
			c[i], f[i] = p.w, p.o
		}
		return
	}
	if cap(s.tmp) < len(c) {
		s.tmp = make([]uint64, len(c), cap(c))
	}
	if cap(s.tmpFrom) < len(f) {
		s.tmpFrom = make([]int32, len(f), cap(f))
	}
	tmp, tmpFrom := s.tmp[:len(c)], s.tmpFrom[:len(f)]
	span := s.hi - s.lo
	var count [1 << 16]int32
	for shift := uint(0); shift < 64 && span>>shift != 0; shift += 16 {
		radixOffsets(&count, c, s.lo, shift)
		for i, w := range c {
			d := ((w - s.lo) >> shift) & 0xffff
			tmp[count[d]] = w
			tmpFrom[count[d]] = f[i]
			count[d]++
		}
		c, tmp = tmp, c
		f, tmpFrom = tmpFrom, f
	}
	s.cands, s.tmp = c, tmp[:0]
	s.from, s.tmpFrom = f, tmpFrom[:0]
}

// markRef records, while marking, a reference w to block j from a root or
// a reached block (definite: a root or a still reachable block, as Memcheck
// says it), and returns the block's state after it.
func (s *scanner) markRef(j int, w uint64) uint8 {
	st := s.state[j]
	if s.opt.Rules == LeakSanitizer {
		if st == unreached {
			s.state[j] = reachable
			s.push(j)
		}
		return s.state[j]
	}
	if st == reachable {
		if w == s.bl[j].start {
			s.via[j] = heurNone
		}
		return st
	}
	start, h := w == s.bl[j].start, heurNone
	if !start && s.heur {
		h = s.heuristic(j, w)
		start = h != heurNone
	}
	switch {
	case start && s.definite:
		s.state[j], s.via[j] = reachable, h
		s.push(j)
	case st == unreached:
		s.state[j] = possible
		s.push(j)
	}
	return s.state[j]
}

// apply records a reference w to block j from lost block from in
// Memcheck's cliques (mode is the leader).
func (s *scanner) apply(j int, w uint64, mode int32, from int) {
	switch {
	case mode >= 0:
		if s.state[j] == unreached && j != int(mode) {
			s.state[j] = indirect
			if s.parent != nil {
				s.parent[j] = int32(from)
			}
			s.push(j)
		}
	}
}

// heuristic returns the Memcheck heuristic by which w, a pointer into block
// j's interior, counts as a start pointer.
func (s *scanner) heuristic(j int, w uint64) uint8 {
	off := w - s.bl[j].start
	if off != 8 && off != 24 {
		return heurNone // the only offsets they know: no need to read the block
	}
	b := s.contents(j)
	size := s.bl[j].end - s.bl[j].start
	word := func(k int) uint64 { return binary.LittleEndian.Uint64(b[8*k:]) }
	switch {
	case len(b) < 16: // unread, or too small for any
		return heurNone
	case off == 24:
		// std::string's old layout: length, capacity, refcount, chars.
		if capacity := word(1); capacity < size && 3*8+capacity+1 == size && word(0) <= capacity {
			return heurStdString
		}
	case off == 8:
		if n := word(0); n > 0 && size-8 == n {
			return heurLength64
		}
		if n := word(0); n > 0 && (size-8)%n == 0 {
			return heurNewArray // new[] of objects with a destructor: count, then elements
		}
	}
	return heurNone
}

// rootChunk is how much of a root range is read at once.
const rootChunk = 1 << 20

// rootData is memory read from a root range.
type rootData struct {
	addr uint64
	b    []byte
	root int // its Range's index in Roots.Ranges
}

// readRoot reads a root range, skipping the pages that cannot be read
// (each run of them is one Unread).
func (s *scanner) readRoot(mem io.ReaderAt, r Range, k int) {
	end := r.Addr + r.Size
	if end < r.Addr {
		end = ^uint64(0)
	}
	bad := -1 // the Unread of the pages failing now
	for at := r.Addr; at < end; {
		want := min(uint64(rootChunk), end-at)
		buf := make([]byte, want)
		n, err := mem.ReadAt(buf, int64(at))
		if n > 0 {
			s.roots = append(s.roots, rootData{at, buf[:n], k})
			bad = -1
		}
		at += uint64(n)
		if err == nil || uint64(n) == want {
			continue
		}
		// Skip the page that failed and go on after it.
		next := min((at|4095)+1, end)
		if bad < 0 {
			s.res.Unread = append(s.res.Unread, Unread{Root: r.Name, Block: -1, Addr: at, Err: err})
			bad = len(s.res.Unread) - 1
		}
		s.res.Unread[bad].Size += next - at
		s.incomplete = true
		at = next
	}
}

// scanOutsideBlocks scans the words of b (memory at addr) that are not in
// a live block.
func (s *scanner) scanOutsideBlocks(b []byte, addr uint64) {
	end := addr + uint64(len(b))
	// the first block that ends after addr
	lo, hi := 0, len(s.bl)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if s.bl[m].end <= addr {
			lo = m + 1
		} else {
			hi = m
		}
	}
	at := addr
	for j := lo; j < len(s.bl) && s.bl[j].start < end; j++ {
		if s.bl[j].start > at {
			s.words(b[at-addr:s.bl[j].start-addr], at, modeMark, -1)
		}
		at = max(at, min(s.bl[j].end, end))
	}
	if at < end {
		s.words(b[at-addr:], at, modeMark, -1)
	}
}

// verdicts turns the states into classes, Unclassified where memory that
// was not read could change them.
func (s *scanner) verdicts(blocks []Block) {
	lostUnread := false
	for j := range s.bl {
		if s.off[j] < 0 && (s.state[j] == unreached || s.state[j] == indirect) {
			lostUnread = true
		}
		if s.off[j] < 0 && (s.state[j] == reachable || s.state[j] == possible) {
			s.incomplete = true
		}
	}
	s.res.Verdicts = make([]Verdict, len(blocks))
	for j := range s.bl {
		i := s.ord[j]
		var c Class
		switch s.state[j] {
		case reachable:
			c = StillReachable
		case possible:
			c = PossiblyLost
		case indirect:
			c = IndirectlyLost
		default:
			c = DefinitelyLost
		}
		switch {
		case c == StillReachable:
		case s.incomplete:
			c = Unclassified
		case s.off[j] < 0, c == DefinitelyLost && lostUnread:
			c = Unclassified
		}
		v := Verdict{ID: blocks[i].ID, Class: c}
		if c == StillReachable {
			v.Heuristic = heurNames[s.via[j]]
		}
		s.res.Verdicts[i] = v
		s.res.Totals[c].Blocks++
		s.res.Totals[c].Bytes += blocks[i].Size
	}
	if s.parent != nil {
		s.res.Referrers = make([]Referrer, len(blocks))
		for j, p := range s.parent {
			r := NoReferrer
			switch {
			case p >= 0:
				r.Block = int(s.ord[p])
			case p != noOrigin:
				r.Root = s.rootNames[-2-p]
			}
			s.res.Referrers[s.ord[j]] = r
		}
	}
}
