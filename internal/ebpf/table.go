package ebpf

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"sync/atomic"
	"unsafe"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// table is one of aggregate mode's tables (see bpf/heapscope.h), mapped
// into this process: a key per slot, in buckets of bucketSlots, and a value
// per slot. The BPF programs claim and free slots with atomic operations
// while user space reads; a key is read atomically before and after its
// value, and a value whose key changed meanwhile is not used.
type table struct {
	keys    []byte
	vals    []byte
	valSize int
	n       int // slots
}

// tableSlots is how many slots a table needs to hold n keys: twice as many
// (a table fills up to about three quarters before a key finds both its
// buckets full), a power of two, and at least two buckets.
func tableSlots(n int) int {
	s := 2 * n
	if s < 2*bucketSlots {
		s = 2 * bucketSlots
	}
	return 1 << bits.Len(uint(s-1))
}

// mapTable maps the keys and values of a loaded table.
func mapTable(keys, vals *ebpf.Map) (*table, error) {
	n := int(vals.MaxEntries())
	if int(keys.MaxEntries())*bucketSlots != n || keys.ValueSize() != 8*bucketSlots {
		return nil, fmt.Errorf("ebpf: table of %d buckets and %d values", keys.MaxEntries(), n)
	}
	tb := &table{valSize: int(vals.ValueSize()), n: n}
	var err error
	if tb.keys, err = mmapArray(keys); err != nil {
		return nil, err
	}
	if tb.vals, err = mmapArray(vals); err != nil {
		unix.Munmap(tb.keys)
		return nil, err
	}
	return tb, nil
}

func mmapArray(m *ebpf.Map) ([]byte, error) {
	// Array elements are 8-byte aligned.
	size := int(m.MaxEntries()) * int((m.ValueSize()+7)&^7)
	b, err := unix.Mmap(m.FD(), 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("ebpf: mapping a table of %d bytes: %w", size, err)
	}
	return b, nil
}

func (tb *table) close() {
	unix.Munmap(tb.keys)
	unix.Munmap(tb.vals)
}

func (tb *table) keyPtr(i int) *uint64 { return (*uint64)(unsafe.Pointer(&tb.keys[8*i])) }

// key returns the key of slot i: 0 when free, with keyBusy while it is
// being filled in.
func (tb *table) key(i int) uint64 { return atomic.LoadUint64(tb.keyPtr(i)) }

// read copies slot i's value into v and returns its key, or 0 if the slot
// is free, busy, or changed while it was read.
func (tb *table) read(i int, v []byte) uint64 {
	k := tb.key(i)
	if k == 0 || k&keyBusy != 0 {
		return 0
	}
	copy(v, tb.vals[i*tb.valSize:(i+1)*tb.valSize])
	if tb.key(i) != k {
		return 0
	}
	return k
}

// release frees slot i if its key is still k.
func (tb *table) release(i int, k uint64) { atomic.CompareAndSwapUint64(tb.keyPtr(i), k, 0) }

func u64(b []byte, off int) uint64 { return binary.LittleEndian.Uint64(b[off:]) }
