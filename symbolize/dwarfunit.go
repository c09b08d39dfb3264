package symbolize

import (
	"errors"
	"path"
	"sort"
)

// load reads the units at the header offsets offs that are not read yet,
// in one pass over each section: their bytes, then their abbreviations,
// then their line tables; and indexes their functions.
func (dw *dwarfInfo) load(offs []uint64) {
	var us []*unit
	var exts []*extent
	for _, off := range offs {
		if dw.units[off] != nil {
			continue
		}
		u := &unit{order: dw.order}
		u.off = off
		dw.units[off] = u
		us = append(us, u)
		exts = append(exts, &extent{off: off, length: initialLength(dw.order)})
	}
	if len(us) == 0 {
		return
	}
	if err := dw.info.fetch(exts); err != nil {
		dw.warn("%s: DWARF units: %v", dw.name, err)
	}
	// exts are now sorted by offset, as us will be.
	sort.Slice(us, func(i, j int) bool { return us[i].off < us[j].off })
	var tabs []*extent
	seen := map[uint64]bool{}
	for i, u := range us {
		e := exts[i]
		if e.err != nil || e.data == nil {
			if e.err != nil {
				dw.warn("%s: DWARF unit at %#x: %v", dw.name, u.off, e.err)
			}
			continue
		}
		h, err := parseUnitHeader(dw.order, e.data, u.off)
		if err != nil {
			dw.warn("%s: DWARF unit at %#x: %v", dw.name, u.off, err)
			continue
		}
		u.unitHeader, u.data = h, e.data
		if dw.tables[h.abbrevOff] == nil && !seen[h.abbrevOff] {
			seen[h.abbrevOff] = true
			tabs = append(tabs, &extent{off: h.abbrevOff, length: abbrevLength})
		}
	}
	if len(tabs) > 0 {
		if err := dw.abbrev.fetch(tabs); err != nil {
			dw.warn("%s: DWARF abbreviations: %v", dw.name, err)
		}
		for _, e := range tabs {
			t := &abbrevTable{}
			if e.err == nil && e.data != nil {
				if _, err := parseAbbrevs(e.data, t); err != nil {
					e.err = err
				}
			}
			if e.err != nil {
				dw.warn("%s: DWARF abbreviations at %#x: %v", dw.name, e.off, e.err)
			}
			dw.tables[e.off] = t
		}
	}
	// The units' own entries, and their line tables.
	var lines []*extent
	lineAt := map[uint64]*extent{}
	for _, u := range us {
		if u.data == nil {
			continue
		}
		u.abbrevs = dw.tables[u.abbrevOff]
		if u.unitType != utCompile && u.unitType != utPartial {
			u.data = nil // a type unit: no code
			continue
		}
		var d die
		next, err := u.entry(u.first, &d)
		if err != nil {
			dw.warn("%s: DWARF unit at %#x: %v", dw.name, u.off, err)
			u.data = nil
			continue
		}
		u.next = next
		dw.unitEntry(u, &d)
		if u.stmtList.ok() && dw.line != nil && lineAt[u.stmtList.v] == nil {
			e := &extent{off: u.stmtList.v, length: initialLength(dw.order)}
			lineAt[e.off] = e
			lines = append(lines, e)
		}
	}
	if len(lines) > 0 {
		if err := dw.line.fetch(lines); err != nil {
			dw.warn("%s: DWARF line tables: %v", dw.name, err)
		}
	}
	for _, u := range us {
		if u.data == nil {
			continue
		}
		if u.stmtList.ok() && dw.line != nil {
			if e := lineAt[u.stmtList.v]; e.err != nil {
				dw.warn("%s: DWARF line table: %v", dw.name, e.err)
			} else if e.data != nil {
				var err error
				u.files, u.rows, err = parseLines(e.data, dw.order, u.addrSize, u.compDir, dw)
				if err != nil {
					// Keep what was read before.
					dw.warn("%s: DWARF %v", dw.name, err)
				}
			}
		}
		if u.children {
			dw.decodeFuncs(u)
		}
	}
}

