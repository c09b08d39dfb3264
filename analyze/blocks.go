package analyze

import (
	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/internal/blocks"
)

// block is a live allocation.
type block struct {
	size uint64
	site int32 // index of the allocating stack's site
	// tid is the allocating thread, for temporaries, in its low
	// classShift bits (Linux's thread IDs stay below 2^22), and above
	// them the block's reachability class plus one (0: none), which a
	// heap scan gave it (see Model.verdict). In a sampled trace it is the
	// number of blocks the sample stands for.
	tid uint32
}

const (
	classShift = 29
	tidMask    = 1<<classShift - 1
)

// thread is the allocating thread.
func (b block) thread() uint32 { return b.tid & tidMask }

// class returns the block's class, and whether it has one.
func (b block) class() (event.Class, bool) {
	c := b.tid >> classShift
	return event.Class(c - 1), c != 0
}

// withClass returns b classified as c.
func (b block) withClass(c event.Class) block {
	b.tid = b.tid&tidMask | (uint32(c)+1)<<classShift
	return b
}

// blockTable is the live set, keyed by process and address: the model's
// hottest structure, touched by every event. The common key packs a dense
// process index above a 48-bit user-space address into one word of a
// blocks.Table. The rare rest (more than 65535 processes, or addresses
// above 2^48) goes to a map with a wide key.
type blockTable struct {
	packed blocks.Table[block]
	wide   map[wideKey]block
}

type wideKey struct {
	pid, gen uint32 // gen: the process's exits before its block (see Model.Exit)
	addr     uint64
}

const (
	addrBits = 48
	maxProcs = 1<<(64-addrBits) - 1
)

// procKey returns the key bits of the idx'th process (idx from 1), or 0 when
// its keys cannot be packed. A packed key is never 0.
func (blockTable) procKey(idx int) uint64 {
	if idx > maxProcs {
		return 0
	}
	return uint64(idx) << addrBits
}

func packable(p *proc, addr uint64) bool { return p.key != 0 && addr>>addrBits == 0 }

// put stores v at addr and returns the block it replaced, if any.
func (t *blockTable) put(p *proc, addr uint64, v block) (block, bool) {
	if packable(p, addr) {
		return t.packed.Put(p.key|addr, v)
	}
	return t.putWide(p, addr, v)
}

// putWide and takeWide are the rare paths, kept out of put and take so
// that those inline.
//
//go:noinline
func (t *blockTable) putWide(p *proc, addr uint64, v block) (block, bool) {
	if t.wide == nil {
		t.wide = map[wideKey]block{}
	}
	k := wideKey{p.pid, p.gen, addr}
	old, ok := t.wide[k]
	t.wide[k] = v
	return old, ok
}

// take removes and returns the block at addr.
func (t *blockTable) take(p *proc, addr uint64) (block, bool) {
	if packable(p, addr) {
		return t.packed.Delete(p.key | addr)
	}
	return t.takeWide(p, addr)
}

//go:noinline
func (t *blockTable) takeWide(p *proc, addr uint64) (block, bool) {
	k := wideKey{p.pid, p.gen, addr}
	v, ok := t.wide[k]
	if ok {
		delete(t.wide, k)
	}
	return v, ok
}

// len returns the number of live blocks.
func (t *blockTable) len() int { return t.packed.Len() + len(t.wide) }
