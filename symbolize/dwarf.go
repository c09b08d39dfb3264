package symbolize

import (
	"debug/dwarf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"path"
	"sort"
)

// dwarfInfo is the DWARF of one object, decoded as addresses need it: first
// an index from address ranges to compilation units (from .debug_aranges and
// the units' own ranges, reading only each unit's first entry), then, per
// unit, its line table and its tree of functions and inlined calls.
type dwarfInfo struct {
	d       *dwarf.Data
	aranges []byte // .debug_aranges, nil when absent

	indexed bool
	cus     []cuRange // sorted by lo
	maxHi   []uint64  // maxHi[i] is the largest hi of cus[:i+1]

	units map[dwarf.Offset]*unit
	names map[dwarf.Offset]funcName // resolved function names by DIE offset
	warn  func(format string, args ...any)
	name  string
}

type cuRange struct {
	lo, hi uint64
	cu     dwarf.Offset // offset of the unit's compile_unit entry
}

// unit is the decoded part of one compilation unit that symbolizing needs:
// its line table, and the address ranges of its functions. The calls inlined
// into a function are decoded when an address first falls in it.
type unit struct {
	name  string    // the unit's source file: for code its line table misses
	files []string  // the line table's file names, by index
	rows  []lineRow // sorted by address
	funcs []funcRange
	maxHi []uint64 // maxHi[i] is the largest hi of funcs[:i+1]
	fns   []function
}

type lineRow struct {
	addr uint64
	file string
	line int32
	end  bool // end of a sequence: no line from here on
}

// funcRange is one address range of fns[fn].
type funcRange struct {
	lo, hi uint64
	fn     int32
}

// function is a concrete DW_TAG_subprogram.
type function struct {
	off     dwarf.Offset // of its entry
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
	name     string       // the entry's own DW_AT_name
	link     string       // its linkage name
	origin   dwarf.Offset // DW_AT_abstract_origin or DW_AT_specification; 0 if none
}

