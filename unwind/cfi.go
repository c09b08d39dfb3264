package unwind

import (
	"encoding/binary"
	"fmt"
)

// This file parses DWARF call frame information (.eh_frame and
// .debug_frame) and runs the CFA programs of its FDEs. It is written here
// rather than taken from delve's pkg/dwarf/frame because the builder needs
// rows streamed straight into compact entries for the three registers an
// x86-64 unwinder uses (CFA, RBP, return address): delve materialises a
// full per-FDE register table (a map per row) and panics on some bad input,
// which costs memory on libpython's ~30k FDEs and breaks "readers never
// panic".

// DWARF register numbers on x86-64 (System V psABI, figure 3.36).
const (
	regRBP = 6
	regRSP = 7
	regRA  = 16
)

// Register rule kinds.
const (
	ruleUnspecified = iota // not mentioned: same as undefined for callee-saved use (the caller's value)
	ruleUndefined
	ruleSameValue
	ruleOffset // saved at CFA+off
	ruleValOffset
	ruleRegister
	ruleExpression
	ruleValExpression
)

type regRule struct {
	kind uint8
	off  int64
}

// cfaState is one row of the CFA table, restricted to what the entries need.
type cfaState struct {
	cfaReg  uint64
	cfaOff  int64
	cfaExpr []byte // non-nil: CFA is an expression (a slice of the section)
	rbp, ra regRule
}

// reader reads a section without ever panicking: a read past the end sets
// err and returns zeros.
type reader struct {
	b   []byte
	off int
	err error
}

func (r *reader) fail(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: "+format, append([]any{ErrBadCFI}, args...)...)
	}
}

func (r *reader) need(n int) bool {
	if r.err != nil {
		return false
	}
	if n < 0 || r.off+n > len(r.b) || r.off+n < r.off {
		r.fail("truncated at offset %#x", r.off)
		return false
	}
	return true
}

// zeros is what fixed returns past the end: reads there yield 0.
var zeros [8]byte

// fixed consumes the next n (≤ 8) bytes of a fixed-width field, or returns
// n zero bytes once the section is exhausted.
func (r *reader) fixed(n int) []byte {
	if !r.need(n) {
		return zeros[:n]
	}
	v := r.b[r.off : r.off+n]
	r.off += n
	return v
}

func (r *reader) u8() uint8   { return r.fixed(1)[0] }
func (r *reader) u16() uint16 { return binary.LittleEndian.Uint16(r.fixed(2)) }
func (r *reader) u32() uint32 { return binary.LittleEndian.Uint32(r.fixed(4)) }
func (r *reader) u64() uint64 { return binary.LittleEndian.Uint64(r.fixed(8)) }

func (r *reader) uleb() uint64 {
	var v uint64
	var shift uint
	for {
		b := r.u8()
		if r.err != nil {
			return 0
		}
		if shift < 64 {
			v |= uint64(b&0x7f) << shift
		}
		shift += 7
		if b&0x80 == 0 {
			return v
		}
		if shift > 70 {
			r.fail("LEB128 too long at offset %#x", r.off)
			return 0
		}
	}
}

func (r *reader) sleb() int64 {
	var v int64
	var shift uint
	var b uint8
	for {
		b = r.u8()
		if r.err != nil {
			return 0
		}
		if shift < 64 {
			v |= int64(b&0x7f) << shift
		}
		shift += 7
		if b&0x80 == 0 {
			break
		}
		if shift > 70 {
			r.fail("LEB128 too long at offset %#x", r.off)
			return 0
		}
	}
	if shift < 64 && b&0x40 != 0 {
		v |= -1 << shift
	}
	return v
}

func (r *reader) bytes(n uint64) []byte {
	if n > uint64(len(r.b)) || !r.need(int(n)) {
		r.fail("block of %d bytes past the end at offset %#x", n, r.off)
		return nil
	}
	v := r.b[r.off : r.off+int(n) : r.off+int(n)]
	r.off += int(n)
	return v
}

