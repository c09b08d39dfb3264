package symbolize

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"path"
	"sort"
	"strings"
)

// dwarfInfo is the DWARF of one object, read as addresses need it: first
// an index from address ranges to units (from .debug_aranges; the units'
// own entries only when an address is in none of its ranges, or when there
// is no .debug_aranges), then, for each unit an address falls in, its bytes,
// its abbreviations, its line table and the address ranges of its functions;
// the calls inlined into a function are decoded when an address first falls
// in it. Nothing else of the sections is kept: resolving the addresses of a
// trace in a C library reads a few of its thousands of units.
//
// Units are read in batches (load): a compressed section can only be
// decompressed from its start, so each batch is one pass over it.
type dwarfInfo struct {
	name  string
	warn  func(format string, args ...any)
	order binary.ByteOrder

	info, abbrev, line                                *dwSection
	strSec, lineStr, strOffsets, addr, ranges, rnglis *dwSection
	aranges                                           *dwSection

	indexed bool
	cus     []cuRange // sorted by lo
	maxHi   []uint64  // maxHi[i] is the largest hi of cus[:i+1]
	heads   []uint64  // unit header offsets known, sorted: from .debug_aranges, or all after a walk
	walked  bool      // every unit's header and entry were read
	ends    map[uint64]uint64

	units  map[uint64]*unit        // the units read, by header offset
	names  map[uint64]funcName     // resolved function names by entry offset
	tables map[uint64]*abbrevTable // abbreviation tables by offset, shared by the units read
}

type cuRange struct {
	lo, hi uint64
	cu     uint64 // offset of the unit's header in .debug_info
}

// unit is what symbolizing keeps of one unit: its bytes (header included),
// the attributes of its entry that the rest needs, its line table, and the
// address ranges of its functions.
type unit struct {
	unitHeader
	order   binary.ByteOrder
	data    []byte // data[0] is at off in .debug_info; nil when the unit could not be read
	abbrevs *abbrevTable

	name                                   string // the unit's source file: for code its line table misses
	base                                   uint64 // base address of its range lists
	strOffsetsBase, addrBase, rnglistsBase uint64
	stmtList                               attrVal
	compDir                                string
	children                               bool
	next                                   int // offset after its entry

	files []string  // the line table's file names, by index
	rows  []lineRow // sorted by address
	funcs []funcRange
	maxHi []uint64 // maxHi[i] is the largest hi of funcs[:i+1]
	fns   []function
}

// funcRange is one address range of fns[fn].
type funcRange struct {
	lo, hi uint64
	fn     int32
}

// function is a concrete DW_TAG_subprogram.
type function struct {
	off     uint64 // of its entry
	decoded bool
	scopes  []scope // its own ranges and those of the calls inlined into it
}

// scope is one address range of a function (depth 0) or of a call inlined
// into it (depth 1 for a call in the function, 2 for a call inlined into that
// call, ...).
type scope struct {
	lo, hi   uint64
	depth    int32
	callLine int32 // inlined calls: where the call is, in the enclosing scope
	callFile int32
	name     string // the entry's own DW_AT_name
	link     string // its linkage name
	origin   uint64 // DW_AT_abstract_origin or DW_AT_specification; 0 if none
}

