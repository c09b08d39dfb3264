package symbolize

import (
	"errors"
)

// rangesOf returns the address ranges of entry d of unit u, as
// debug/dwarf's Data.Ranges does: low and high addresses, then a range
// list (.debug_ranges before DWARF 5, .debug_rnglists since).
func (dw *dwarfInfo) rangesOf(u *unit, d *die) [][2]uint64 {
	var ret [][2]uint64
	low, lowOK := dw.address(u, d.lowpc)
	var high uint64
	var highOK bool
	if d.highpc.isConst() {
		high, highOK = low+uint64(d.highpc.int()), true
	} else {
		high, highOK = dw.address(u, d.highpc)
	}
	if lowOK && highOK {
		ret = append(ret, [2]uint64{low, high})
	}
	if !d.ranges.ok() {
		return ret
	}
	if u.version >= 5 && dw.rnglis != nil {
		off := d.ranges.v
		switch d.ranges.form {
		case formSecOffset, formData4, formData8:
		case formRnglistx:
			// An index into the offsets that follow the base.
			o, err := dw.rnglis.uint(u.rnglistsBase+off*uint64(u.offSize), u.offSize)
			if err != nil {
				dw.warn("%s: DWARF range list: %v", dw.name, err)
				return ret
			}
			off = u.rnglistsBase + o
		default:
			return ret
		}
		return dw.rnglist(u, off, ret)
	}
	if dw.ranges == nil || d.ranges.isConst() && d.ranges.form != formData4 && d.ranges.form != formData8 {
		return ret
	}
	return dw.rangeList(u, d.ranges.v, ret)
}

// rangeList reads a .debug_ranges list (DWARF 2 to 4).
func (dw *dwarfInfo) rangeList(u *unit, off uint64, ret [][2]uint64) [][2]uint64 {
	base, as := u.base, u.addrSize
	allOnes := ^uint64(0) >> uint((8-as)*8)
	for n := uint64(1024); ; n *= 8 {
		b, err := dw.ranges.at(off, n)
		if err != nil {
			dw.warn("%s: DWARF range list: %v", dw.name, err)
			return ret
		}
		out, base2 := ret, base
		done := false
		for i := 0; i+2*as <= len(b); i += 2 * as {
			lo, hi := readUint(dw.order, b[i:], as), readUint(dw.order, b[i+as:], as)
			if lo == 0 && hi == 0 {
				done = true
				break
			}
			if lo == allOnes {
				base2 = hi
			} else {
				out = append(out, [2]uint64{base2 + lo, base2 + hi})
			}
		}
		if done || uint64(len(b)) < n {
			return out
		}
	}
}

// rnglist reads a .debug_rnglists list (DWARF 5).
func (dw *dwarfInfo) rnglist(u *unit, off uint64, ret [][2]uint64) [][2]uint64 {
	for n := uint64(1024); ; n *= 8 {
		b, err := dw.rnglis.at(off, n)
		if err != nil {
			dw.warn("%s: DWARF range list: %v", dw.name, err)
			return ret
		}
		out, done := dw.parseRnglist(u, b, ret)
		if done || uint64(len(b)) < n {
			return out
		}
	}
}

// parseRnglist decodes the list at the start of b; done when it ended
// within b.
func (dw *dwarfInfo) parseRnglist(u *unit, b []byte, ret [][2]uint64) ([][2]uint64, bool) {
	const (
		rleEndOfList    = 0
		rleBaseAddressx = 1
		rleStartxEndx   = 2
		rleStartxLength = 3
		rleOffsetPair   = 4
		rleBaseAddress  = 5
		rleStartEnd     = 6
		rleStartLength  = 7
	)
	base, as := u.base, u.addrSize
	i := 0
	var err error
	two := func() (x, y uint64) {
		if err == nil {
			x, i, err = uleb(b, i)
		}
		if err == nil {
			y, i, err = uleb(b, i)
		}
		return x, y
	}
	addr := func() uint64 {
		if err != nil || i+as > len(b) {
			err = errShort
			return 0
		}
		v := readUint(dw.order, b[i:], as)
		i += as
		return v
	}
	indexed := func(k uint64) uint64 {
		v, ok := dw.addrx(u, u.addrBase, k)
		if !ok && err == nil {
			err = errors.New("bad address index")
		}
		return v
	}
	for err == nil && i < len(b) {
		op := b[i]
		i++
		switch op {
		case rleEndOfList:
			return ret, true
		case rleBaseAddressx:
			var k uint64
			if k, i, err = uleb(b, i); err == nil {
				base = indexed(k)
			}
		case rleStartxEndx:
			x, y := two()
			if err == nil {
				lo, hi := indexed(x), indexed(y)
				ret = append(ret, [2]uint64{lo, hi})
			}
		case rleStartxLength:
			x, n := two()
			if err == nil {
				lo := indexed(x)
				ret = append(ret, [2]uint64{lo, lo + n})
			}
		case rleOffsetPair:
			x, y := two()
			if err == nil {
				ret = append(ret, [2]uint64{base + x, base + y})
			}
		case rleBaseAddress:
			base = addr()
		case rleStartEnd:
			lo, hi := addr(), addr()
			if err == nil {
				ret = append(ret, [2]uint64{lo, hi})
			}
		case rleStartLength:
			lo := addr()
			var n uint64
			if err == nil {
				n, i, err = uleb(b, i)
			}
			if err == nil {
				ret = append(ret, [2]uint64{lo, lo + n})
			}
		default:
			return ret, true // unknown: stop, with what came before
		}
	}
	if err != nil && err != errShort {
		return ret, true
	}
	return ret, false
}