func (r *reader) cstring() string {
	for i := r.off; i < len(r.b); i++ {
		if r.b[i] == 0 {
			s := string(r.b[r.off:i])
			r.off = i + 1
			return s
		}
	}
	r.fail("unterminated string at offset %#x", r.off)
	return ""
}

// Pointer encodings (DW_EH_PE_*).
const (
	peAbsptr  = 0x00
	peUleb128 = 0x01
	peUdata2  = 0x02
	peUdata4  = 0x03
	peUdata8  = 0x04
	peSleb128 = 0x09
	peSdata2  = 0x0a
	peSdata4  = 0x0b
	peSdata8  = 0x0c
	pePcrel   = 0x10
	peOmit    = 0xff
)

// pointer reads a pointer in encoding enc; secAddr is the section's virtual
// address (for pc-relative values). rangeOnly reads the value without its
// application (an FDE's address range).
func (r *reader) pointer(enc uint8, secAddr uint64, rangeOnly bool) uint64 {
	if enc == peOmit {
		return 0
	}
	fieldAddr := secAddr + uint64(r.off)
	var v uint64
	switch enc & 0x0f {
	case peAbsptr, peUdata8, peSdata8:
		v = r.u64()
	case peUleb128:
		v = r.uleb()
	case peUdata2:
		v = uint64(r.u16())
	case peSdata2:
		v = uint64(int64(int16(r.u16())))
	case peUdata4:
		v = uint64(r.u32())
	case peSdata4:
		v = uint64(int64(int32(r.u32())))
	case peSleb128:
		v = uint64(r.sleb())
	default:
		r.fail("pointer encoding %#x", enc)
		return 0
	}
	if rangeOnly {
		return v
	}
	switch enc & 0x70 {
	case 0:
	case pePcrel:
		v += fieldAddr
	default:
		r.fail("pointer application %#x", enc&0x70)
	}
	if enc&0x80 != 0 {
		r.fail("indirect pointer encoding %#x", enc)
	}
	return v
}

// cie is a parsed Common Information Entry.
type cie struct {
	codeAlign uint64
	dataAlign int64
	raReg     uint64
	fdeEnc    uint8
	hasAug    bool // 'z': FDEs have an augmentation length
	initial   []byte
	init      cfaState // state after the initial instructions
	ready     bool
}

// fde is an FDE located but not yet interpreted.
type fde struct {
	start, end uint64
	cie        *cie
	prog       []byte
	secAddr    uint64 // for DW_CFA_set_loc with pc-relative encodings
	progOff    int    // offset of prog in the section
}

// section describes one CFI section to parse.
type section struct {
	data  []byte
	addr  uint64
	debug bool // .debug_frame (else .eh_frame)
}

