package analyze

import "math/bits"

// block is a live allocation.
type block struct {
	size uint64
	site int32  // index of the allocating stack's site
	tid  uint32 // the allocating thread, for temporaries
}

// blockTable is the live set, keyed by process and address: the model's
// hottest structure, touched by every event. The common key packs a dense
// process index above a 48-bit user-space address into one word. The rare
// rest (more than 65535 processes, or addresses above 2^48) goes to a map
// with a wide key.
//
// The table is open-addressed in buckets of four keys, probed linearly.
// Each slot has a tag byte, 0 when empty, else the high bit and seven bits
// of the key's hash, so that a lookup compares the four tags of a bucket at
// once, without branching, and reads a key only when its tag matches (as
// in Abseil's SwissTable). Each bucket counts the keys that probed past it
// to other buckets (as in Facebook's F14): a lookup stops at the first
// bucket that has nothing past it, almost always its home bucket, and
// deleting needs no tombstones and no shifting: the counts on the way to
// the key's bucket go down. (Linear probing slot by slot spent more time
// mispredicting the lengths of its probes and of its deletions' backward
// shifts than reading memory.)
type blockTable struct {
	tags  []uint32 // four tag bytes per bucket, slot i in byte i
	keys  [][4]uint64
	vals  [][4]block
	over  []uint8 // per bucket: keys that probed past it; maxOver sticks
	shift uint    // 64 - log2(buckets)
	n     int
	limit int // n beyond which the table grows
	wide  map[wideKey]block
}

type wideKey struct {
	pid  uint32
	addr uint64
}

const (
	addrBits   = 48
	maxProcs   = 1<<(64-addrBits) - 1
	minBuckets = 1 << 8
	hashMulti  = 0x9E3779B97F4A7C15
	bucketSize = 4
	maxOver    = 255
	loadNum    = 3 // grow when more than loadNum/loadDen of the slots are taken
	loadDen    = 4

	lsbs32 = 0x01010101
	msbs32 = 0x80808080
)

func newBlockTable() blockTable {
	var t blockTable
	t.init(minBuckets)
	return t
}

func (t *blockTable) init(buckets int) {
	t.tags = make([]uint32, buckets)
	t.keys = make([][4]uint64, buckets)
	t.vals = make([][4]block, buckets)
	t.over = make([]uint8, buckets)
	t.shift = uint(64 - bits.TrailingZeros(uint(buckets)))
	t.n = 0
	t.limit = buckets * bucketSize * loadNum / loadDen
}

// procKey returns the key bits of the idx'th process (idx from 1), or 0 when
// its keys cannot be packed. A packed key is never 0.
func (blockTable) procKey(idx int) uint64 {
	if idx > maxProcs {
		return 0
	}
	return uint64(idx) << addrBits
}

func packable(p *proc, addr uint64) bool { return p.key != 0 && addr>>addrBits == 0 }

// hash returns k's home bucket and its tag.
func (t *blockTable) hash(k uint64) (uint64, uint32) {
	// Shift counts masked to 63 spare the guards Go puts on larger ones.
	h := k * hashMulti
	return h >> (t.shift & 63), 0x80 | uint32(h>>((t.shift-7)&63))&0x7f
}

// matchTag returns the high bits of the bytes of tw equal to tag: of the
// slots that may hold the key (and, rarely, of a slot after one: callers
// compare keys).
func matchTag(tw, tag uint32) uint32 {
	x := tw ^ tag*lsbs32
	return (x - lsbs32) &^ x & msbs32
}

// emptyTags returns the high bits of the empty slots' bytes of tw. Tags of
// full slots have their high bit set, so there are no false matches.
func emptyTags(tw uint32) uint32 { return (tw - lsbs32) &^ tw & msbs32 }

// slot returns the slot of a high bit that matchTag or emptyTags set.
func slot(m uint32) int { return bits.TrailingZeros32(m) >> 3 }

// find returns the bucket and slot of k; ok false when k is not there.
func (t *blockTable) find(k uint64) (b uint64, i int, ok bool) {
	mask := uint64(len(t.keys) - 1)
	b, tag := t.hash(k)
	for {
		for m := matchTag(t.tags[b], tag); m != 0; m &= m - 1 {
			if i := slot(m); t.keys[b][i] == k {
				return b, i, true
			}
		}
		if t.over[b] == 0 {
			return 0, 0, false
		}
		b = (b + 1) & mask
	}
}

// put stores v at addr and returns the block it replaced, if any.
func (t *blockTable) put(p *proc, addr uint64, v block) (block, bool) {
	if !packable(p, addr) {
		if t.wide == nil {
			t.wide = map[wideKey]block{}
		}
		k := wideKey{p.pid, addr}
		old, ok := t.wide[k]
		t.wide[k] = v
		return old, ok
	}
	k := p.key | addr
	if b, i, ok := t.find(k); ok {
		old := t.vals[b][i]
		t.vals[b][i] = v
		return old, true
	}
	t.insert(k, v)
	return block{}, false
}

// full says whether one more key would load the table beyond its bound.
func (t *blockTable) full() bool { return t.n >= t.limit }

// insert adds k, which is not in the table, with v.
func (t *blockTable) insert(k uint64, v block) {
	if t.full() {
		t.grow()
	}
	mask := uint64(len(t.keys) - 1)
	b, tag := t.hash(k)
	for ; ; b = (b + 1) & mask {
		if m := emptyTags(t.tags[b]); m != 0 {
			t.set(b, slot(m), tag, k, v)
			return
		}
		if t.over[b] < maxOver {
			t.over[b]++
		}
	}
}

// set fills the empty slot i of bucket b.
func (t *blockTable) set(b uint64, i int, tag uint32, k uint64, v block) {
	t.tags[b] |= tag << (8 * i)
	t.keys[b][i], t.vals[b][i] = k, v
	t.n++
}

// clear empties slot i of bucket b, whose key k was found by probing from
// its home bucket.
func (t *blockTable) clear(b uint64, i int, k uint64) {
	t.tags[b] &^= 0xff << (8 * i)
	t.keys[b][i] = 0
	t.n--
	// The buckets before b that k probed past count it no more.
	mask := uint64(len(t.keys) - 1)
	for h, _ := t.hash(k); h != b; h = (h + 1) & mask {
		if t.over[h] < maxOver {
			t.over[h]--
		}
	}
}

// take removes and returns the block at addr.
func (t *blockTable) take(p *proc, addr uint64) (block, bool) {
	if !packable(p, addr) {
		k := wideKey{p.pid, addr}
		v, ok := t.wide[k]
		if ok {
			delete(t.wide, k)
		}
		return v, ok
	}
	k := p.key | addr
	b, i, ok := t.find(k)
	if !ok {
		return block{}, false
	}
	v := t.vals[b][i]
	t.clear(b, i, k)
	return v, true
}

// grow doubles the table.
func (t *blockTable) grow() {
	keys, vals := t.keys, t.vals
	t.init(2 * len(keys))
	for b := range keys {
		for i, k := range keys[b] {
			if k != 0 {
				t.insert(k, vals[b][i])
			}
		}
	}
}

// len returns the number of live blocks.
func (t *blockTable) len() int { return t.n + len(t.wide) }
