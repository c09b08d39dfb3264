package symbolize

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// This file reads DWARF entries: abbreviation tables, unit headers and the
// attributes of entries that symbolizing needs, of one unit at a time.
// Package debug/dwarf reads every unit's abbreviation table when it opens a
// file (megabytes of tables for a C library, of which a trace needs a few)
// and wants every section whole in memory: this reader needs only the
// units being read.

// DWARF tags, attributes and forms (DWARF 5, section 7).
const (
	tagLexicalBlock      = 0x0b
	tagCompileUnit       = 0x11
	tagInlinedSubroutine = 0x1d
	tagModule            = 0x1e
	tagSubprogram        = 0x2e
	tagNamespace         = 0x39
	tagPartialUnit       = 0x3c

	atSibling         = 0x01
	atName            = 0x03
	atStmtList        = 0x10
	atLowpc           = 0x11
	atHighpc          = 0x12
	atCompDir         = 0x1b
	atAbstractOrigin  = 0x31
	atSpecification   = 0x47
	atEntrypc         = 0x52
	atRanges          = 0x55
	atCallFile        = 0x58
	atCallLine        = 0x59
	atLinkageName     = 0x6e
	atStrOffsetsBase  = 0x72
	atAddrBase        = 0x73
	atRnglistsBase    = 0x74
	atMIPSLinkageName = 0x2007 // the linkage name of GCC before DWARF 4

	formAddr          = 0x01
	formBlock2        = 0x03
	formBlock4        = 0x04
	formData2         = 0x05
	formData4         = 0x06
	formData8         = 0x07
	formString        = 0x08
	formBlock         = 0x09
	formBlock1        = 0x0a
	formData1         = 0x0b
	formFlag          = 0x0c
	formSdata         = 0x0d
	formStrp          = 0x0e
	formUdata         = 0x0f
	formRefAddr       = 0x10
	formRef1          = 0x11
	formRef2          = 0x12
	formRef4          = 0x13
	formRef8          = 0x14
	formRefUdata      = 0x15
	formIndirect      = 0x16
	formSecOffset     = 0x17
	formExprloc       = 0x18
	formFlagPresent   = 0x19
	formStrx          = 0x1a
	formAddrx         = 0x1b
	formRefSup4       = 0x1c
	formStrpSup       = 0x1d
	formData16        = 0x1e
	formLineStrp      = 0x1f
	formRefSig8       = 0x20
	formImplicitConst = 0x21
	formLoclistx      = 0x22
	formRnglistx      = 0x23
	formRefSup8       = 0x24
	formStrx1         = 0x25
	formStrx2         = 0x26
	formStrx3         = 0x27
	formStrx4         = 0x28
	formAddrx1        = 0x29
	formAddrx2        = 0x2a
	formAddrx3        = 0x2b
	formAddrx4        = 0x2c
	formGNUAddrIndex  = 0x1f01
	formGNUStrIndex   = 0x1f02
	formGNURefAlt     = 0x1f20
	formGNUStrpAlt    = 0x1f21
)

// DWARF 5 unit types.
const (
	utCompile      = 0x01
	utType         = 0x02
	utPartial      = 0x03
	utSkeleton     = 0x04
	utSplitCompile = 0x05
	utSplitType    = 0x06
)

var errShort = errors.New("truncated")

// uleb reads an unsigned LEB128 number at b[i:].
func uleb(b []byte, i int) (uint64, int, error) {
	var v uint64
	for shift := uint(0); i < len(b); shift += 7 {
		c := b[i]
		i++
		if shift < 64 {
			v |= uint64(c&0x7f) << shift
		}
		if c < 0x80 {
			return v, i, nil
		}
	}
	return 0, i, errShort
}

// sleb reads a signed LEB128 number at b[i:].
func sleb(b []byte, i int) (int64, int, error) {
	var v int64
	shift := uint(0)
	for i < len(b) {
		c := b[i]
		i++
		if shift < 64 {
			v |= int64(c&0x7f) << shift
		}
		shift += 7
		if c < 0x80 {
			if shift < 64 && c&0x40 != 0 {
				v |= -1 << shift
			}
			return v, i, nil
		}
	}
	return 0, i, errShort
}