// parseFDEs locates every FDE of the section and parses the CIEs they use.
func parseFDEs(s section, out []fde) ([]fde, error) {
	cies := map[int]*cie{}
	r := &reader{b: s.data}
	for r.off < len(r.b) && r.err == nil {
		entryOff := r.off
		length := uint64(r.u32())
		is64 := false
		if length == 0xffffffff {
			length = r.u64()
			is64 = true
		}
		if r.err != nil {
			break
		}
		if length == 0 {
			if s.debug {
				continue
			}
			break // .eh_frame terminator
		}
		bodyOff := r.off
		if length > uint64(len(r.b)-bodyOff) {
			r.fail("entry at %#x: length %d past the section's end", entryOff, length)
			break
		}
		end := bodyOff + int(length)
		idOff := r.off
		var id uint64
		if is64 {
			id = r.u64()
		} else {
			id = uint64(r.u32())
		}
		isCIE := (!s.debug && id == 0) || (s.debug && ((!is64 && id == 0xffffffff) || (is64 && id == ^uint64(0))))
		if isCIE {
			r.off = end
			continue
		}
		var cieOff int
		if s.debug {
			cieOff = int(id)
			if id > uint64(len(r.b)) {
				r.fail("FDE at %#x: CIE pointer %#x outside the section", entryOff, id)
				break
			}
		} else {
			if id > uint64(idOff) {
				r.fail("FDE at %#x: CIE pointer %#x before the section", entryOff, id)
				break
			}
			cieOff = idOff - int(id)
		}
		c, ok := cies[cieOff]
		if !ok {
			var err error
			c, err = parseCIE(s, cieOff)
			if err != nil {
				return out, fmt.Errorf("FDE at %#x: %w", entryOff, err)
			}
			cies[cieOff] = c
		}
		fr := &reader{b: s.data[:end], off: r.off}
		var start, size uint64
		if s.debug {
			start = fr.u64()
			size = fr.u64()
		} else {
			start = fr.pointer(c.fdeEnc, s.addr, false)
			size = fr.pointer(c.fdeEnc&0x0f, s.addr, true)
		}
		if c.hasAug {
			n := fr.uleb()
			fr.bytes(n)
		}
		if fr.err != nil {
			return out, fmt.Errorf("FDE at %#x: %w", entryOff, fr.err)
		}
		r.off = end
		if size == 0 || start == 0 || start+size < start {
			continue // discarded or empty: describes no code
		}
		out = append(out, fde{start: start, end: start + size, cie: c, prog: s.data[fr.off:end:end], secAddr: s.addr, progOff: fr.off})
	}
	if r.err != nil {
		return out, r.err
	}
	return out, nil
}

func parseCIE(s section, off int) (*cie, error) {
	r := &reader{b: s.data, off: off}
	length := uint64(r.u32())
	is64 := false
	if length == 0xffffffff {
		length = r.u64()
		is64 = true
	}
	if r.err != nil || length > uint64(len(r.b)-r.off) {
		return nil, fmt.Errorf("%w: CIE at %#x: bad length", ErrBadCFI, off)
	}
	end := r.off + int(length)
	r.b = r.b[:end]
	var id uint64
	if is64 {
		id = r.u64()
	} else {
		id = uint64(r.u32())
	}
	if (!s.debug && id != 0) || (s.debug && id != 0xffffffff && id != ^uint64(0)) {
		return nil, fmt.Errorf("%w: CIE at %#x: not a CIE (id %#x)", ErrBadCFI, off, id)
	}
	c := &cie{fdeEnc: peAbsptr}
	version := r.u8()
	if version != 1 && version != 3 && version != 4 {
		return nil, fmt.Errorf("%w: CIE at %#x: version %d", ErrBadCFI, off, version)
	}
	aug := r.cstring()
	if version == 4 {
		if addrSize := r.u8(); addrSize != 8 && r.err == nil {
			return nil, fmt.Errorf("%w: CIE at %#x: address size %d", ErrBadCFI, off, addrSize)
		}
		r.u8() // segment selector size
	}
	c.codeAlign = r.uleb()
	c.dataAlign = r.sleb()
	if version == 1 {
		c.raReg = uint64(r.u8())
	} else {
		c.raReg = r.uleb()
	}
	if len(aug) > 0 && aug[0] == 'z' {
		c.hasAug = true
		n := r.uleb()
		ar := &reader{b: r.bytes(n)}
		for _, ch := range aug[1:] {
			switch ch {
			case 'R':
				c.fdeEnc = ar.u8()
			case 'L':
				ar.u8()
			case 'P':
				enc := ar.u8()
				ar.pointer(enc&0x7f, 0, true)
			case 'S', 'B', 'G':
			default:
				ar.fail("augmentation %q", aug)
			}
		}
		if ar.err != nil {
			return nil, fmt.Errorf("CIE at %#x: %w", off, ar.err)
		}
	} else if aug != "" {
		return nil, fmt.Errorf("%w: CIE at %#x: augmentation %q", ErrBadCFI, off, aug)
	}
	if r.err != nil {
		return nil, fmt.Errorf("CIE at %#x: %w", off, r.err)
	}
	if c.codeAlign == 0 {
		return nil, fmt.Errorf("%w: CIE at %#x: code alignment 0", ErrBadCFI, off)
	}
	if c.raReg != regRA {
		return nil, fmt.Errorf("%w: CIE at %#x: return address column %d, not x86-64's %d", ErrBadCFI, off, c.raReg, regRA)
	}
	c.initial = r.b[r.off:end:end]
	return c, nil
}

