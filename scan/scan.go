package scan

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
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
	Verdicts []Verdict         // one per block, in the order given
	Totals   [NumClasses]Total // by class
	Unread   []Unread
	Scanned  uint64 // bytes of roots and blocks read and scanned
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

type scanner struct {
	opt     Options
	heur    bool
	starts  []uint64 // sorted
	ends    []uint64
	ord     []int32 // sorted position → index in the caller's slice
	lo, hi  uint64  // every reference is in [lo, hi)
	state   []uint8
	via     []uint8 // heuristic that made a block reachable
	pending []bool
	stack   []int32
	data    []byte  // the blocks' contents
	off     []int64 // offset of each block's contents in data, -1 when unread
	res     *Result

	incomplete bool // a root or a reached block could not be read
}

// Scan classifies blocks by what references them from roots, reading the
// roots and the blocks' contents through mem. Memory that cannot be read
// is not an error: it is listed in Result.Unread, and the classes it could
// change are Unclassified. The error is for bad input: overlapping blocks.
func Scan(blocks []Block, mem io.ReaderAt, roots Roots, opt Options) (*Result, error) {
	s := &scanner{opt: opt, heur: opt.Rules == Memcheck && !opt.NoHeuristics, res: &Result{Rules: opt.Rules}}
	if err := s.index(blocks); err != nil {
		return nil, err
	}
	s.read(mem, blocks)

	for _, w := range roots.Words {
		s.ref(w.Value, modeRoot, -1)
	}
	for _, r := range roots.Ranges {
		s.scanRoot(mem, r)
	}
	s.drain(modeMark)

	n := len(s.starts)
	if opt.Rules == LeakSanitizer {
		for j := 0; j < n; j++ {
			if s.state[j] != reachable {
				s.scanBlock(j, modeLSanIndirect)
			}
		}
	} else {
		for j := 0; j < n; j++ {
			if s.state[j] == unreached {
				s.push(j)
				s.drain(int32(j))
			}
		}
	}
	s.verdicts(blocks)
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
	s.starts = make([]uint64, n)
	s.ends = make([]uint64, n)
	s.lo = ^uint64(0)
	for j, i := range ord {
		b := blocks[i]
		end := b.Addr + b.Size
		if end < b.Addr {
			return fmt.Errorf("block %#x of %d bytes wraps around the address space: %w", b.Addr, b.Size, ErrOverlap)
		}
		if j > 0 && (b.Addr < s.ends[j-1] || b.Addr == s.starts[j-1]) {
			p := blocks[ord[j-1]]
			return fmt.Errorf("block %#x (%d bytes) and block %#x (%d bytes): %w", p.Addr, p.Size, b.Addr, b.Size, ErrOverlap)
		}
		s.starts[j], s.ends[j] = b.Addr, end
		s.lo = min(s.lo, b.Addr)
		if b.Size == 0 {
			end++ // a zero-sized block is referenced at its start
		}
		s.hi = max(s.hi, end)
	}
	if n == 0 {
		s.lo, s.hi = 1, 0
	}
	s.state = make([]uint8, n)
	s.via = make([]uint8, n)
	s.pending = make([]bool, n)
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
	for j := 0; j < len(s.starts); {
		sp := span{addr: s.starts[j], first: j, off: total}
		end := s.ends[j]
		k := j + 1
		for k < len(s.starts) && s.starts[k]-end <= maxGap && s.ends[k]-sp.addr <= maxSpan {
			end = max(end, s.ends[k])
			k++
		}
		sp.size, sp.end = end-sp.addr, k
		spans = append(spans, sp)
		total += int64(sp.size)
		j = k
	}
	s.data = make([]byte, total)
	for _, sp := range spans {
		buf := s.data[sp.off : sp.off+int64(sp.size)]
		n, err := mem.ReadAt(buf, int64(sp.addr))
		for j := sp.first; j < sp.end; j++ {
			s.off[j] = sp.off + int64(s.starts[j]-sp.addr)
			if err == nil || s.ends[j]-sp.addr <= uint64(n) {
				continue
			}
			// This block was past the failure: read it alone.
			b := s.data[s.off[j] : s.off[j]+int64(s.ends[j]-s.starts[j])]
			if _, berr := mem.ReadAt(b, int64(s.starts[j])); berr != nil {
				s.off[j] = -1
				i := int(s.ord[j])
				s.res.Unread = append(s.res.Unread, Unread{Block: i, Addr: blocks[i].Addr, Size: blocks[i].Size, Err: berr})
			}
		}
	}
}

// contents returns block j's bytes, or nil when they could not be read.
func (s *scanner) contents(j int) []byte {
	if s.off[j] < 0 {
		return nil
	}
	return s.data[s.off[j] : s.off[j]+int64(s.ends[j]-s.starts[j])]
}

// find returns the sorted position of the block that w points into, or -1.
func (s *scanner) find(w uint64) int {
	lo, hi := 0, len(s.starts)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if s.starts[m] <= w {
			lo = m + 1
		} else {
			hi = m
		}
	}
	j := lo - 1
	if j < 0 {
		return -1
	}
	if w < s.ends[j] || w == s.starts[j] {
		return j
	}
	return -1
}

// Scan modes: a clique leader's sorted position (Memcheck's clique phase),
// or one of these.
const (
	modeRoot         int32 = -1 // a root: Memcheck's "definite" prior
	modeMark         int32 = -2 // a reached block: definite unless it is possible
	modeLSanIndirect int32 = -3
)

