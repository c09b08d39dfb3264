package proc

import (
	"encoding/binary"
	"fmt"
	"io"
	"math/bits"
	"os"
	"strconv"
	"strings"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Smaps is one mapping of /proc/PID/smaps with the counters heapscope uses,
// in bytes (the file says kB).
type Smaps struct {
	Mapping
	Size, Rss, Pss                                       uint64
	SharedClean, SharedDirty, PrivateClean, PrivateDirty uint64
	Anonymous, Swap, SwapPss                             uint64
}

// ReadSmaps reads /proc/PID/smaps.
func ReadSmaps(pid int) ([]Smaps, error) {
	b, err := os.ReadFile(path(pid, "smaps"))
	if err != nil {
		return nil, wrap(pid, err)
	}
	return ParseSmaps(b)
}

// ReadSmapsRollup reads /proc/PID/smaps_rollup: the counters of every
// mapping added up by the kernel (its Mapping is zero).
func ReadSmapsRollup(pid int) (Smaps, error) {
	b, err := os.ReadFile(path(pid, "smaps_rollup"))
	if err != nil {
		return Smaps{}, wrap(pid, err)
	}
	var s Smaps
	err = eachLine(b, func(line string) error {
		_, err := s.counter(line)
		return err
	})
	if err != nil {
		return Smaps{}, err
	}
	return s, nil
}

// ParseSmaps parses the text of an smaps file: a maps line, then one
// "Name: value kB" line per counter, for each mapping.
func ParseSmaps(b []byte) ([]Smaps, error) {
	var out []Smaps
	err := eachLine(b, func(line string) error {
		if len(out) > 0 {
			if ok, err := out[len(out)-1].counter(line); ok || err != nil {
				return err
			}
		}
		m, err := parseMapsLine(line)
		if err != nil {
			return fmt.Errorf("smaps: %w", err)
		}
		out = append(out, Smaps{Mapping: m})
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// counter reads one counter line into s. It reports false for a line that
// is no counter (the next mapping's maps line).
func (s *Smaps) counter(line string) (bool, error) {
	name, rest, ok := strings.Cut(line, ":")
	if !ok || strings.ContainsAny(name, " \t") {
		return false, nil
	}
	rest = strings.TrimSpace(rest)
	var dst *uint64
	switch name {
	case "Size":
		dst = &s.Size
	case "Rss":
		dst = &s.Rss
	case "Pss":
		dst = &s.Pss
	case "Shared_Clean":
		dst = &s.SharedClean
	case "Shared_Dirty":
		dst = &s.SharedDirty
	case "Private_Clean":
		dst = &s.PrivateClean
	case "Private_Dirty":
		dst = &s.PrivateDirty
	case "Anonymous":
		dst = &s.Anonymous
	case "Swap":
		dst = &s.Swap
	case "SwapPss":
		dst = &s.SwapPss
	default:
		return true, nil // a counter heapscope does not use, or VmFlags, THPeligible, ...
	}
	num, unit, _ := strings.Cut(rest, " ")
	v, err := strconv.ParseUint(num, 10, 64)
	if err != nil || unit != "kB" || v > 1<<53 {
		return false, fmt.Errorf("smaps: malformed line %q", line)
	}
	*dst = v << 10
	return true, nil
}

// Resident is which pages of a range of a process's address space are
// resident: in memory, and not the kernel's shared zero page (a page never
// written that the process, or a reader of its memory, only read), which no
// RSS counts.
type Resident struct {
	Start, End uint64 // page-aligned
	PageSize   uint64
	bits       []uint64
	// ZeroKnown says whether zero pages could be told apart: that needs
	// the page frame numbers of /proc/PID/pagemap, which only
	// CAP_SYS_ADMIN reads. Without, a zero page counts as resident.
	ZeroKnown bool
}

// pagemap entry bits (Documentation/admin-guide/mm/pagemap.rst).
const (
	pmPresent = 1 << 63
	pmSwapped = 1 << 62
	pmPFN     = 1<<55 - 1
)

// ReadResident reads /proc/PID/pagemap for [start, end).
func ReadResident(pid int, start, end uint64) (*Resident, error) {
	return readPagemap(pid, start, end, false)
}

// ReadWritten is ReadResident, but it also counts pages swapped out: the
// pages of [start, end) the process has written (or read from a file),
// where data can be.
func ReadWritten(pid int, start, end uint64) (*Resident, error) {
	return readPagemap(pid, start, end, true)
}

func readPagemap(pid int, start, end uint64, swapped bool) (*Resident, error) {
	ps := uint64(os.Getpagesize())
	start, end = start&^(ps-1), (end+ps-1)&^(ps-1)
	if end < start || (end-start)/ps > 1<<32 {
		return nil, fmt.Errorf("pid %d: pagemap range %#x-%#x too large", pid, start, end)
	}
	f, err := os.Open(path(pid, "pagemap"))
	if err != nil {
		return nil, wrap(pid, err)
	}
	defer f.Close()
	zero, zeroKnown := zeroPFN()
	n := (end - start) / ps
	r := &Resident{Start: start, End: end, PageSize: ps, bits: make([]uint64, (n+63)/64), ZeroKnown: zeroKnown}
	buf := make([]byte, 8*4096)
	for i := uint64(0); i < n; {
		want := min(uint64(len(buf)), 8*(n-i))
		k, err := f.ReadAt(buf[:want], int64((start/ps+i)*8))
		if k < 8 {
			if err == nil || err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return nil, fmt.Errorf("pid %d: reading pagemap: %w", pid, err)
		}
		for j := 0; j+8 <= k; j, i = j+8, i+1 {
			e := binary.LittleEndian.Uint64(buf[j:])
			if swapped && e&pmSwapped != 0 {
				r.bits[i/64] |= 1 << (i % 64)
				continue
			}
			if e&pmPresent == 0 || zeroKnown && e&pmPFN == zero {
				continue
			}
			r.bits[i/64] |= 1 << (i % 64)
		}
	}
	return r, nil
}

// Bytes returns how many bytes of [lo, hi) are on resident pages.
func (r *Resident) Bytes(lo, hi uint64) uint64 {
	lo, hi = max(lo, r.Start), min(hi, r.End)
	if lo >= hi {
		return 0
	}
	ps := r.PageSize
	first, last := (lo-r.Start)/ps, (hi-1-r.Start)/ps
	if first == last {
		if r.page(first) {
			return hi - lo
		}
		return 0
	}
	var n uint64
	if r.page(first) {
		n += ps - (lo-r.Start)%ps
	}
	if r.page(last) {
		n += (hi-r.Start-1)%ps + 1
	}
	return n + r.pages(first+1, last)*ps
}

func (r *Resident) page(i uint64) bool { return r.bits[i/64]&(1<<(i%64)) != 0 }

// Page reports whether the page that holds addr is resident (or written,
// for ReadWritten).
func (r *Resident) Page(addr uint64) bool {
	return addr >= r.Start && addr < r.End && r.page((addr-r.Start)/r.PageSize)
}

// pages counts the resident pages of [i, j).
func (r *Resident) pages(i, j uint64) uint64 {
	var n uint64
	for i < j && i%64 != 0 {
		if r.page(i) {
			n++
		}
		i++
	}
	for ; i+64 <= j; i += 64 {
		n += uint64(bits.OnesCount64(r.bits[i/64]))
	}
	for ; i < j; i++ {
		if r.page(i) {
			n++
		}
	}
	return n
}

var (
	zeroOnce  sync.Once
	zeroFrame uint64
	zeroOK    bool
)

// zeroPFN returns the page frame number of the kernel's zero page: a page
// of this process's own that it maps by reading a fresh anonymous mapping.
func zeroPFN() (uint64, bool) {
	zeroOnce.Do(func() {
		ps := os.Getpagesize()
		m, err := unix.Mmap(-1, 0, ps, unix.PROT_READ, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
		if err != nil {
			return
		}
		defer unix.Munmap(m)
		if m[0] != 0 { // the read maps the zero page
			return
		}
		f, err := os.Open("/proc/self/pagemap")
		if err != nil {
			return
		}
		defer f.Close()
		var b [8]byte
		addr := uint64(uintptr(unsafe.Pointer(&m[0])))
		if _, err := f.ReadAt(b[:], int64(addr/uint64(ps)*8)); err != nil {
			return
		}
		e := binary.LittleEndian.Uint64(b[:])
		if e&pmPresent != 0 && e&pmPFN != 0 {
			zeroFrame, zeroOK = e&pmPFN, true
		}
	})
	return zeroFrame, zeroOK
}
