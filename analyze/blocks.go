package analyze

// block is a live allocation.
type block struct {
	size uint64
	site int32  // index of the allocating stack's site
	tid  uint32 // the allocating thread, for temporaries
}

// blockTable is the live set, keyed by process and address: the model's
// hottest structure, touched by every event. The common key packs a dense
// process index above a 48-bit user-space address into one word, in an
// open-addressing table with linear probing (one cache line per lookup, no
// tombstones: deletion shifts the run back). The rare rest (more than 65535
// processes, or addresses above 2^48) goes to a map with a wide key.
type blockTable struct {
	slots []slot // len is a power of two; key 0 marks an empty slot
	n     int
	shift uint // 64 - log2(len(slots))
	wide  map[wideKey]block
}

type slot struct {
	key uint64
	block
}

type wideKey struct {
	pid  uint32
	addr uint64
}

const (
	addrBits  = 48
	maxProcs  = 1<<(64-addrBits) - 1
	minSlots  = 1 << 10
	loadNum   = 3 // grow when n > len(slots) * loadNum / loadDen
	loadDen   = 4
	hashMulti = 0x9E3779B97F4A7C15
)

func newBlockTable() blockTable {
	return blockTable{slots: make([]slot, minSlots), shift: 64 - 10}
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

// put stores b at addr and returns the block it replaced, if any.
func (t *blockTable) put(p *proc, addr uint64, b block) (block, bool) {
	if !packable(p, addr) {
		if t.wide == nil {
			t.wide = map[wideKey]block{}
		}
		k := wideKey{p.pid, addr}
		old, ok := t.wide[k]
		t.wide[k] = b
		return old, ok
	}
	k := p.key | addr
	mask := uint64(len(t.slots) - 1)
	for i := t.home(k); ; i = (i + 1) & mask {
		s := &t.slots[i]
		if s.key == k {
			old := s.block
			s.block = b
			return old, true
		}
		if s.key == 0 {
			s.key, s.block = k, b
			t.n++
			if t.n*loadDen > len(t.slots)*loadNum {
				t.grow()
			}
			return block{}, false
		}
	}
}

// take removes and returns the block at addr.
func (t *blockTable) take(p *proc, addr uint64) (block, bool) {
	if !packable(p, addr) {
		k := wideKey{p.pid, addr}
		b, ok := t.wide[k]
		if ok {
			delete(t.wide, k)
		}
		return b, ok
	}
	k := p.key | addr
	mask := uint64(len(t.slots) - 1)
	i := t.home(k)
	for {
		s := &t.slots[i]
		if s.key == k {
			break
		}
		if s.key == 0 {
			return block{}, false
		}
		i = (i + 1) & mask
	}
	b := t.slots[i].block
	t.n--
	// Shift back the entries of the run after i that may not stay after
	// the hole, so lookups never stop early at it.
	hole := i
	for j := (i + 1) & mask; ; j = (j + 1) & mask {
		s := &t.slots[j]
		if s.key == 0 {
			break
		}
		h := t.home(s.key)
		// Move s into the hole unless its home lies cyclically in (hole, j].
		if (j > hole && (h <= hole || h > j)) || (j < hole && h <= hole && h > j) {
			t.slots[hole] = *s
			hole = j
		}
	}
	t.slots[hole] = slot{}
	return b, true
}

func (t *blockTable) grow() {
	old := t.slots
	t.slots = make([]slot, 2*len(old))
	t.shift--
	mask := uint64(len(t.slots) - 1)
	for _, s := range old {
		if s.key == 0 {
			continue
		}
		i := t.home(s.key)
		for t.slots[i].key != 0 {
			i = (i + 1) & mask
		}
		t.slots[i] = s
	}
}

// len returns the number of live blocks.
func (t *blockTable) len() int { return t.n + len(t.wide) }
