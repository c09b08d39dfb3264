package symbolize

import (
	"encoding/binary"
	"fmt"
	"io"
	"sort"
)

// unitOf returns the unit whose ranges hold va. When none does, the units
// that .debug_aranges does not list are indexed by their own entries, once,
// and searched too.
func (dw *dwarfInfo) unitOf(va uint64) (uint64, bool) {
	for {
		i := searchRanges(len(dw.cus), func(i int) uint64 { return dw.cus[i].lo }, dw.maxHi, va,
			func(i int) bool { return va < dw.cus[i].hi })
		if i >= 0 {
			return dw.cus[i].cu, true
		}
		if dw.walked {
			return 0, false
		}
		dw.walk()
	}
}

// searchRanges finds, among n ranges sorted by lo with maxHi their running
// maximum end, the last one (highest lo) that holds va, or -1.
func searchRanges(n int, lo func(int) uint64, maxHi []uint64, va uint64, holds func(int) bool) int {
	i := sort.Search(n, func(i int) bool { return lo(i) > va }) - 1
	for ; i >= 0 && maxHi[i] > va; i-- {
		if holds(i) {
			return i
		}
	}
	return -1
}

// index builds the address-to-unit index from .debug_aranges, or from the
// units' entries when it has none.
func (dw *dwarfInfo) index() {
	if dw.indexed {
		return
	}
	dw.indexed = true
	if dw.aranges != nil {
		b, err := dw.aranges.readAll()
		if err != nil {
			dw.warn("%s: DWARF aranges: %v", dw.name, err)
		}
		for _, a := range parseAranges(b, dw.order) {
			dw.cus = append(dw.cus, cuRange{a.lo, a.hi, a.info})
			dw.heads = append(dw.heads, a.info)
		}
		sort.Slice(dw.heads, func(i, j int) bool { return dw.heads[i] < dw.heads[j] })
		dw.heads = dedupUint64(dw.heads)
	}
	dw.sortRanges()
	if len(dw.cus) == 0 {
		dw.walk()
	}
}

func (dw *dwarfInfo) sortRanges() { dw.maxHi = sortSpans(dw.cus) }

// span is an address range that searchRanges can search.
type span interface{ bounds() (lo, hi uint64) }

func (c cuRange) bounds() (uint64, uint64)   { return c.lo, c.hi }
func (f funcRange) bounds() (uint64, uint64) { return f.lo, f.hi }

// sortSpans sorts rs by their low ends and returns the running maximum of
// their high ends, which searchRanges needs.
func sortSpans[T span](rs []T) []uint64 {
	sort.Slice(rs, func(i, j int) bool {
		a, _ := rs[i].bounds()
		b, _ := rs[j].bounds()
		return a < b
	})
	maxHi := make([]uint64, len(rs))
	var hi uint64
	for i, r := range rs {
		_, h := r.bounds()
		hi = max(hi, h)
		maxHi[i] = hi
	}
	return maxHi
}

func dedupUint64(x []uint64) []uint64 {
	out := x[:0]
	for i, v := range x {
		if i == 0 || v != x[i-1] {
			out = append(out, v)
		}
	}
	return out
}

// walk reads every unit's header and entry, in one pass over .debug_info:
// the ranges of the units that .debug_aranges does not list join the index,
// and every unit's extent is known. The abbreviations are read for the walk
// and dropped after it.
func (dw *dwarfInfo) walk() {
	dw.walked = true
	listed := map[uint64]bool{}
	for _, c := range dw.cus {
		listed[c.cu] = true
	}
	abbrevs, err := dw.abbrev.readAll()
	if err != nil {
		dw.warn("%s: DWARF abbreviations: %v", dw.name, err)
		return
	}
	tables := map[uint64]*abbrevTable{}
	var heads []uint64
	dw.ends = map[uint64]uint64{}
	err = dw.info.scan(initialLength(dw.order), func(off uint64, b []byte) error {
		h, err := parseUnitHeader(dw.order, b, off)
		if err != nil {
			return err
		}
		heads = append(heads, off)
		dw.ends[off] = h.end
		if listed[off] || h.unitType != utCompile && h.unitType != utPartial {
			return nil
		}
		t := tables[h.abbrevOff]
		if t == nil {
			t = &abbrevTable{}
			if h.abbrevOff >= uint64(len(abbrevs)) {
				return fmt.Errorf("unit at %#x: abbreviations at %#x beyond their section", off, h.abbrevOff)
			}
			if _, err := parseAbbrevs(abbrevs[h.abbrevOff:], t); err != nil {
				return fmt.Errorf("unit at %#x: abbreviations: %w", off, err)
			}
			tables[h.abbrevOff] = t
		}
		u := &unit{unitHeader: h, order: dw.order, data: b, abbrevs: t}
		var d die
		if _, err := u.entry(h.first, &d); err != nil {
			return err
		}
		if d.tag != tagCompileUnit && d.tag != tagPartialUnit {
			return nil
		}
		dw.unitEntry(u, &d)
		for _, rg := range dw.rangesOf(u, &d) {
			if rg[0] < rg[1] {
				dw.cus = append(dw.cus, cuRange{rg[0], rg[1], off})
			}
		}
		return nil
	})
	if err != nil {
		dw.warn("%s: DWARF units: %v", dw.name, err)
	}
	dw.heads = heads
	dw.sortRanges()
}

