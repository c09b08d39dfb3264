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
// The table is open-addressed in buckets of four keys, probed linearly, and
// each bucket counts the keys that probed past it to other buckets (as in
// Facebook's F14): a lookup compares the four keys of a bucket without
// branching, and stops at the first bucket that has nothing past it,
// almost always its home bucket. Deleting needs no tombstones and no
// shifting: the counts on the way to the key's bucket go down. (Linear
// probing slot by slot spent more time mispredicting the lengths of its
// probes and of its deletions' backward shifts than reading memory.)
type blockTable struct {
	keys  [][4]uint64 // 0 marks an empty slot
	vals  [][4]block
	over  []uint8 // per bucket: keys that probed past it; 255 sticks
	shift uint    // 64 - log2(buckets)
	n     int
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
)

func newBlockTable() blockTable {
	var t blockTable
	t.init(minBuckets)
	return t
}

func (t *blockTable) init(buckets int) {
	t.keys = make([][4]uint64, buckets)
	t.vals = make([][4]block, buckets)
	t.over = make([]uint8, buckets)
	t.shift = uint(64 - bits.TrailingZeros(uint(buckets)))
	t.n = 0
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

func (t *blockTable) home(k uint64) uint64 { return (k * hashMulti) >> t.shift }

// match returns a mask of the slots of kb that hold k: bit i for slot i.
// It does not branch: which slot holds a key is as good as random.
func match(kb *[4]uint64, k uint64) uint64 {
	return zero(kb[0]^k) | zero(kb[1]^k)<<1 | zero(kb[2]^k)<<2 | zero(kb[3]^k)<<3
}

// zero is 1 when x is 0, else 0, without a branch.
func zero(x uint64) uint64 { return ((x | -x) >> 63) ^ 1 }

// find returns the bucket and slot of k; ok false when k is not there.
func (t *blockTable) find(k uint64) (b uint64, i int, ok bool) {
	mask := uint64(len(t.keys) - 1)
	b = t.home(k)
	for {
		if m := match(&t.keys[b], k); m != 0 {
			return b, bits.TrailingZeros64(m), true
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
	if (t.n+1)*loadDen > len(t.keys)*bucketSize*loadNum {
		t.grow()
	}
	t.insert(k, v)
	return block{}, false
}

// insert adds k, which is not in the table, with v.
func (t *blockTable) insert(k uint64, v block) {
	mask := uint64(len(t.keys) - 1)
	for b := t.home(k); ; b = (b + 1) & mask {
		if m := match(&t.keys[b], 0); m != 0 {
			i := bits.TrailingZeros64(m)
			t.keys[b][i], t.vals[b][i] = k, v
			t.n++
			return
		}
		if t.over[b] < maxOver {
			t.over[b]++
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
	t.keys[b][i] = 0
	t.n--
	// The buckets before b that k probed past count it no more.
	mask := uint64(len(t.keys) - 1)
	for h := t.home(k); h != b; h = (h + 1) & mask {
		if t.over[h] < maxOver {
			t.over[h]--
		}
	}
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