// DW_CFA_* opcodes.
const (
	cfaAdvanceLoc        = 0x40
	cfaOffset            = 0x80
	cfaRestore           = 0xc0
	cfaNop               = 0x00
	cfaSetLoc            = 0x01
	cfaAdvanceLoc1       = 0x02
	cfaAdvanceLoc2       = 0x03
	cfaAdvanceLoc4       = 0x04
	cfaOffsetExtended    = 0x05
	cfaRestoreExtended   = 0x06
	cfaUndefined         = 0x07
	cfaSameValue         = 0x08
	cfaRegister          = 0x09
	cfaRememberState     = 0x0a
	cfaRestoreState      = 0x0b
	cfaDefCFA            = 0x0c
	cfaDefCFARegister    = 0x0d
	cfaDefCFAOffset      = 0x0e
	cfaDefCFAExpression  = 0x0f
	cfaExpression        = 0x10
	cfaOffsetExtendedSF  = 0x11
	cfaDefCFASF          = 0x12
	cfaDefCFAOffsetSF    = 0x13
	cfaValOffset         = 0x14
	cfaValOffsetSF       = 0x15
	cfaValExpression     = 0x16
	cfaGNUArgsSize       = 0x2e
	cfaGNUNegOffsetExtSF = 0x2f
)

// maxRemember bounds DW_CFA_remember_state nesting: real code nests a few
// levels; a hostile section could otherwise grow the stack without end.
const maxRemember = 64

// machine runs CFA programs. One is reused for every FDE of a build.
type machine struct {
	st    cfaState
	saved []cfaState
}

// setReg applies a rule to register reg if it is one the entries track.
func (m *machine) setReg(reg uint64, rr regRule) {
	switch reg {
	case regRBP:
		m.st.rbp = rr
	case regRA:
		m.st.ra = rr
	}
}

