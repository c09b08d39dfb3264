package query

// liveTable is a process's live blocks by address: the builder's hottest
// structure, touched by every heap event. It is open-addressed, probed
// linearly, at most half full, with backward-shift deletion (no
// tombstones); address 0 marks an empty slot (no block lives there: a
// NULL result is a failed call). Go's map spent a fifth of the build
// hashing and probing.
type liveTable struct {
	keys  []uint64
	vals  []liveRef
	n     int
	shift uint // 64 - log2(len(keys))
}

const liveMinSlots = 1 << 10

func (t *liveTable) init(slots int) {
	t.keys = make([]uint64, slots)
	t.vals = make([]liveRef, slots)
	t.n = 0
	shift := uint(64)
	for s := slots; s > 1; s >>= 1 {
		shift--
	}
	t.shift = shift
}

// home returns the slot where the probe for addr starts (Fibonacci hashing:
// the high bits of the product spread aligned addresses).
func (t *liveTable) home(addr uint64) int {
	return int((addr * 0x9E3779B97F4A7C15) >> (t.shift & 63))
}

// get returns the block at addr.
func (t *liveTable) get(addr uint64) (liveRef, bool) {
	if t.keys == nil || addr == 0 {
		return liveRef{}, false
	}
	mask := len(t.keys) - 1
	for i := t.home(addr); ; i = (i + 1) & mask {
		switch t.keys[i] {
		case addr:
			return t.vals[i], true
		case 0:
			return liveRef{}, false
		}
	}
}

// put stores v at addr, replacing what was there. Nothing is stored at 0
// (only a corrupt trace has a block there: it stays unknown).
func (t *liveTable) put(addr uint64, v liveRef) {
	if addr == 0 {
		return
	}
	if t.keys == nil {
		t.init(liveMinSlots)
	}
	if 2*(t.n+1) > len(t.keys) {
		t.grow()
	}
	mask := len(t.keys) - 1
	i := t.home(addr)
	for ; t.keys[i] != 0; i = (i + 1) & mask {
		if t.keys[i] == addr {
			t.vals[i] = v
			return
		}
	}
	t.keys[i], t.vals[i] = addr, v
	t.n++
}

func (t *liveTable) grow() {
	keys, vals := t.keys, t.vals
	t.init(2 * len(keys))
	mask := len(t.keys) - 1
	for j, k := range keys {
		if k == 0 {
			continue
		}
		i := t.home(k)
		for t.keys[i] != 0 {
			i = (i + 1) & mask
		}
		t.keys[i], t.vals[i] = k, vals[j]
		t.n++
	}
}

// del removes addr, if there. The entries after it in its run move back
// when their probes started at or before the hole, so that every probe
// still meets its key before an empty slot.
func (t *liveTable) del(addr uint64) {
	if t.keys == nil || addr == 0 {
		return
	}
	mask := len(t.keys) - 1
	i := t.home(addr)
	for t.keys[i] != addr {
		if t.keys[i] == 0 {
			return
		}
		i = (i + 1) & mask
	}
	for j := (i + 1) & mask; t.keys[j] != 0; j = (j + 1) & mask {
		// The entry at j may fill the hole at i when its home is not in
		// (i, j], cyclically.
		if h := t.home(t.keys[j]); (j-h)&mask >= (j-i)&mask {
			t.keys[i], t.vals[i] = t.keys[j], t.vals[j]
			i = j
		}
	}
	t.keys[i] = 0
	t.vals[i] = liveRef{}
	t.n--
}