// openDWARF reads f's DWARF sections. Decoding happens in lookups, which
// report bad DWARF through warn, naming the module name.
func openDWARF(f *elfFile, name string, warn func(string, ...any)) (dw *dwarfInfo, err error) {
	defer func() {
		if p := recover(); p != nil {
			dw, err = nil, fmt.Errorf("corrupt DWARF: %v", p)
		}
	}()
	d, aranges, err := readDWARF(f.File, f.r)
	if err != nil {
		return nil, err
	}
	return &dwarfInfo{d: d, aranges: aranges, units: map[dwarf.Offset]*unit{}, names: map[dwarf.Offset]funcName{},
		warn: warn, name: name}, nil
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
	if !dw.indexed {
		dw.indexed = true
		dw.index()
	}
	i := searchRanges(len(dw.cus), func(i int) uint64 { return dw.cus[i].lo }, dw.maxHi, va,
		func(i int) bool { return va < dw.cus[i].hi })
	if i < 0 {
		return nil
	}
	cu := dw.cus[i].cu
	u := dw.units[cu]
	if u == nil {
		u = dw.decodeUnit(cu)
		dw.units[cu] = u
	}
	return dw.resolve(u, va, demangle)
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

// index builds the address-to-unit index. It reads .debug_aranges, which
// names units by the offset of their header, and the first entry of every
// unit (cheap: Reader.SkipChildren jumps to the next unit), which gives each
// unit's entry offset and, for units that .debug_aranges misses, its ranges.
func (dw *dwarfInfo) index() {
	type cuEntry struct {
		off    dwarf.Offset
		ranges [][2]uint64
	}
	var units []cuEntry
	r := forward{r: dw.d.Reader(), last: -1}
	for {
		e, err := r.next()
		if err != nil {
			dw.warn("%s: DWARF units: %v", dw.name, err)
			break
		}
		if e == nil {
			break
		}
		if e.Tag == dwarf.TagCompileUnit || e.Tag == dwarf.TagPartialUnit {
			rs, _ := dw.d.Ranges(e)
			units = append(units, cuEntry{e.Offset, rs})
		}
		r.r.SkipChildren()
	}
	covered := map[dwarf.Offset]bool{}
	for _, a := range parseAranges(dw.aranges) {
		// The unit whose entry follows the header a names.
		i := sort.Search(len(units), func(i int) bool { return units[i].off > a.info })
		if i == len(units) {
			continue
		}
		dw.cus = append(dw.cus, cuRange{a.lo, a.hi, units[i].off})
		covered[units[i].off] = true
	}
	for _, u := range units {
		if covered[u.off] {
			continue
		}
		for _, rg := range u.ranges {
			if rg[0] < rg[1] {
				dw.cus = append(dw.cus, cuRange{rg[0], rg[1], u.off})
			}
		}
	}
	sort.Slice(dw.cus, func(i, j int) bool { return dw.cus[i].lo < dw.cus[j].lo })
	dw.maxHi = make([]uint64, len(dw.cus))
	var hi uint64
	for i, c := range dw.cus {
		hi = max(hi, c.hi)
		dw.maxHi[i] = hi
	}
}

type arange struct {
	lo, hi uint64
	info   dwarf.Offset // offset of the unit's header in .debug_info
}

// parseAranges decodes .debug_aranges. It stops at the first malformed set
// and returns what came before.
func parseAranges(b []byte) []arange {
	var out []arange
	le := binary.LittleEndian
	for len(b) >= 4 {
		set := b
		length, hdr := uint64(le.Uint32(b)), 4
		dwarf64 := false
		if length == 0xffffffff {
			if len(b) < 12 {
				break
			}
			length, hdr, dwarf64 = le.Uint64(b[4:]), 12, true
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
		var info uint64
		if dwarf64 {
			info = le.Uint64(body[2:])
		} else {
			info = uint64(le.Uint32(body[2:]))
		}
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
			var lo, n uint64
			if asize == 8 {
				lo, n = le.Uint64(tuples), le.Uint64(tuples[8:])
			} else {
				lo, n = uint64(le.Uint32(tuples)), uint64(le.Uint32(tuples[4:]))
			}
			tuples = tuples[tuple:]
			if lo == 0 && n == 0 {
				break
			}
			if n > 0 && lo+n > lo {
				out = append(out, arange{lo, lo + n, dwarf.Offset(info)})
			}
		}
	}
	return out
}

// decodeUnit reads the line table and the function tree of the unit whose
// compile_unit entry is at off.
func (dw *dwarfInfo) decodeUnit(off dwarf.Offset) (u *unit) {
	u = &unit{}
	defer func() {
		if p := recover(); p != nil {
			dw.warn("%s: corrupt DWARF in unit at %#x: %v", dw.name, off, p)
			u = &unit{}
		}
	}()
	r := dw.d.Reader()
	r.Seek(off)
	cu, err := r.Next()
	if err != nil || cu == nil {
		dw.warn("%s: DWARF unit at %#x: %v", dw.name, off, err)
		return u
	}
	u.name, _ = cu.Val(dwarf.AttrName).(string)
	if dir, _ := cu.Val(dwarf.AttrCompDir).(string); dir != "" && u.name != "" && !path.IsAbs(u.name) {
		u.name = path.Join(dir, u.name)
	}
	dw.decodeLines(u, cu)
	if cu.Children {
		dw.decodeFuncs(u, r, cu.Offset)
	}
	return u
}

func (dw *dwarfInfo) decodeLines(u *unit, cu *dwarf.Entry) {
	lr, err := dw.d.LineReader(cu)
	if err != nil {
		dw.warn("%s: DWARF line table: %v", dw.name, err)
		return
	}
	if lr == nil {
		return
	}
	var e dwarf.LineEntry
	for {
		if err := lr.Next(&e); err != nil {
			if err != io.EOF {
				// Keep what was read before.
				dw.warn("%s: DWARF line table: %v", dw.name, err)
			}
			break
		}
		row := lineRow{addr: e.Address, line: int32(e.Line), end: e.EndSequence}
		if e.File != nil {
			row.file = e.File.Name
		}
		u.rows = append(u.rows, row)
	}
	// Sequences may come in any order; within one, addresses only grow. At
	// an address where one sequence ends and another begins, the end sorts
	// first so that the beginning wins.
	sort.SliceStable(u.rows, func(i, j int) bool {
		a, b := &u.rows[i], &u.rows[j]
		if a.addr != b.addr {
			return a.addr < b.addr
		}
		return a.end && !b.end
	})
	for _, f := range lr.Files() {
		name := ""
		if f != nil {
			name = f.Name
		}
		u.files = append(u.files, name)
	}
}

// decodeFuncs reads the functions of a unit, r positioned after its
// compile_unit entry: their entries and ranges only, skipping their children
// (the sibling attribute makes that cheap), and descending only into
// namespaces, where C++ and Rust put functions.
func (dw *dwarfInfo) decodeFuncs(u *unit, rd *dwarf.Reader, cu dwarf.Offset) {
	r := forward{r: rd, last: int64(cu)}
	depth := 1
	for depth > 0 {
		e, err := r.next()
		if err != nil {
			dw.warn("%s: DWARF entries: %v", dw.name, err)
			break
		}
		if e == nil {
			break
		}
		switch e.Tag {
		case 0:
			depth--
			continue
		case dwarf.TagSubprogram:
			if ranges, _ := dw.d.Ranges(e); len(ranges) > 0 {
				fn := int32(len(u.fns))
				u.fns = append(u.fns, function{off: e.Offset})
				for _, rg := range ranges {
					if rg[0] < rg[1] {
						u.funcs = append(u.funcs, funcRange{rg[0], rg[1], fn})
					}
				}
			}
		case dwarf.TagNamespace, dwarf.TagModule:
			if e.Children {
				depth++
				continue
			}
		}
		if e.Children {
			r.r.SkipChildren()
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

// forward reads entries only forward. Go's Reader follows sibling
// attributes, and a corrupt one can send it back to an entry it has read:
// forever, without this.
// A corrupt unit can also make it return null entries without end.
type forward struct {
	r     *dwarf.Reader
	last  int64 // offset of the last entry read; -1 for none
	nulls int   // null entries read in a row
}

var (
	errBackward = errors.New("corrupt sibling attribute: entries out of order")
	errNulls    = errors.New("corrupt unit: endless null entries")
)

// maxNulls bounds the null entries read in a row: each closes one level of
// nesting, and real trees are far shallower.
const maxNulls = 4096

func (f *forward) next() (*dwarf.Entry, error) {
	e, err := f.r.Next()
	if err != nil || e == nil {
		return e, err
	}
	if e.Tag == 0 { // null entries carry no offset
		if f.nulls++; f.nulls > maxNulls {
			return nil, errNulls
		}
		return e, nil
	}
	f.nulls = 0
	if int64(e.Offset) <= f.last {
		return nil, errBackward
	}
	f.last = int64(e.Offset)
	return e, nil
}

// decodeFunction reads the tree of a function's entry: its ranges and the
// calls inlined into it, at any depth of lexical blocks and inlining.
func (dw *dwarfInfo) decodeFunction(fn *function) {
	fn.decoded = true
	r := dw.d.Reader()
	r.Seek(fn.off)
	e, err := r.Next()
	if err != nil || e == nil {
		dw.warn("%s: DWARF function at %#x: %v", dw.name, fn.off, err)
		return
	}
	ranges, _ := dw.d.Ranges(e)
	s := newScope(e)
	for _, rg := range ranges {
		if rg[0] < rg[1] {
			s.lo, s.hi = rg[0], rg[1]
			fn.scopes = append(fn.scopes, s)
		}
	}
	if !e.Children {
		return
	}
	type open struct {
		depth int   // tree depth of the inlined call's entry
		inl   int32 // its inline depth
	}
	var stack []open
	fr := forward{r: r, last: int64(e.Offset)}
	depth := 1
	for depth > 0 {
		e, err := fr.next()
		if err != nil {
			dw.warn("%s: DWARF entries: %v", dw.name, err)
			break
		}
		if e == nil {
			break
		}
		if e.Tag == 0 {
			depth--
			continue
		}
		for len(stack) > 0 && stack[len(stack)-1].depth >= depth {
			stack = stack[:len(stack)-1]
		}
		descend := false
		switch e.Tag {
		case dwarf.TagInlinedSubroutine:
			ranges, _ := dw.d.Ranges(e)
			if len(ranges) == 0 {
				break
			}
			s := newScope(e)
			s.depth = 1
			if len(stack) > 0 {
				s.depth = stack[len(stack)-1].inl + 1
			}
			s.callFile = int32(intAttr(e, dwarf.AttrCallFile))
			s.callLine = int32(intAttr(e, dwarf.AttrCallLine))
			for _, rg := range ranges {
				if rg[0] < rg[1] {
					s.lo, s.hi = rg[0], rg[1]
					fn.scopes = append(fn.scopes, s)
				}
			}
			stack = append(stack, open{depth, s.depth})
			descend = true
		case dwarf.TagLexDwarfBlock:
			descend = true
		}
		if e.Children {
			if descend {
				depth++
			} else {
				r.SkipChildren()
			}
		}
	}
}

func newScope(e *dwarf.Entry) scope {
	var s scope
	s.link, _ = e.Val(dwarf.AttrLinkageName).(string)
	if s.link == "" {
		s.link, _ = e.Val(attrMIPSLinkageName).(string)
	}
	s.name, _ = e.Val(dwarf.AttrName).(string)
	if o, ok := e.Val(dwarf.AttrAbstractOrigin).(dwarf.Offset); ok {
		s.origin = o
	} else if o, ok := e.Val(dwarf.AttrSpecification).(dwarf.Offset); ok {
		s.origin = o
	}
	return s
}

// attrMIPSLinkageName is DW_AT_MIPS_linkage_name, the linkage name of GCC
// before DWARF 4.
const attrMIPSLinkageName dwarf.Attr = 0x2007

func intAttr(e *dwarf.Entry, a dwarf.Attr) int64 {
	switch v := e.Val(a).(type) {
	case int64:
		return v
	case uint64:
		return int64(v)
	}
	return 0
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
		dw.decodeFunction(fn)
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
	return u.rows[i].file, int(u.rows[i].line), true
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

func (dw *dwarfInfo) scopeName(s *scope, self dwarf.Offset, demangle bool, depth int) funcName {
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
func (dw *dwarfInfo) nameAt(off dwarf.Offset, demangle bool, depth int) funcName {
	if n, ok := dw.names[off]; ok {
		return n
	}
	if depth > 8 {
		return funcName{}
	}
	r := dw.d.Reader()
	r.Seek(off)
	e, err := r.Next()
	if err != nil || e == nil {
		return funcName{}
	}
	s := newScope(e)
	n := dw.scopeName(&s, off, demangle, depth)
	dw.names[off] = n
	return n
}

func maybeDemangle(name string, demangle bool) string {
	if !demangle {
		return name
	}
	return demangleName(name)
}