// abbrev is an abbreviation declaration: the shape of the entries that use
// its code.
type abbrev struct {
	tag      uint32
	children bool
	attrs    []attrSpec
}

type attrSpec struct {
	attr, form uint32
	implicit   int64 // the value of DW_FORM_implicit_const
}

// abbrevTable is one unit's abbreviations, by code: codes are usually 1, 2,
// 3, ... in order, and then a slice indexes them.
type abbrevTable struct {
	dense  []abbrev // dense[i] has code i+1
	sparse map[uint64]*abbrev
}

func (t *abbrevTable) get(code uint64) *abbrev {
	if code-1 < uint64(len(t.dense)) {
		return &t.dense[code-1]
	}
	return t.sparse[code]
}

// abbrevLength is an extent length function: the length of the table at
// the start of b, once b holds all of it.
func abbrevLength(b []byte) (uint64, bool, error) {
	n, err := parseAbbrevs(b, nil)
	if err == errShort {
		return 0, false, nil
	}
	return uint64(n), err == nil, err
}

// parseAbbrevs reads the table at the start of b into t (when not nil) and
// returns its length.
func parseAbbrevs(b []byte, t *abbrevTable) (int, error) {
	i := 0
	for {
		code, j, err := uleb(b, i)
		if err != nil {
			return 0, err
		}
		i = j
		if code == 0 {
			return i, nil
		}
		var a abbrev
		tag, j, err := uleb(b, i)
		if err != nil {
			return 0, err
		}
		if j >= len(b) {
			return 0, errShort
		}
		a.tag, a.children, i = uint32(tag), b[j] != 0, j+1
		for {
			attr, j, err := uleb(b, i)
			if err != nil {
				return 0, err
			}
			form, j, err := uleb(b, j)
			if err != nil {
				return 0, err
			}
			i = j
			if attr == 0 && form == 0 {
				break
			}
			s := attrSpec{attr: uint32(attr), form: uint32(form)}
			if form == formImplicitConst {
				if s.implicit, i, err = sleb(b, i); err != nil {
					return 0, err
				}
			}
			if t != nil {
				a.attrs = append(a.attrs, s)
			}
		}
		if t == nil {
			continue
		}
		if code == uint64(len(t.dense))+1 {
			t.dense = append(t.dense, a)
			continue
		}
		if t.sparse == nil {
			t.sparse = map[uint64]*abbrev{}
		}
		if _, dup := t.sparse[code]; !dup && code-1 >= uint64(len(t.dense)) {
			t.sparse[code] = &a
		}
	}
}

// unitHeader is the header of a unit in .debug_info.
type unitHeader struct {
	off       uint64 // of the header in .debug_info
	end       uint64 // offset after the unit
	version   uint16
	unitType  uint8
	addrSize  int
	offSize   int // 4, or 8 for 64-bit DWARF
	abbrevOff uint64
	first     int // offset of the first entry, from off
}

// parseUnitHeader reads the header of the unit at the start of b, which is
// at offset off in .debug_info. b may be just the header's bytes.
func parseUnitHeader(order binary.ByteOrder, b []byte, off uint64) (unitHeader, error) {
	h := unitHeader{off: off, offSize: 4}
	n, ok, err := initialLength(order)(b)
	if err != nil {
		return h, err
	}
	if !ok {
		return h, errShort
	}
	i := 4
	if order.Uint32(b) == 0xffffffff {
		i, h.offSize = 12, 8
	}
	h.end = off + n
	if len(b) < i+2 {
		return h, errShort
	}
	h.version = order.Uint16(b[i:])
	i += 2
	if h.version < 2 || h.version > 5 {
		return h, fmt.Errorf("unit at %#x: unknown DWARF version %d", off, h.version)
	}
	need := i + h.offSize + 1
	if h.version >= 5 {
		need++
	}
	if len(b) < need {
		return h, errShort
	}
	if h.version >= 5 {
		h.unitType, h.addrSize = b[i], int(b[i+1])
		i += 2
		h.abbrevOff = readUint(order, b[i:], h.offSize)
		i += h.offSize
		switch h.unitType {
		case utSkeleton, utSplitCompile:
			i += 8 // dwo_id
		case utType, utSplitType:
			i += 8 + h.offSize // signature, type offset
		}
	} else {
		h.unitType = utCompile
		h.abbrevOff = readUint(order, b[i:], h.offSize)
		h.addrSize = int(b[i+h.offSize])
		i += h.offSize + 1
	}
	if h.addrSize != 4 && h.addrSize != 8 {
		return h, fmt.Errorf("unit at %#x: address size %d", off, h.addrSize)
	}
	if uint64(i) > n {
		return h, fmt.Errorf("unit at %#x: header longer than the unit", off)
	}
	h.first = i
	return h, nil
}

