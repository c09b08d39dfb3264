package census

import (
	"fmt"
	"io"
	"math/bits"
	"sort"
	"time"

	"github.com/heapscope/heapscope/internal/proc"
)

// Target is what Take reads: a stopped process's address space, its
// mappings and its threads. internal/stopped provides all three; nothing
// here stops or resumes a process.
type Target struct {
	PID  int            // for /proc/PID/smaps and pagemap; 0: no RSS, and every page is looked at for mmapped chunks
	Mem  io.ReaderAt    // the address space: offsets are addresses
	Maps []proc.Mapping // the mappings, as /proc/PID/maps has them while stopped
	// Threads must be every thread: the chunks in the tcache of a thread
	// left out would look in use.
	Threads []Thread
}

// Thread is what the census needs of a thread: its id and its thread
// pointer (fs_base on x86-64), from which glibc's thread-local variables
// are found.
type Thread struct {
	TID    int
	FSBase uint64
	PC     uint64 // where it stopped: a thread stopped in malloc's code may be changing the heap
}

// TakeOptions select what Take reads besides the heap.
type TakeOptions struct {
	// RSS also reads /proc/PID/smaps and which of the heap's pages are
	// resident (/proc/PID/pagemap) while the process is stopped, for
	// (*Census).RSS.
	RSS bool
}

// State is what a chunk is to malloc.
type State uint8

// The states of a chunk.
const (
	InUse     State = iota + 1 // allocated (by the program, or by libc for itself: see Census.Internal)
	Free                       // free, in a bin (unsorted, small or large)
	Tcache                     // free, cached in a thread's tcache
	Fastbin                    // free, in a fastbin
	Top                        // the top chunk of an arena: the free space at the end of its newest heap
	Mmapped                    // allocated, in a mapping of its own
	Fencepost                  // the marker glibc puts at the end of a heap: no block
	Unknown                    // before a corrupted header: whether it is in use cannot be read
)

func (s State) String() string {
	switch s {
	case InUse:
		return "in use"
	case Free:
		return "free"
	case Tcache:
		return "tcache"
	case Fastbin:
		return "fastbin"
	case Top:
		return "top"
	case Mmapped:
		return "mmapped"
	case Fencepost:
		return "fencepost"
	case Unknown:
		return "unknown"
	}
	return fmt.Sprintf("state(%d)", uint8(s))
}

// Allocated reports whether a chunk of this state is a live block: in use,
// in an arena or mmapped.
func (s State) Allocated() bool { return s == InUse || s == Mmapped }

// Chunk is one malloc chunk.
type Chunk struct {
	Addr  uint64 // the chunk's header (the block's address minus 16)
	Size  uint64 // the chunk's size, flags cleared
	First uint64 // the first word of the block as read: a vtable pointer, a free list's link, ...
	Arena int32  // index in Census.Arenas; -1 for a mmapped chunk
	State State
}

// User returns the block's address, what malloc returned.
func (c Chunk) User() uint64 { return c.Addr + 2*sizeSz }

// Usable returns what malloc_usable_size says of the block: the chunk less
// its header (a chunk in an arena also has the next chunk's first word).
func (c Chunk) Usable() uint64 {
	switch {
	case c.State == Mmapped:
		return c.Size - 2*sizeSz
	case c.Size < 2*sizeSz:
		return 0
	}
	return c.Size - sizeSz
}

// Span is a range of addresses, [Start, End).
type Span struct{ Start, End uint64 }

// Arena is one malloc arena.
type Arena struct {
	Addr      uint64 // its malloc_state
	Main      bool   // main_arena, whose heap is the sbrk heap
	Heaps     []Span // where its chunks are: from mp_.sbrk_base to the end of the top chunk for the main arena, each heap (with its _heap_info) for the others
	Top       uint64 // its top chunk
	SystemMem uint64 // system_mem: the bytes it has from the system, as it counts them
}

// Problem is something the census found wrong in the heap: a corrupted
// header, a free list that points outside the heap. The census goes on
// with what it can read; Skipped says how much it could not.
type Problem struct {
	Addr    uint64
	Skipped uint64 // bytes of heap not walked because of it
	What    string
}

func (p Problem) String() string {
	s := fmt.Sprintf("%#x: %s", p.Addr, p.What)
	if p.Skipped > 0 {
		s += fmt.Sprintf(" (%d bytes not walked)", p.Skipped)
	}
	return s
}

// ThreadCache is what the census found of one thread's tcache.
type ThreadCache struct {
	TID    int
	Tcache uint64 // its tcache_perthread_struct (a block in an arena), 0 if it has none
	Chunks int    // chunks cached in it
}

// maxProblems bounds the problems a census keeps: a heap overwritten
// wholesale would otherwise make one per chunk.
const maxProblems = 1000

