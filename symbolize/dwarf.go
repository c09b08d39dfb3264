package symbolize

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
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
	var inflated uint64 // what the compressed sections decompress to
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
		if d.comp != compressNone {
			inflated += d.size
		}
		secs[name] = d
	}
	if size, ok := fileSize(f.r); ok && inflated > dwarfBudget(size) {
		return nil, fmt.Errorf("the compressed DWARF sections decompress to %d bytes, more than a file of %d bytes can honestly hold (%d)",
			inflated, size, dwarfBudget(size))
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
