package census

import (
	"encoding/binary"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/heapscope/heapscope/internal/proc"
)

// window is how much the walk of a heap reads at once: a heap's chunks are
// read in order, and one read of many chunks costs about what one read of
// a header does.
const window = 256 << 10

// region is a run of adjacent readable mappings.
type region struct{ start, end uint64 }

// memory reads the stopped process's address space: whole windows for the
// walks, a few bytes for the rest, never outside a readable mapping, so
// that no pointer read from the heap makes it read anywhere else.
type memory struct {
	r       io.ReaderAt
	regions []region
	buf     []byte // the current window
	base    uint64 // buf[0]'s address
	scratch [64]byte

	reads, bytes uint64 // what was read, for the census's counters
}

func newMemory(r io.ReaderAt, maps []proc.Mapping) *memory {
	m := &memory{r: r}
	sorted := append([]proc.Mapping(nil), maps...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Start < sorted[j].Start })
	for _, mp := range sorted {
		if len(mp.Perms) < 1 || mp.Perms[0] != 'r' || mp.End <= mp.Start || strings.HasPrefix(mp.Path, "[vvar") || mp.Path == "[vsyscall]" {
			continue
		}
		if n := len(m.regions); n > 0 && m.regions[n-1].end == mp.Start {
			m.regions[n-1].end = mp.End
			continue
		}
		m.regions = append(m.regions, region{mp.Start, mp.End})
	}
	return m
}

// clone returns a memory of the same process with a window of its own, for
// another goroutine.
func (m *memory) clone() *memory {
	return &memory{r: m.r, regions: m.regions}
}

// regionOf returns the readable region holding [addr, addr+n).
func (m *memory) regionOf(addr, n uint64) (region, bool) {
	i := sort.Search(len(m.regions), func(i int) bool { return m.regions[i].end > addr })
	if i == len(m.regions) || m.regions[i].start > addr || addr+n < addr || addr+n > m.regions[i].end {
		return region{}, false
	}
	return m.regions[i], true
}

// readable reports whether [addr, addr+n) is in a readable mapping.
func (m *memory) readable(addr, n uint64) bool {
	_, ok := m.regionOf(addr, n)
	return ok
}

// errUnreadable is the error of a read outside every readable mapping.
type errUnreadable struct{ addr, n uint64 }

func (e errUnreadable) Error() string {
	return fmt.Sprintf("%#x (%d bytes) is in no readable mapping", e.addr, e.n)
}

// view returns n bytes at addr from the current window, reading a new one
// that starts at addr, at most limit bytes long (to the end of the heap the
// walk is in), when they are not in it. The bytes are valid until the next
// call.
func (m *memory) view(addr, n, limit uint64) ([]byte, error) {
	if addr >= m.base && addr+n <= m.base+uint64(len(m.buf)) && addr+n >= addr {
		return m.buf[addr-m.base : addr-m.base+n], nil
	}
	reg, ok := m.regionOf(addr, n)
	if !ok {
		return nil, errUnreadable{addr, n}
	}
	size := uint64(window)
	if limit > addr && limit-addr < size {
		size = limit - addr
	}
	if size < n {
		size = n
	}
	if reg.end-addr < size {
		size = reg.end - addr
	}
	if cap(m.buf) < int(size) {
		m.buf = make([]byte, max(size, window))
	}
	m.buf = m.buf[:size]
	k, err := m.readAt(m.buf, addr)
	if uint64(k) < n {
		m.buf = m.buf[:0]
		return nil, fmt.Errorf("reading %#x: %w", addr, errOr(err))
	}
	m.buf, m.base = m.buf[:k], addr
	return m.buf[:n], nil
}

// small reads n ≤ 64 bytes at addr, outside the window.
func (m *memory) small(addr, n uint64) ([]byte, error) {
	if addr >= m.base && addr+n <= m.base+uint64(len(m.buf)) && addr+n >= addr {
		return m.buf[addr-m.base : addr-m.base+n], nil
	}
	if !m.readable(addr, n) {
		return nil, errUnreadable{addr, n}
	}
	b := m.scratch[:n]
	k, err := m.readAt(b, addr)
	if uint64(k) < n {
		return nil, fmt.Errorf("reading %#x: %w", addr, errOr(err))
	}
	return b, nil
}

// block reads n bytes at addr into a new slice (a struct: an arena, a
// tcache).
func (m *memory) block(addr, n uint64) ([]byte, error) {
	if !m.readable(addr, n) {
		return nil, errUnreadable{addr, n}
	}
	b := make([]byte, n)
	k, err := m.readAt(b, addr)
	if uint64(k) < n {
		return nil, fmt.Errorf("reading %#x: %w", addr, errOr(err))
	}
	return b, nil
}

func (m *memory) u64(addr uint64) (uint64, error) {
	b, err := m.small(addr, 8)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(b), nil
}

func (m *memory) readAt(b []byte, addr uint64) (int, error) {
	if addr > 1<<63-1 {
		return 0, errUnreadable{addr, uint64(len(b))}
	}
	m.reads++
	k, err := m.r.ReadAt(b, int64(addr))
	if k > 0 {
		m.bytes += uint64(k)
	}
	return k, err
}

func errOr(err error) error {
	if err == nil {
		return io.ErrUnexpectedEOF
	}
	return err
}

// get reads a member of a struct whose bytes are b.
func get(b []byte, f field) uint64 {
	if f.off < 0 || f.off+f.size > int64(len(b)) {
		return 0
	}
	switch f.size {
	case 1:
		return uint64(b[f.off])
	case 2:
		return uint64(binary.LittleEndian.Uint16(b[f.off:]))
	case 4:
		return uint64(binary.LittleEndian.Uint32(b[f.off:]))
	}
	return binary.LittleEndian.Uint64(b[f.off:])
}

// elem reads element i of an array member of a struct whose bytes are b.
func elem(b []byte, a array, i int64) uint64 {
	return get(b, field{a.off + i*a.elem, a.elem})
}