// unitEntry keeps what the rest needs of u's own entry d.
func (dw *dwarfInfo) unitEntry(u *unit, d *die) {
	u.children = d.children
	u.strOffsetsBase, u.addrBase, u.rnglistsBase = d.strOffsetsBase.v, d.addrBase.v, d.rnglistsBase.v
	// Range lists start from the unit's entry address, or its low address
	// (some GCC versions give only the first).
	if a, ok := dw.address(u, d.entrypc); ok {
		u.base = a
	} else if a, ok := dw.address(u, d.lowpc); ok {
		u.base = a
	}
	u.stmtList = d.stmtList
	u.compDir = dw.str(u, d.compDir)
	u.name = dw.str(u, d.name)
	if u.compDir != "" && u.name != "" && !path.IsAbs(u.name) {
		u.name = path.Join(u.compDir, u.name)
	}
}

// str returns a string attribute's value; "" when it has none or it cannot
// be read (strings of a supplementary file are not).
func (dw *dwarfInfo) str(u *unit, a attrVal) string {
	var s string
	var err error
	switch a.form {
	case 0:
		return ""
	case formString:
		b := u.data[a.v:]
		for i, c := range b {
			if c == 0 {
				return string(b[:i])
			}
		}
		return ""
	case formStrp:
		s, err = dw.strp(a.v)
	case formLineStrp:
		s, err = dw.lineStrp(a.v)
	case formStrx, formStrx1, formStrx2, formStrx3, formStrx4, formGNUStrIndex:
		if dw.strOffsets == nil {
			return ""
		}
		var off uint64
		off, err = dw.strOffsets.uint(u.strOffsetsBase+a.v*uint64(u.offSize), u.offSize)
		if err == nil {
			s, err = dw.strp(off)
		}
	default:
		return ""
	}
	if err != nil {
		dw.warn("%s: DWARF string: %v", dw.name, err)
	}
	return s
}

func (dw *dwarfInfo) strp(off uint64) (string, error) {
	if dw.strSec == nil {
		return "", errors.New("no .debug_str")
	}
	return dw.strSec.cstring(off)
}

func (dw *dwarfInfo) lineStrp(off uint64) (string, error) {
	if dw.lineStr == nil {
		return "", errors.New("no .debug_line_str")
	}
	return dw.lineStr.cstring(off)
}

// address returns an address attribute's value.
func (dw *dwarfInfo) address(u *unit, a attrVal) (uint64, bool) {
	switch a.form {
	case formAddr:
		return a.v, true
	case formAddrx, formAddrx1, formAddrx2, formAddrx3, formAddrx4, formGNUAddrIndex:
		return dw.addrx(u, u.addrBase, a.v)
	}
	return 0, false
}

// addrx returns the address at index i of .debug_addr from base.
func (dw *dwarfInfo) addrx(u *unit, base, i uint64) (uint64, bool) {
	if dw.addr == nil {
		return 0, false
	}
	v, err := dw.addr.uint(base+i*uint64(u.addrSize), u.addrSize)
	if err != nil {
		dw.warn("%s: DWARF address: %v", dw.name, err)
		return 0, false
	}
	return v, true
}

// unitAt returns the unit that holds the entry at off, reading it if
// needed; nil when there is none.
func (dw *dwarfInfo) unitAt(off uint64) *unit {
	for _, u := range dw.units {
		if u.data != nil && off >= u.off+uint64(u.first) && off < u.end {
			return u
		}
	}
	for {
		// The last unit known to start at or before off.
		i := sort.Search(len(dw.heads), func(i int) bool { return dw.heads[i] > off }) - 1
		if i >= 0 {
			h := dw.heads[i]
			if dw.units[h] == nil {
				dw.load([]uint64{h})
			}
			if u := dw.units[h]; u.data != nil && off >= u.off+uint64(u.first) && off < u.end {
				return u
			}
		}
		if dw.walked {
			return nil
		}
		dw.walk()
	}
}