// attrVal is an attribute's form and raw value: an address, a constant, an
// offset or index into another section, the absolute .debug_info offset of
// a reference, or for DW_FORM_string the offset of the string in its unit.
// form 0 means the entry has no such attribute.
type attrVal struct {
	form uint32
	v    uint64
}

func (a attrVal) ok() bool { return a.form != 0 }

// isConst says whether a is of the constant class (as DW_AT_high_pc is when
// it is an offset from DW_AT_low_pc).
func (a attrVal) isConst() bool {
	switch a.form {
	case formData1, formData2, formData4, formData8, formUdata, formSdata, formImplicitConst:
		return true
	}
	return false
}

// int returns a constant's value.
func (a attrVal) int() int64 { return int64(a.v) }

// die is an entry, with the attributes symbolizing reads.
type die struct {
	off      uint64 // in .debug_info
	tag      uint32
	children bool
	sibling  uint64 // absolute; 0 if none

	name, link, compDir                    attrVal
	lowpc, highpc, entrypc, ranges         attrVal
	origin, spec                           attrVal // references, absolute offsets
	callFile, callLine                     attrVal
	stmtList                               attrVal
	strOffsetsBase, addrBase, rnglistsBase attrVal
}

// entry reads the entry at offset pos of unit u's bytes into d and returns
// the offset after it. A null entry has tag 0.
func (u *unit) entry(pos int, d *die) (int, error) {
	*d = die{off: u.off + uint64(pos)}
	code, pos, err := uleb(u.data, pos)
	if err != nil {
		return pos, err
	}
	if code == 0 {
		return pos, nil
	}
	a := u.abbrevs.get(code)
	if a == nil {
		return pos, fmt.Errorf("entry at %#x: unknown abbreviation code %d", d.off, code)
	}
	d.tag, d.children = a.tag, a.children
	for k := range a.attrs {
		s := &a.attrs[k]
		form := s.form
		for n := 0; form == formIndirect; n++ {
			var f uint64
			if f, pos, err = uleb(u.data, pos); err != nil || n > 4 {
				return pos, fmt.Errorf("entry at %#x: bad indirect form", d.off)
			}
			form = uint32(f)
		}
		var v uint64
		if form == formImplicitConst {
			v = uint64(s.implicit)
		} else if v, pos, err = u.value(form, pos); err != nil {
			return pos, fmt.Errorf("entry at %#x: %w", d.off, err)
		}
		val := attrVal{form, v}
		switch s.attr {
		case atSibling:
			d.sibling = v
		case atName:
			d.name = val
		case atLinkageName:
			d.link = val
		case atMIPSLinkageName:
			if !d.link.ok() {
				d.link = val
			}
		case atCompDir:
			d.compDir = val
		case atLowpc:
			d.lowpc = val
		case atHighpc:
			d.highpc = val
		case atEntrypc:
			d.entrypc = val
		case atRanges:
			d.ranges = val
		case atAbstractOrigin:
			d.origin = val
		case atSpecification:
			d.spec = val
		case atCallFile:
			d.callFile = val
		case atCallLine:
			d.callLine = val
		case atStmtList:
			d.stmtList = val
		case atStrOffsetsBase:
			d.strOffsetsBase = val
		case atAddrBase:
			d.addrBase = val
		case atRnglistsBase:
			d.rnglistsBase = val
		}
	}
	if d.sibling != 0 && !isRef(d.sibling, u) {
		d.sibling = 0
	}
	return pos, nil
}

func isRef(off uint64, u *unit) bool { return off > u.off && off < u.end }