// Census is the heap of a process at one moment.
type Census struct {
	PID    int
	Libc   string // "glibc 2.36"
	Time   time.Time
	Took   time.Duration // what Read took: the process was stopped through it
	Finish time.Duration // what Finish took, the process running or not
	Paused time.Duration // how long TakeProcess kept the process stopped, stopping and resuming included
	Stops  int           // how many times TakeProcess stopped it to find malloc idle
	Stop   int           // which of those stops (from 1) it was read at
	Reads  uint64        // reads of the process's memory
	Bytes  uint64        // bytes read

	Arenas  []Arena
	Chunks  []Chunk // every chunk of every arena and every mmapped chunk, in address order
	Threads []ThreadCache
	// Internal names the blocks libc allocated for itself, by chunk
	// address: each thread's tcache, the thread vectors (DTV) of threads
	// it created.
	Internal map[uint64]string
	Problems []Problem
	// Omitted counts the problems past maxProblems, not kept.
	Omitted int
	// Busy says why malloc may have been changing the heap when the
	// process stopped: threads stopped in malloc's code, arenas locked.
	// A census taken then may show a chunk mid-change (and say so in
	// Problems); TakeProcess stops the process again until it is not busy.
	Busy []string
	// BusyThreads are the threads Busy names: stopped in malloc's code,
	// or returning from a traced call.
	BusyThreads []int

	// What mp_ says of the mmapped chunks, which the census finds by their
	// headers in anonymous mappings.
	NMmaps     uint64
	MmappedMem uint64

	mmapLead map[uint64]uint64 // a mmapped chunk's offset in its mapping (prev_size), by chunk
	texts    []textRef         // the blocks that start with printable text, by chunk index
	textBuf  []byte            // their texts
	res      *residency        // TakeOptions.RSS

	index       *chunkIndex
	heapMax     uint64 // HEAP_MAX_SIZE, as the process has it
	chunkStruct uint64 // sizeof(struct malloc_chunk)
}

func (c *Census) problem(addr, skipped uint64, format string, args ...any) {
	if len(c.Problems) >= maxProblems {
		c.Omitted++
		return
	}
	c.Problems = append(c.Problems, Problem{addr, skipped, fmt.Sprintf(format, args...)})
}

// Find returns the index of the chunk that starts at addr.
func (c *Census) Find(addr uint64) (int, bool) {
	if c.index == nil {
		c.index = newChunkIndex(c.Chunks)
	}
	i, exact := c.index.search(c.Chunks, addr)
	return i, exact
}

// chunkIndex finds chunks by address with two memory accesses, where a
// binary search over millions of chunks would make twenty: for each
// stretch of adjacent chunks and each 4 KiB page of it, the index of the
// first chunk at or after the page's start and a bit for each 16 bytes of
// the page where a chunk starts.
type chunkIndex struct {
	runs []indexRun // sorted by start
}

type indexRun struct {
	start, end uint64 // addresses
	first      int    // index of its first chunk
	base       uint64 // the first page's number (address >> 12)
	pages      []indexPage
}

type indexPage struct {
	first  int32     // the first chunk at or after the page's start, less the run's first
	starts [4]uint64 // bit j: a chunk starts at 16*j into the page
}

func newChunkIndex(cs []Chunk) *chunkIndex {
	x := &chunkIndex{}
	for i := 0; i < len(cs); {
		j := i + 1
		for j < len(cs) && cs[j].Addr == cs[j-1].Addr+cs[j-1].Size {
			j++
		}
		r := indexRun{start: cs[i].Addr, end: cs[j-1].Addr + cs[j-1].Size, first: i}
		if j-i > 8 && cs[i].Addr%align == 0 && j-i < 1<<31 {
			r.base = r.start >> 12
			r.pages = make([]indexPage, (r.end-1)>>12-r.base+1)
			next := 0 // the page whose first chunk is not set yet
			for k := i; k < j; k++ {
				a := cs[k].Addr
				p := int(a>>12 - r.base)
				for ; next <= p; next++ {
					r.pages[next].first = int32(k - i)
				}
				bit := a & 4095 / align
				r.pages[p].starts[bit/64] |= 1 << (bit % 64)
			}
			for ; next < len(r.pages); next++ {
				r.pages[next].first = int32(j - i)
			}
		}
		x.runs = append(x.runs, r)
		i = j
	}
	return x
}

// search returns the index of the first chunk at or after addr, and
// whether it starts at addr. The bits answer that without reading the
// chunk, which a list walk would otherwise read from all over the heap.
func (x *chunkIndex) search(cs []Chunk, addr uint64) (int, bool) {
	ri := sort.Search(len(x.runs), func(i int) bool { return x.runs[i].end > addr })
	if ri == len(x.runs) {
		return len(cs), false
	}
	r := x.runs[ri]
	if addr <= r.start {
		return r.first, addr == r.start
	}
	if r.pages == nil {
		i := r.first
		for i < len(cs) && cs[i].Addr < addr {
			i++
		}
		return i, i < len(cs) && cs[i].Addr == addr
	}
	pg := &r.pages[addr>>12-r.base]
	bit := (addr&4095 + align - 1) / align // the first 16-byte slot at or after addr
	n := 0
	for w := uint64(0); w < 4 && w*64 < bit; w++ {
		m := pg.starts[w]
		if (w+1)*64 > bit {
			m &= 1<<(bit%64) - 1
		}
		n += bits.OnesCount64(m)
	}
	exact := addr%align == 0 && bit < 256 && pg.starts[bit/64]&(1<<(bit%64)) != 0
	return r.first + int(pg.first) + n, exact
}

