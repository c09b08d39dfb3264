// Package blocks is the address → block table: the live set of a heap,
// keyed by a block's address (or any 64-bit key a caller packs), with a
// value of the caller's type. The heap model, top's totals, the window
// index, and whatever else keeps live blocks use this one table.
//
// It is the hottest structure of each: every allocation puts, every free
// deletes. The table is open-addressed in buckets of four keys, probed
// linearly. Each slot has a tag byte, 0 when empty, else the high bit and
// seven bits of the key's hash, so that a lookup compares the four tags of
// a bucket at once, without branching, and reads a key only when its tag
// matches (as Abseil's SwissTable does). Each bucket counts the keys that
// probed past it to later buckets (as Facebook's F14 does): a lookup stops
// at the first bucket with nothing past it, almost always the key's home
// bucket, and a deletion needs neither tombstones nor shifting: the counts
// on the way to the key's bucket go down. It holds at most three keys in
// four slots before it doubles. (Linear probing slot by slot, with deletion
// by backward shift, was slower for the model, for top's totals and for the
// window index: it mispredicts the lengths of its probes and of its
// shifts; see BenchmarkModel, BenchmarkAggregate and query's
// BenchmarkBuild.)
package blocks

import (
	"iter"
	"math/bits"
)

// Table maps 64-bit keys to values of type V. Every key is valid, 0
// included. The zero Table is empty and ready to use. A Table is not safe
// for concurrent use.
type Table[V any] struct {
	tags  []uint32 // four tag bytes per bucket, slot i in byte i
	keys  [][bucketSize]uint64
	vals  [][bucketSize]V
	over  []uint8 // per bucket: keys that probed past it; maxOver sticks
	shift uint    // 64 - log2(buckets)
	n     int
	limit int // n beyond which the table grows
}

const (
	minBuckets = 1 << 8
	hashMulti  = 0x9E3779B97F4A7C15 // Fibonacci hashing: the high bits of the product spread aligned addresses
	bucketSize = 4
	maxOver    = 255
	loadNum    = 3 // grow when more than loadNum/loadDen of the slots are taken
	loadDen    = 4

	lsbs32 = 0x01010101
	msbs32 = 0x80808080
)

func (t *Table[V]) init(buckets int) {
	t.tags = make([]uint32, buckets)
	t.keys = make([][bucketSize]uint64, buckets)
	t.vals = make([][bucketSize]V, buckets)
	t.over = make([]uint8, buckets)
	t.shift = uint(64 - bits.TrailingZeros(uint(buckets)))
	t.n = 0
	t.limit = buckets * bucketSize * loadNum / loadDen
}

// Len returns the number of keys in the table.
func (t *Table[V]) Len() int { return t.n }

// hash returns k's home bucket and its tag.
func (t *Table[V]) hash(k uint64) (uint64, uint32) {
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

// Get returns the value at k.
func (t *Table[V]) Get(k uint64) (V, bool) {
	if t.n == 0 {
		var zero V
		return zero, false
	}
	mask := uint64(len(t.keys) - 1)
	b, tag := t.hash(k)
	for {
		for m := matchTag(t.tags[b], tag); m != 0; m &= m - 1 {
			if i := slot(m); t.keys[b][i] == k {
				return t.vals[b][i], true
			}
		}
		if t.over[b] == 0 {
			var zero V
			return zero, false
		}
		b = (b + 1) & mask
	}
}

// Put stores v at k and returns the value it replaced, if any.
func (t *Table[V]) Put(k uint64, v V) (old V, replaced bool) {
	if t.n >= t.limit {
		t.grow()
	}
	mask := uint64(len(t.keys) - 1)
	home, tag := t.hash(k)
	// One probe looks for k and for the first empty slot on the way.
	eb, ei := uint64(0), -1
	b := home
	for {
		tw := t.tags[b]
		for m := matchTag(tw, tag); m != 0; m &= m - 1 {
			if i := slot(m); t.keys[b][i] == k {
				old = t.vals[b][i]
				t.vals[b][i] = v
				return old, true
			}
		}
		if ei < 0 {
			if em := emptyTags(tw); em != 0 {
				eb, ei = b, slot(em)
			}
		}
		if t.over[b] == 0 {
			break
		}
		b = (b + 1) & mask
	}
	for ei < 0 {
		b = (b + 1) & mask
		if em := emptyTags(t.tags[b]); em != 0 {
			eb, ei = b, slot(em)
		}
	}
	// The buckets before eb now have one more key past them.
	for h := home; h != eb; h = (h + 1) & mask {
		if t.over[h] < maxOver {
			t.over[h]++
		}
	}
	t.set(eb, ei, tag, k, v)
	return old, false
}

// set fills the empty slot i of bucket b.
func (t *Table[V]) set(b uint64, i int, tag uint32, k uint64, v V) {
	t.tags[b] |= tag << (8 * i)
	t.keys[b][i], t.vals[b][i] = k, v
	t.n++
}

// Delete removes k and returns its value.
func (t *Table[V]) Delete(k uint64) (V, bool) {
	var zero V
	if t.n == 0 {
		return zero, false
	}
	mask := uint64(len(t.keys) - 1)
	home, tag := t.hash(k)
	b, i := home, -1
	for {
		for m := matchTag(t.tags[b], tag); m != 0; m &= m - 1 {
			if j := slot(m); t.keys[b][j] == k {
				i = j
				break
			}
		}
		if i >= 0 {
			break
		}
		if t.over[b] == 0 {
			return zero, false
		}
		b = (b + 1) & mask
	}
	v := t.vals[b][i]
	t.tags[b] &^= 0xff << (8 * i)
	t.keys[b][i], t.vals[b][i] = 0, zero
	t.n--
	// The buckets before b that k probed past count it no more.
	for h := home; h != b; h = (h + 1) & mask {
		if t.over[h] < maxOver {
			t.over[h]--
		}
	}
	return v, true
}

// grow doubles the table (or makes its first buckets).
func (t *Table[V]) grow() {
	tags, keys, vals := t.tags, t.keys, t.vals
	t.init(max(2*len(keys), minBuckets))
	mask := uint64(len(t.keys) - 1)
	for b := range keys {
		for m := ^emptyTags(tags[b]) & msbs32; m != 0; m &= m - 1 {
			i := slot(m)
			k := keys[b][i]
			// Each key is new to the table: the first empty slot from its
			// home bucket is its place.
			h, tag := t.hash(k)
			nb := h
			for ; emptyTags(t.tags[nb]) == 0; nb = (nb + 1) & mask {
				if t.over[nb] < maxOver {
					t.over[nb]++
				}
			}
			t.set(nb, slot(emptyTags(t.tags[nb])), tag, k, vals[b][i])
		}
	}
}

// All returns the keys and values, in no particular order. The table must
// not change while it is iterated.
func (t *Table[V]) All() iter.Seq2[uint64, V] {
	return func(yield func(uint64, V) bool) {
		for b, tw := range t.tags {
			for m := ^emptyTags(tw) & msbs32; m != 0; m &= m - 1 {
				i := slot(m)
				if !yield(t.keys[b][i], t.vals[b][i]) {
					return
				}
			}
		}
	}
}