// value reads a value of form at pos of u's bytes: see attrVal.
func (u *unit) value(form uint32, pos int) (uint64, int, error) {
	b := u.data
	fixed := func(n int) (uint64, int, error) {
		if pos+n > len(b) || pos+n < pos {
			return 0, pos, errShort
		}
		if n > 8 {
			return 0, pos + n, nil
		}
		return readUint(u.order, b[pos:], n), pos + n, nil
	}
	block := func(n uint64, at int) (uint64, int, error) {
		if n > uint64(len(b)-at) {
			return 0, at, errShort
		}
		return 0, at + int(n), nil
	}
	switch form {
	case formAddr:
		return fixed(u.addrSize)
	case formData1, formRef1, formFlag, formStrx1, formAddrx1:
		v, p, err := fixed(1)
		return u.ref(form, v), p, err
	case formData2, formRef2, formStrx2, formAddrx2:
		v, p, err := fixed(2)
		return u.ref(form, v), p, err
	case formStrx3, formAddrx3:
		return fixed(3)
	case formData4, formRef4, formRefSup4, formStrx4, formAddrx4:
		v, p, err := fixed(4)
		return u.ref(form, v), p, err
	case formData8, formRef8, formRefSig8, formRefSup8:
		v, p, err := fixed(8)
		return u.ref(form, v), p, err
	case formData16:
		return fixed(16)
	case formStrp, formLineStrp, formSecOffset, formStrpSup, formGNURefAlt, formGNUStrpAlt:
		return fixed(u.offSize)
	case formRefAddr:
		if u.version <= 2 {
			return fixed(u.addrSize)
		}
		return fixed(u.offSize)
	case formUdata, formRefUdata, formStrx, formAddrx, formLoclistx, formRnglistx, formGNUAddrIndex, formGNUStrIndex:
		v, p, err := uleb(b, pos)
		return u.ref(form, v), p, err
	case formSdata:
		v, p, err := sleb(b, pos)
		return uint64(v), p, err
	case formString:
		for i := pos; i < len(b); i++ {
			if b[i] == 0 {
				return uint64(pos), i + 1, nil
			}
		}
		return 0, pos, errShort
	case formFlagPresent:
		return 1, pos, nil
	case formBlock1:
		n, p, err := fixed(1)
		if err != nil {
			return 0, p, err
		}
		return block(n, p)
	case formBlock2:
		n, p, err := fixed(2)
		if err != nil {
			return 0, p, err
		}
		return block(n, p)
	case formBlock4:
		n, p, err := fixed(4)
		if err != nil {
			return 0, p, err
		}
		return block(n, p)
	case formBlock, formExprloc:
		n, p, err := uleb(b, pos)
		if err != nil {
			return 0, p, err
		}
		return block(n, p)
	}
	return 0, pos, fmt.Errorf("unknown form %#x", form)
}

// ref makes a unit-relative reference absolute.
func (u *unit) ref(form uint32, v uint64) uint64 {
	switch form {
	case formRef1, formRef2, formRef4, formRef8, formRefUdata:
		return u.off + v
	}
	return v
}

// isLocalRef says whether a reference of form points into .debug_info (as
// opposed to a type unit's signature or a supplementary file).
func isLocalRef(form uint32) bool {
	switch form {
	case formRef1, formRef2, formRef4, formRef8, formRefUdata, formRefAddr:
		return true
	}
	return false
}

// skip returns the offset after the entry at pos (read into d) and all its
// children: its sibling when it names one, else after walking them.
func (u *unit) skip(pos int, d *die) (int, error) {
	if !d.children {
		return pos, nil
	}
	if d.sibling != 0 {
		if d.sibling <= d.off {
			return pos, fmt.Errorf("entry at %#x: sibling %#x before it", d.off, d.sibling)
		}
		return int(d.sibling - u.off), nil
	}
	var c die
	for depth := 1; depth > 0; {
		if pos >= len(u.data) {
			return pos, errShort
		}
		next, err := u.entry(pos, &c)
		if err != nil {
			return next, err
		}
		pos = next
		switch {
		case c.tag == 0:
			depth--
		case c.children:
			if c.sibling != 0 && c.sibling > c.off {
				pos = int(c.sibling - u.off)
			} else {
				depth++
			}
		}
	}
	return pos, nil
}