// Containing returns the index of the chunk whose memory holds addr.
func (c *Census) Containing(addr uint64) (int, bool) {
	i := sort.Search(len(c.Chunks), func(i int) bool { return c.Chunks[i].Addr > addr }) - 1
	if i < 0 {
		return 0, false
	}
	ch := c.Chunks[i]
	return i, addr < ch.Addr+ch.Size
}

// MmapSpan returns the mapping a mmapped chunk lies in: glibc keeps the
// chunk's offset in it (non-zero for an aligned block) in prev_size.
func (c *Census) MmapSpan(i int) Span {
	ch := c.Chunks[i]
	lead := c.mmapLead[ch.Addr]
	return Span{ch.Addr - lead, ch.Addr + ch.Size}
}

// textRef is the text chunk (an index) starts with: textBuf[off:off+n].
type textRef struct {
	chunk  int
	off, n uint32
}

// Text returns the printable text block i starts with, if it does.
func (c *Census) Text(i int) (string, bool) {
	j := sort.Search(len(c.texts), func(j int) bool { return c.texts[j].chunk >= i })
	if j == len(c.texts) || c.texts[j].chunk != i {
		return "", false
	}
	t := c.texts[j]
	return string(c.textBuf[t.off : t.off+t.n]), true
}

// Block is a live block: what the program sees.
type Block struct {
	Addr uint64 // what malloc returned
	Size uint64 // malloc_usable_size
}

// Live returns the allocated blocks (in use or mmapped), in address order,
// libc's own among them (see Internal): the blocks live at the census, which
// their frees will name.
func (c *Census) Live() []Block {
	var bs []Block
	for _, ch := range c.Chunks {
		if ch.State.Allocated() {
			bs = append(bs, Block{ch.User(), ch.Usable()})
		}
	}
	return bs
}

// Totals are a census's counts and bytes by state: Bytes are chunk sizes,
// Usable what the program can use of the allocated ones.
type Totals struct {
	Chunks [Unknown + 1]uint64
	Bytes  [Unknown + 1]uint64
	Usable uint64 // of allocated chunks
	// Overhead is what the arenas hold besides chunks: their _heap_info
	// and malloc_state headers, alignment.
	Overhead uint64
}

// Totals adds the chunks up.
func (c *Census) Totals() Totals {
	var t Totals
	for _, ch := range c.Chunks {
		t.Chunks[ch.State]++
		t.Bytes[ch.State] += ch.Size
		if ch.State.Allocated() {
			t.Usable += ch.Usable()
		}
	}
	var heaps uint64
	for _, a := range c.Arenas {
		for _, h := range a.Heaps {
			heaps += h.End - h.Start
		}
	}
	var inArenas uint64
	for s := InUse; s <= Unknown; s++ {
		if s != Mmapped {
			inArenas += t.Bytes[s]
		}
	}
	if heaps > inArenas {
		t.Overhead = heaps - inArenas
	}
	return t
}

// Mallinfo is what mallinfo2() would answer, computed from the census's
// chunks the way glibc computes it from its arenas: a check of the census
// against the process's own count (glibc counts tcache chunks as in use).
type Mallinfo struct {
	Arena, Ordblks, Smblks, Hblks, Hblkhd, Usmblks, Fsmblks, Uordblks, Fordblks, Keepcost uint64
}

// Mallinfo computes mallinfo2()'s fields from the chunks; Hblks and Hblkhd
// are the mmapped chunks found.
func (c *Census) Mallinfo() Mallinfo {
	var m Mallinfo
	for _, a := range c.Arenas {
		for _, h := range a.Heaps {
			m.Arena += h.End - h.Start
		}
	}
	var avail uint64
	for _, ch := range c.Chunks {
		switch ch.State {
		case Top:
			m.Ordblks++
			avail += ch.Size
			if ch.Arena >= 0 && c.Arenas[ch.Arena].Main {
				m.Keepcost = ch.Size
			}
		case Free:
			m.Ordblks++
			avail += ch.Size
		case Fastbin:
			m.Smblks++
			m.Fsmblks += ch.Size
		case Mmapped:
			m.Hblks++
			m.Hblkhd += ch.Size + c.mmapLead[ch.Addr]
		}
	}
	m.Fordblks = avail + m.Fsmblks
	m.Uordblks = m.Arena - m.Fordblks
	return m
}