// openDWARF prepares the reading of f's DWARF: it reads the compression
// headers of the sections symbolizing reads (the entries, the line tables
// and what they refer to; never location lists, call frame information,
// name indexes or type units) and nothing else. Decoding happens in lookups, which
// report bad DWARF through warn, naming the module name.
func openDWARF(f *elfFile, name string, warn func(string, ...any)) (dw *dwarfInfo, err error) {
	defer func() {
		if p := recover(); p != nil {
			dw, err = nil, fmt.Errorf("corrupt DWARF: %v", p)
		}
	}()
	if f.Type == elf.ET_REL {
		// Relocatable objects would need relocations applied, and are
		// never mapped as code.
		return nil, errors.New("relocatable object")
	}
	secs := map[string]*dwSection{}
	for _, s := range f.Sections {
		name, ok := strings.CutPrefix(s.Name, ".debug_")
		if !ok {
			name, ok = strings.CutPrefix(s.Name, ".zdebug_")
		}
		if !ok || !dwarfSections[name] || s.Type == elf.SHT_NOBITS || secs[name] != nil {
			continue
		}
		d, err := newSection(f.File, s, f.r)
		if err != nil {
			return nil, fmt.Errorf("section %s: %w", s.Name, err)
		}
		secs[name] = d
	}
	if secs["info"] == nil || secs["abbrev"] == nil {
		return nil, errors.New("no .debug_info or .debug_abbrev")
	}
	return &dwarfInfo{
		name: name, warn: warn, order: f.ByteOrder,
		info: secs["info"], abbrev: secs["abbrev"], line: secs["line"],
		strSec: secs["str"], lineStr: secs["line_str"], strOffsets: secs["str_offsets"], addr: secs["addr"],
		ranges: secs["ranges"], rnglis: secs["rnglists"], aranges: secs["aranges"],
		units: map[uint64]*unit{}, names: map[uint64]funcName{}, tables: map[uint64]*abbrevTable{},
	}, nil
}

// dwarfSections are the sections symbolizing reads, by name without the
// .debug_ prefix.
var dwarfSections = map[string]bool{"info": true, "abbrev": true, "str": true, "line": true, "ranges": true,
	"addr": true, "line_str": true, "str_offsets": true, "rnglists": true, "aranges": true}

// close releases the streams that passes over compressed sections left
// open.
func (dw *dwarfInfo) close() {
	for _, s := range []*dwSection{dw.info, dw.abbrev, dw.line} {
		if s != nil {
			s.closeStream()
		}
	}
}

// recovered turns a panic into a warning: nothing a file holds may stop a
// report, and this reader checks its bounds, but a bug must not either.
func (dw *dwarfInfo) recovered() {
	if p := recover(); p != nil {
		dw.warn("%s: corrupt DWARF: %v", dw.name, p)
	}
}

// prepare reads, in one batch, the units that the addresses vas fall in.
func (dw *dwarfInfo) prepare(vas []uint64) {
	defer dw.recovered()
	dw.index()
	var offs []uint64
	for _, va := range vas {
		if cu, ok := dw.unitOf(va); ok && dw.units[cu] == nil {
			offs = append(offs, cu)
		}
	}
	dw.load(offs)
}

// lookup resolves va, innermost frame first; nil when no unit covers it.
// Bad DWARF is reported once per unit through warn and gives nil.
func (dw *dwarfInfo) lookup(va uint64, demangle bool) (locs []loc) {
	defer func() {
		if p := recover(); p != nil {
			dw.warn("%s: corrupt DWARF: %v", dw.name, p)
			locs = nil
		}
	}()
	dw.index()
	cu, ok := dw.unitOf(va)
	if !ok {
		return nil
	}
	u := dw.units[cu]
	if u == nil {
		dw.load([]uint64{cu})
		if u = dw.units[cu]; u == nil {
			return nil
		}
	}
	return dw.resolve(u, va, demangle)
}

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