func (s *scanner) push(j int) {
	if !s.pending[j] {
		s.pending[j] = true
		s.stack = append(s.stack, int32(j))
	}
}

// drain scans the blocks pushed until none is left.
func (s *scanner) drain(mode int32) {
	for len(s.stack) > 0 {
		j := int(s.stack[len(s.stack)-1])
		s.stack = s.stack[:len(s.stack)-1]
		s.pending[j] = false
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
	s.words(b, s.starts[j], mode, j)
}

// words looks up every aligned word of b, which is memory at addr.
func (s *scanner) words(b []byte, addr uint64, mode int32, from int) {
	if skip := (8 - addr%8) % 8; skip != 0 {
		if uint64(len(b)) <= skip {
			return
		}
		b = b[skip:]
	}
	lo, span := s.lo, s.hi-s.lo
	for len(b) >= 8 {
		w := binary.LittleEndian.Uint64(b)
		b = b[8:]
		if w-lo < span {
			s.refFrom(w, mode, from)
		}
	}
}

func (s *scanner) ref(w uint64, mode int32, from int) {
	if w-s.lo < s.hi-s.lo {
		s.refFrom(w, mode, from)
	}
}

// refFrom records a reference w from block from (or a root, -1).
func (s *scanner) refFrom(w uint64, mode int32, from int) {
	j := s.find(w)
	if j < 0 {
		return
	}
	switch {
	case mode >= 0: // Memcheck's clique of leader mode
		if s.state[j] == unreached && j != int(mode) {
			s.state[j] = indirect
			s.push(j)
		}
	case mode == modeLSanIndirect:
		if j != from && s.state[j] != reachable {
			s.state[j] = indirect
		}
	case s.opt.Rules == LeakSanitizer:
		if s.state[j] == unreached {
			s.state[j] = reachable
			s.push(j)
		}
	default: // Memcheck's marking
		definite := mode == modeRoot || s.state[from] != possible
		st := s.state[j]
		if st == reachable {
			if w == s.starts[j] {
				s.via[j] = heurNone
			}
			return
		}
		start, h := w == s.starts[j], heurNone
		if !start && s.heur {
			h = s.heuristic(j, w)
			start = h != heurNone
		}
		switch {
		case start && definite:
			s.state[j], s.via[j] = reachable, h
			s.push(j)
		case st == unreached:
			s.state[j] = possible
			s.push(j)
		}
	}
}

// heuristic returns the Memcheck heuristic by which w, a pointer into block
// j's interior, counts as a start pointer.
func (s *scanner) heuristic(j int, w uint64) uint8 {
	b := s.contents(j)
	size := s.ends[j] - s.starts[j]
	word := func(k int) uint64 { return binary.LittleEndian.Uint64(b[8*k:]) }
	off := w - s.starts[j]
	switch {
	case b == nil || len(b) < 16:
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

// scanRoot scans a root range, skipping the parts that are live blocks and
// the pages that cannot be read.
func (s *scanner) scanRoot(mem io.ReaderAt, r Range) {
	end := r.Addr + r.Size
	if end < r.Addr {
		end = ^uint64(0)
	}
	buf := make([]byte, min(uint64(rootChunk), r.Size))
	var bad *Unread
	for at := r.Addr; at < end; {
		want := min(uint64(len(buf)), end-at)
		n, err := mem.ReadAt(buf[:want], int64(at))
		if n > 0 {
			s.scanOutsideBlocks(buf[:n], at)
			s.res.Scanned += uint64(n)
			bad = nil
		}
		at += uint64(n)
		if err == nil || uint64(n) == want {
			continue
		}
		// Skip the page that failed and go on after it.
		next := min((at|4095)+1, end)
		if bad == nil {
			s.res.Unread = append(s.res.Unread, Unread{Root: r.Name, Block: -1, Addr: at, Err: err})
			bad = &s.res.Unread[len(s.res.Unread)-1]
		}
		bad.Size += next - at
		s.incomplete = true
		at = next
	}
}

// scanOutsideBlocks scans the words of b (memory at addr) that are not in
// a live block.
func (s *scanner) scanOutsideBlocks(b []byte, addr uint64) {
	end := addr + uint64(len(b))
	// the first block that ends after addr
	lo, hi := 0, len(s.ends)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if s.ends[m] <= addr {
			lo = m + 1
		} else {
			hi = m
		}
	}
	at := addr
	for j := lo; j < len(s.starts) && s.starts[j] < end; j++ {
		if s.starts[j] > at {
			s.words(b[at-addr:s.starts[j]-addr], at, modeRoot, -1)
		}
		at = max(at, min(s.ends[j], end))
	}
	if at < end {
		s.words(b[at-addr:], at, modeRoot, -1)
	}
}

// verdicts turns the states into classes, Unclassified where memory that
// was not read could change them.
func (s *scanner) verdicts(blocks []Block) {
	lostUnread := false
	for j := range s.starts {
		if s.off[j] < 0 && (s.state[j] == unreached || s.state[j] == indirect) {
			lostUnread = true
		}
		if s.off[j] < 0 && (s.state[j] == reachable || s.state[j] == possible) {
			s.incomplete = true
		}
	}
	s.res.Verdicts = make([]Verdict, len(blocks))
	for j := range s.starts {
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
}