type arange struct {
	lo, hi uint64
	info   uint64 // offset of the unit's header in .debug_info
}

// parseAranges decodes .debug_aranges. It stops at the first malformed set
// and returns what came before.
func parseAranges(b []byte, order binary.ByteOrder) []arange {
	var out []arange
	for len(b) >= 4 {
		set := b
		length, hdr := uint64(order.Uint32(b)), 4
		dwarf64 := false
		if length == 0xffffffff {
			if len(b) < 12 {
				break
			}
			length, hdr, dwarf64 = order.Uint64(b[4:]), 12, true
		}
		if length > uint64(len(b)-hdr) || length < 2 {
			break
		}
		body := b[hdr : hdr+int(length)]
		b = b[hdr+int(length):]
		// version(2) debug_info_offset(4|8) address_size(1) segment_size(1)
		offSize := 4
		if dwarf64 {
			offSize = 8
		}
		if len(body) < 2+offSize+2 {
			break
		}
		info := readUint(order, body[2:], offSize)
		asize, ssize := int(body[2+offSize]), int(body[3+offSize])
		if asize != 8 && asize != 4 || ssize != 0 {
			continue
		}
		// Tuples start at a multiple of twice the address size from the
		// start of the set.
		start := hdr + 2 + offSize + 2
		tuple := 2 * asize
		start = (start + tuple - 1) / tuple * tuple
		if start > hdr+len(body) {
			continue
		}
		tuples := set[start : hdr+len(body)]
		for len(tuples) >= tuple {
			lo, n := readUint(order, tuples, asize), readUint(order, tuples[asize:], asize)
			tuples = tuples[tuple:]
			if lo == 0 && n == 0 {
				break
			}
			if n > 0 && lo+n > lo {
				out = append(out, arange{lo, lo + n, info})
			}
		}
	}
	return out
}

// scan reads the section's consecutive units from its start, each as long
// as length says, and calls fn with each: for a compressed section in one
// pass over its decompressed stream. It stops at the first error.
func (s *dwSection) scan(length func([]byte) (uint64, bool, error), fn func(off uint64, b []byte) error) error {
	var zr io.Reader
	if s.comp != compressNone && s.all == nil {
		r, done, err := s.stream()
		if err != nil {
			return err
		}
		defer done()
		zr = r
	}
	var buf []byte
	for off := uint64(0); off < s.size; {
		var b []byte
		if zr == nil {
			hdr, err := s.at(off, 12)
			if err != nil {
				return err
			}
			n, ok, err := length(hdr)
			if err != nil || !ok || n > s.size-off {
				return fmt.Errorf("%s: bad unit length at %#x", s.name, off)
			}
			if b, err = s.at(off, n); err != nil {
				return err
			}
		} else {
			buf = buf[:0]
			var n uint64
			for {
				l, ok, err := length(buf)
				if err != nil {
					return fmt.Errorf("%s at %#x: %w", s.name, off, err)
				}
				if ok {
					n = l
					break
				}
				if len(buf) >= 12 || uint64(len(buf)) >= s.size-off {
					return fmt.Errorf("%s: bad unit length at %#x", s.name, off)
				}
				buf = append(buf, 0)
				if _, err := io.ReadFull(zr, buf[len(buf)-1:]); err != nil {
					return fmt.Errorf("%s: decompressing: %w", s.name, err)
				}
			}
			if n > s.size-off || n < uint64(len(buf)) {
				return fmt.Errorf("%s: bad unit length at %#x", s.name, off)
			}
			have := len(buf)
			buf = append(buf, make([]byte, int(n)-have)...)
			if _, err := io.ReadFull(zr, buf[have:]); err != nil {
				return fmt.Errorf("%s: decompressing: %w", s.name, err)
			}
			b = buf
		}
		if err := fn(off, b); err != nil {
			return err
		}
		off += uint64(len(b))
	}
	return nil
}