func (dw *dwarfInfo) sortRanges() {
	sort.Slice(dw.cus, func(i, j int) bool { return dw.cus[i].lo < dw.cus[j].lo })
	dw.maxHi = make([]uint64, len(dw.cus))
	var hi uint64
	for i, c := range dw.cus {
		hi = max(hi, c.hi)
		dw.maxHi[i] = hi
	}
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

// decodeFuncs reads the functions of a unit: their entries and ranges only,
// skipping their children, and descending only into namespaces, where C++
// and Rust put functions.
func (dw *dwarfInfo) decodeFuncs(u *unit) {
	pos := u.next
	var d die
	for depth := 1; depth > 0 && pos < len(u.data); {
		next, err := u.entry(pos, &d)
		if err != nil {
			dw.warn("%s: DWARF entries: %v", dw.name, err)
			break
		}
		pos = next
		switch d.tag {
		case 0:
			depth--
			continue
		case tagSubprogram:
			if ranges := dw.rangesOf(u, &d); len(ranges) > 0 {
				fn := int32(len(u.fns))
				u.fns = append(u.fns, function{off: d.off})
				for _, rg := range ranges {
					if rg[0] < rg[1] {
						u.funcs = append(u.funcs, funcRange{rg[0], rg[1], fn})
					}
				}
			}
		case tagNamespace, tagModule:
			if d.children {
				depth++
				continue
			}
		}
		if pos, err = u.skip(pos, &d); err != nil {
			dw.warn("%s: DWARF entries: %v", dw.name, err)
			break
		}
	}
	sort.Slice(u.funcs, func(i, j int) bool { return u.funcs[i].lo < u.funcs[j].lo })
	u.maxHi = make([]uint64, len(u.funcs))
	var hi uint64
	for i, f := range u.funcs {
		hi = max(hi, f.hi)
		u.maxHi[i] = hi
	}
}

// decodeFunction reads the tree of a function's entry: its ranges and the
// calls inlined into it, at any depth of lexical blocks and inlining.
func (dw *dwarfInfo) decodeFunction(u *unit, fn *function) {
	fn.decoded = true
	pos := int(fn.off - u.off)
	var d die
	pos, err := u.entry(pos, &d)
	if err != nil {
		dw.warn("%s: DWARF function at %#x: %v", dw.name, fn.off, err)
		return
	}
	s := dw.newScope(u, &d)
	for _, rg := range dw.rangesOf(u, &d) {
		if rg[0] < rg[1] {
			s.lo, s.hi = rg[0], rg[1]
			fn.scopes = append(fn.scopes, s)
		}
	}
	if !d.children {
		return
	}
	type open struct {
		depth int   // tree depth of the inlined call's entry
		inl   int32 // its inline depth
	}
	var stack []open
	for depth := 1; depth > 0 && pos < len(u.data); {
		next, err := u.entry(pos, &d)
		if err != nil {
			dw.warn("%s: DWARF entries: %v", dw.name, err)
			break
		}
		pos = next
		if d.tag == 0 {
			depth--
			continue
		}
		for len(stack) > 0 && stack[len(stack)-1].depth >= depth {
			stack = stack[:len(stack)-1]
		}
		descend := false
		switch d.tag {
		case tagInlinedSubroutine:
			ranges := dw.rangesOf(u, &d)
			if len(ranges) == 0 {
				break
			}
			s := dw.newScope(u, &d)
			s.depth = 1
			if len(stack) > 0 {
				s.depth = stack[len(stack)-1].inl + 1
			}
			s.callFile = int32(d.callFile.int())
			s.callLine = int32(d.callLine.int())
			for _, rg := range ranges {
				if rg[0] < rg[1] {
					s.lo, s.hi = rg[0], rg[1]
					fn.scopes = append(fn.scopes, s)
				}
			}
			stack = append(stack, open{depth, s.depth})
			descend = true
		case tagLexicalBlock:
			descend = true
		}
		if d.children {
			if descend {
				depth++
			} else if pos, err = u.skip(pos, &d); err != nil {
				dw.warn("%s: DWARF entries: %v", dw.name, err)
				break
			}
		}
	}
}

func (dw *dwarfInfo) newScope(u *unit, d *die) scope {
	s := scope{name: dw.str(u, d.name), link: dw.str(u, d.link)}
	if d.origin.ok() && isLocalRef(d.origin.form) {
		s.origin = d.origin.v
	} else if d.spec.ok() && isLocalRef(d.spec.form) {
		s.origin = d.spec.v
	}
	return s
}

// resolve gives the frames of va within unit u.
func (dw *dwarfInfo) resolve(u *unit, va uint64, demangle bool) []loc {
	// Code the line table misses is still in the unit's file, at line 0,
	// as addr2line and llvm-symbolizer say too.
	file, line, ok := u.line(va)
	if !ok {
		file, line = u.name, 0
	}
	i := searchRanges(len(u.funcs), func(i int) uint64 { return u.funcs[i].lo }, u.maxHi, va,
		func(i int) bool { return va < u.funcs[i].hi })
	if i < 0 {
		if file == "" {
			return nil
		}
		return []loc{{File: file, Line: line}}
	}
	fn := &u.fns[u.funcs[i].fn]
	if !fn.decoded {
		dw.decodeFunction(u, fn)
	}
	// The chain of scopes holding va, by depth. Well-formed DWARF nests them,
	// one per depth.
	var chain []*scope
	for j := range fn.scopes {
		s := &fn.scopes[j]
		if s.lo <= va && va < s.hi {
			for int(s.depth) >= len(chain) {
				chain = append(chain, nil)
			}
			chain[s.depth] = s
		}
	}
	// Drop anything below a gap.
	for k, s := range chain {
		if s == nil {
			chain = chain[:k]
			break
		}
	}
	if len(chain) == 0 {
		return []loc{{File: file, Line: line}}
	}
	locs := make([]loc, len(chain))
	for k := range chain {
		s := chain[len(chain)-1-k]
		l := &locs[k]
		l.Function, l.qualified = dw.funcName(s, demangle)
		if k == 0 {
			l.File, l.Line = file, line
		} else {
			in := chain[len(chain)-k]
			if int(in.callFile) < len(u.files) && in.callFile >= 0 {
				l.File = u.files[in.callFile]
			}
			l.Line = int(in.callLine)
		}
	}
	return locs
}

// line looks va up in the unit's line table.
func (u *unit) line(va uint64) (string, int, bool) {
	i := sort.Search(len(u.rows), func(i int) bool { return u.rows[i].addr > va }) - 1
	if i < 0 || u.rows[i].end {
		return "", 0, false
	}
	file := ""
	if f := u.rows[i].file; f >= 0 && int(f) < len(u.files) {
		file = u.files[f]
	}
	return file, int(u.rows[i].line), true
}

// funcName names a scope's function. A mangled linkage name, of the entry or
// of one it refers to, qualifies C++ and Rust names (ns::Widget::make(int)
// where DW_AT_name says make). Other linkage names are asm labels of C
// functions (glibc's __GI___libc_malloc for __libc_malloc): the source name
// is better. qualified says the name came from a mangled one.
func (dw *dwarfInfo) funcName(s *scope, demangle bool) (name string, qualified bool) {
	n := dw.scopeName(s, 0, demangle, 0)
	return n.name, n.qualified
}

type funcName struct {
	name      string
	qualified bool
}

func (dw *dwarfInfo) scopeName(s *scope, self uint64, demangle bool, depth int) funcName {
	if isMangled(s.link) {
		return funcName{maybeDemangle(s.link, demangle), true}
	}
	if s.origin != 0 && s.origin != self {
		if n := dw.nameAt(s.origin, demangle, depth+1); n.name != "" {
			return n
		}
	}
	if s.name != "" {
		return funcName{s.name, false}
	}
	return funcName{s.link, false}
}

// nameAt resolves the name of the entry at off, following abstract origins
// and specifications (across units, too) a few steps at most.
func (dw *dwarfInfo) nameAt(off uint64, demangle bool, depth int) funcName {
	if n, ok := dw.names[off]; ok {
		return n
	}
	if depth > 8 {
		return funcName{}
	}
	u := dw.unitAt(off)
	if u == nil {
		return funcName{}
	}
	var d die
	if _, err := u.entry(int(off-u.off), &d); err != nil || d.tag == 0 {
		return funcName{}
	}
	s := dw.newScope(u, &d)
	n := dw.scopeName(&s, off, demangle, depth)
	dw.names[off] = n
	return n
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

func maybeDemangle(name string, demangle bool) string {
	if !demangle {
		return name
	}
	return demangleName(name)
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
