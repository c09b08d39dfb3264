//go:build linux && amd64

package preload

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/heapscope/heapscope/event"
)

// A ring is the collector's view of one thread's buffer. Its contents come
// from the traced process and are not trusted: every length is checked, and
// a ring whose records make no sense is abandoned (and counted), never read
// out of bounds.
type ring struct {
	mem  []byte // the whole mapping, header page first
	data []byte
	base unsafe.Pointer // &data[0]
	size uint64
	mask uint64

	head, seq, lastTS, lost, tail *uint64
	waiting                       *uint32
	tailWord                      *uint32 // the tail's low half: the producer's futex
	merged                        *uint32 // the producer waits for it before using a new ring

	pos      uint64 // next byte to read
	limit    uint64 // head as read at the start of this pass
	stored   uint64 // the tail last stored
	nextTS   uint64 // the record at pos, as peek found it: timestamp,
	off      uint64 // offset in data,
	words    uint64 // length in words,
	typ      uint8  // and type
	tid      uint32
	lostSeen uint64
	broken   bool
	counted  bool // broken, and counted in Stats
}

var errRing = errors.New("malformed ring")

// mapRing maps a ring memfd received from a traced process. The memfd must
// be sealed against shrinking, so that no access through the mapping can
// ever fault.
func mapRing(fd int, size uint32) (*ring, error) {
	seals, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
	if err != nil || seals&unix.F_SEAL_SHRINK == 0 {
		return nil, fmt.Errorf("%w: memfd not sealed against shrinking", errRing)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, err
	}
	if st.Size != int64(ringData)+int64(size) {
		return nil, fmt.Errorf("%w: size %d, want %d", errRing, st.Size, ringData+int(size))
	}
	mem, err := unix.Mmap(fd, 0, int(st.Size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, err
	}
	if binary.LittleEndian.Uint32(mem[ringMagic:]) != magic || binary.LittleEndian.Uint32(mem[ringSize:]) != size {
		unix.Munmap(mem)
		return nil, fmt.Errorf("%w: bad header", errRing)
	}
	u64 := func(off int) *uint64 { return (*uint64)(unsafe.Pointer(&mem[off])) }
	r := &ring{
		mem:      mem,
		data:     mem[ringData:],
		size:     uint64(size),
		mask:     uint64(size) - 1,
		head:     u64(ringHead),
		seq:      u64(ringSeq),
		lastTS:   u64(ringLastTS),
		lost:     u64(ringLost),
		tail:     u64(ringTail),
		waiting:  (*uint32)(unsafe.Pointer(&mem[ringWaiting])),
		tailWord: (*uint32)(unsafe.Pointer(&mem[ringTail])),
		merged:   (*uint32)(unsafe.Pointer(&mem[ringMerged])),
	}
	r.base = unsafe.Pointer(&r.data[0])
	r.pos = atomic.LoadUint64(r.tail)
	r.stored = r.pos
	r.limit = r.pos
	return r, nil
}

// answer tells the producer waiting on a new ring that the collector merges
// it (ok), or never will: it may write into it now, or should give up.
func (r *ring) answer(ok bool) {
	v := uint32(2)
	if ok {
		v = 1
	}
	if r.mem != nil {
		atomic.StoreUint32(r.merged, v)
		futexWake(r.merged, 1<<30)
	}
}

func (r *ring) unmap() {
	if r.mem != nil {
		unix.Munmap(r.mem)
		r.mem, r.data, r.base = nil, nil, nil
	}
}

// loadHead reads the producer's head into limit, abandoning the ring if the
// head is impossible.
func (r *ring) loadHead() {
	if r.broken {
		return
	}
	h := atomic.LoadUint64(r.head)
	if h < r.pos || h-r.pos > r.size || h&7 != 0 {
		r.broken = true
		return
	}
	r.limit = h
}

// word reads the 8-byte word at data offset off (checked by the caller).
func (r *ring) word(off uint64) uint64 {
	return *(*uint64)(unsafe.Add(r.base, off))
}

// record checks the record at pos and returns its offset in data, its type
// and its length in words. The record is entirely below limit and does not
// wrap.
func (r *ring) record() (off uint64, typ uint8, words uint64, ok bool) {
	if r.broken || r.limit-r.pos < 8 {
		return 0, 0, 0, false
	}
	off = r.pos & r.mask
	h := r.word(off)
	typ = uint8(h)
	words = (h >> 8) & 0xffffff
	if words == 0 || words*8 > r.limit-r.pos || off+words*8 > r.size || (typ != recPad && words < 2) {
		r.broken = true
		return 0, 0, 0, false
	}
	return off, typ, words, true
}

// peek returns the timestamp of the next record that goes through the
// merge, consuming PAD and THREAD records on the way.
func (r *ring) peek() (uint64, bool) {
	for {
		off, typ, words, ok := r.record()
		if !ok {
			return 0, false
		}
		switch typ {
		case recPad:
			r.pos += words * 8
			continue
		case recThread:
			if words != 2 {
				r.broken = true
				return 0, false
			}
			r.tid = uint32(r.word(off) >> 32)
			r.pos += words * 8
			continue
		}
		r.off, r.typ, r.words = off, typ, words
		r.nextTS = r.word(off + 8)
		return r.nextTS, true
	}
}

// Event record layouts, indexed by event.Func: body words after the header
// and timestamp.
var (
	bodyWords = [maxFunc + 1]uint8{
		event.FuncMalloc: 2, event.FuncCalloc: 2, event.FuncRealloc: 3, event.FuncReallocarray: 3,
		event.FuncFree: 1, event.FuncPosixMemalign: 2, event.FuncAlignedAlloc: 2, event.FuncMemalign: 2,
		event.FuncValloc: 2, event.FuncPvalloc: 2, event.FuncNew: 2, event.FuncNewArray: 2,
		event.FuncDelete: 1, event.FuncDeleteArray: 1, event.FuncMmap: 2, event.FuncMunmap: 2,
		event.FuncMremap: 4,
	}
	kindOf = [maxFunc + 1]event.Kind{
		event.FuncMalloc: event.KindAlloc, event.FuncCalloc: event.KindAlloc,
		event.FuncRealloc: event.KindRealloc, event.FuncReallocarray: event.KindRealloc,
		event.FuncFree: event.KindFree, event.FuncPosixMemalign: event.KindAlloc,
		event.FuncAlignedAlloc: event.KindAlloc, event.FuncMemalign: event.KindAlloc,
		event.FuncValloc: event.KindAlloc, event.FuncPvalloc: event.KindAlloc,
		event.FuncNew: event.KindAlloc, event.FuncNewArray: event.KindAlloc,
		event.FuncDelete: event.KindFree, event.FuncDeleteArray: event.KindFree,
		event.FuncMmap: event.KindMmap, event.FuncMunmap: event.KindMunmap,
		event.FuncMremap: event.KindRealloc,
	}
)

// heapOf holds, for each allocator a process's malloc may be, the heap of
// each event type: that allocator's, except HeapMmap for the mmap family.
var heapOf = func() (t [heapMimalloc + 1][maxFunc + 1]event.Heap) {
	for h := range t {
		for f := range t[h] {
			t[h][f] = event.Heap(h)
		}
		t[h][event.FuncMmap], t[h][event.FuncMunmap], t[h][event.FuncMremap] = event.HeapMmap, event.HeapMmap, event.HeapMmap
	}
	return t
}()

// decodeModule reads a MODULE record at off.
func (r *ring) decodeModule(off, words uint64) (event.Module, bool) {
	if words < 6 {
		return event.Module{}, false
	}
	lens := r.word(off + 40)
	plen, idlen := lens&0xffffffff, lens>>32
	if plen > modulePathMax || idlen > buildIDMax || (plen+idlen+7)/8 != words-6 {
		return event.Module{}, false
	}
	b := r.data[off+48 : off+48+plen+idlen]
	m := event.Module{
		Start:  r.word(off + 16),
		End:    r.word(off + 24),
		Offset: r.word(off + 32),
		Path:   string(b[:plen]),
	}
	if idlen > 0 {
		m.BuildID = hex.EncodeToString(b[plen:])
	}
	if m.End <= m.Start {
		return event.Module{}, false
	}
	return m, true
}