// run interprets prog from location loc. For every row it calls emit(from,
// to, state) with the half-open address range the row covers; the last row
// ends at end. With emit nil it only computes the state (CIE initial
// instructions). init is the state DW_CFA_restore returns to.
func (m *machine) run(c *cie, f *fde, prog []byte, init *cfaState, loc, end uint64, emit func(from, to uint64, st *cfaState)) error {
	r := &reader{b: prog}
	row := func(next uint64) {
		if emit != nil && next > loc {
			to := next
			if to > end {
				to = end
			}
			if to > loc {
				emit(loc, to, &m.st)
			}
		}
		if next > loc || emit == nil {
			loc = next
		}
	}
	for r.off < len(r.b) && r.err == nil {
		op := r.u8()
		switch op & 0xc0 {
		case cfaAdvanceLoc:
			row(loc + uint64(op&0x3f)*c.codeAlign)
			continue
		case cfaOffset:
			m.setReg(uint64(op&0x3f), regRule{ruleOffset, int64(r.uleb()) * c.dataAlign})
			continue
		case cfaRestore:
			m.restore(uint64(op&0x3f), init)
			continue
		}
		switch op {
		case cfaNop:
		case cfaSetLoc:
			if f == nil {
				r.fail("DW_CFA_set_loc in a CIE")
				break
			}
			var next uint64
			if f.cie.fdeEnc == peAbsptr {
				next = r.u64()
			} else {
				// the field's address is its offset in the section
				base := f.secAddr + uint64(f.progOff)
				next = r.pointer(f.cie.fdeEnc, base, false)
			}
			if next < loc {
				r.fail("DW_CFA_set_loc backwards")
				break
			}
			row(next)
		case cfaAdvanceLoc1:
			row(loc + uint64(r.u8())*c.codeAlign)
		case cfaAdvanceLoc2:
			row(loc + uint64(r.u16())*c.codeAlign)
		case cfaAdvanceLoc4:
			row(loc + uint64(r.u32())*c.codeAlign)
		case cfaOffsetExtended:
			reg := r.uleb()
			m.setReg(reg, regRule{ruleOffset, int64(r.uleb()) * c.dataAlign})
		case cfaRestoreExtended:
			m.restore(r.uleb(), init)
		case cfaUndefined:
			m.setReg(r.uleb(), regRule{kind: ruleUndefined})
		case cfaSameValue:
			m.setReg(r.uleb(), regRule{kind: ruleSameValue})
		case cfaRegister:
			reg := r.uleb()
			m.setReg(reg, regRule{ruleRegister, int64(r.uleb())})
		case cfaRememberState:
			if len(m.saved) >= maxRemember {
				r.fail("DW_CFA_remember_state nested deeper than %d", maxRemember)
				break
			}
			m.saved = append(m.saved, m.st)
		case cfaRestoreState:
			if len(m.saved) == 0 {
				r.fail("DW_CFA_restore_state without remember_state")
				break
			}
			m.st = m.saved[len(m.saved)-1]
			m.saved = m.saved[:len(m.saved)-1]
		case cfaDefCFA:
			m.st.cfaReg = r.uleb()
			m.st.cfaOff = int64(r.uleb())
			m.st.cfaExpr = nil
		case cfaDefCFARegister:
			m.st.cfaReg = r.uleb()
			m.st.cfaExpr = nil
		case cfaDefCFAOffset:
			m.st.cfaOff = int64(r.uleb())
		case cfaDefCFAExpression:
			m.st.cfaExpr = r.bytes(r.uleb())
			if m.st.cfaExpr == nil {
				m.st.cfaExpr = []byte{}
			}
		case cfaExpression:
			reg := r.uleb()
			r.bytes(r.uleb())
			m.setReg(reg, regRule{kind: ruleExpression})
		case cfaOffsetExtendedSF:
			reg := r.uleb()
			m.setReg(reg, regRule{ruleOffset, r.sleb() * c.dataAlign})
		case cfaDefCFASF:
			m.st.cfaReg = r.uleb()
			m.st.cfaOff = r.sleb() * c.dataAlign
			m.st.cfaExpr = nil
		case cfaDefCFAOffsetSF:
			m.st.cfaOff = r.sleb() * c.dataAlign
		case cfaValOffset:
			reg := r.uleb()
			m.setReg(reg, regRule{ruleValOffset, int64(r.uleb()) * c.dataAlign})
		case cfaValOffsetSF:
			reg := r.uleb()
			m.setReg(reg, regRule{ruleValOffset, r.sleb() * c.dataAlign})
		case cfaValExpression:
			reg := r.uleb()
			r.bytes(r.uleb())
			m.setReg(reg, regRule{kind: ruleValExpression})
		case cfaGNUArgsSize:
			r.uleb()
		case cfaGNUNegOffsetExtSF:
			reg := r.uleb()
			m.setReg(reg, regRule{ruleOffset, -int64(r.uleb()) * c.dataAlign})
		default:
			r.fail("DW_CFA opcode %#x", op)
		}
	}
	if r.err != nil {
		return r.err
	}
	if emit != nil {
		row(end)
	}
	return nil
}

func (m *machine) restore(reg uint64, init *cfaState) {
	switch reg {
	case regRBP:
		m.st.rbp = init.rbp
	case regRA:
		m.st.ra = init.ra
	}
}

// initial computes (once) a CIE's state after its initial instructions.
func (m *machine) initial(c *cie) (*cfaState, error) {
	if c.ready {
		return &c.init, nil
	}
	m.st = cfaState{}
	m.saved = m.saved[:0]
	if err := m.run(c, nil, c.initial, &m.st, 0, 0, nil); err != nil {
		return nil, fmt.Errorf("CIE initial instructions: %w", err)
	}
	c.init = m.st
	c.ready = true
	return &c.init, nil
}
