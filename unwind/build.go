package unwind

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"slices"
	"time"
)

// DebugDirs are where Build looks for a separate debug file by build-id
// (<dir>/.build-id/xx/yyyy.debug), as gdb does.
var DebugDirs = []string{"/usr/lib/debug"}

// Build builds the table of the ELF file at path, with the .debug_frame of
// its separate debug file (found by build-id in DebugDirs) when there is one.
func Build(path string) (*Table, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, fmt.Errorf("unwind: %w", err)
	}
	defer f.Close()
	t, err := BuildELF(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return t, nil
}

// BuildELF is Build for a file already open, with the .debug_frame of its
// separate debug file (found by build-id in DebugDirs) when there is one.
func BuildELF(f *elf.File) (*Table, error) {
	var dbg *elf.File
	if id := BuildID(f); len(id) > 1 {
		for _, dir := range DebugDirs {
			p := filepath.Join(dir, ".build-id", hex.EncodeToString(id[:1]), hex.EncodeToString(id[1:])+".debug")
			if d, err := elf.Open(p); err == nil {
				if bytes.Equal(BuildID(d), id) {
					dbg = d
					defer d.Close()
					break
				}
				d.Close()
			}
		}
	}
	return BuildFile(f, dbg)
}

// BuildID returns the file's GNU build-id, or nil.
func BuildID(f *elf.File) []byte {
	for _, s := range f.Sections {
		if s.Type != elf.SHT_NOTE {
			continue
		}
		d, err := s.Data()
		if err != nil {
			continue
		}
		for len(d) >= 12 {
			nameSz, descSz, typ := binary.LittleEndian.Uint32(d), binary.LittleEndian.Uint32(d[4:]), binary.LittleEndian.Uint32(d[8:])
			name, desc := uint64(pad4(nameSz)), uint64(pad4(descSz))
			if 12+name+desc > uint64(len(d)) {
				break
			}
			if typ == 3 && nameSz == 4 && string(d[12:16]) == "GNU\x00" && descSz <= maxBuildID {
				return append([]byte(nil), d[12+name:12+name+uint64(descSz)]...)
			}
			d = d[12+name+desc:]
		}
	}
	return nil
}

func pad4(n uint32) uint32 { return (n + 3) &^ 3 }

// BuildFile builds the table of f from its .eh_frame (and its own
// .debug_frame), adding the FDEs of debug's .debug_frame (a separate debug
// file, may be nil) for code the .eh_frame does not describe.
func BuildFile(f *elf.File, debug *elf.File) (*Table, error) {
	start := time.Now()
	if f.Machine != elf.EM_X86_64 || f.Class != elf.ELFCLASS64 {
		return nil, fmt.Errorf("%w: %s %s", ErrUnsupported, f.Class, f.Machine)
	}
	var eh, dbg []section
	if s := f.Section(".eh_frame"); s != nil && s.Type != elf.SHT_NOBITS {
		d, err := s.Data()
		if err != nil {
			return nil, fmt.Errorf("%w: .eh_frame: %w", ErrBadCFI, err)
		}
		eh = append(eh, section{data: d, addr: s.Addr})
	}
	for _, df := range []*elf.File{f, debug} {
		if df == nil {
			continue
		}
		s := df.Section(".debug_frame")
		if s == nil || s.Type == elf.SHT_NOBITS {
			continue
		}
		d, err := s.Data()
		if err != nil {
			return nil, fmt.Errorf("%w: .debug_frame: %w", ErrBadCFI, err)
		}
		dbg = append(dbg, section{data: d, debug: true})
	}
	if len(eh) == 0 && len(dbg) == 0 {
		return nil, ErrNoCFI
	}
	t, err := build(eh, dbg)
	if err != nil {
		return nil, err
	}
	t.BuildID = BuildID(f)
	t.Stats.BuildTime = time.Since(start)
	return t, nil
}

// build makes a table from .eh_frame sections and .debug_frame sections
// (whose FDEs count only where no .eh_frame FDE covers their code).
func build(eh, dbg []section) (*Table, error) {
	var st Stats
	var fdes []fde
	var err error
	for _, s := range eh {
		st.EhFrame += len(s.data)
		if fdes, err = parseFDEs(s, fdes); err != nil {
			return nil, fmt.Errorf(".eh_frame: %w", err)
		}
	}
	nEh := len(fdes)
	for _, s := range dbg {
		st.DebugFrame += len(s.data)
		if fdes, err = parseFDEs(s, fdes); err != nil {
			return nil, fmt.Errorf(".debug_frame: %w", err)
		}
	}
	fdes = dropCovered(fdes, nEh)
	slices.SortStableFunc(fdes, func(a, b fde) int {
		switch {
		case a.start < b.start:
			return -1
		case a.start > b.start:
			return 1
		}
		return 0
	})
	st.FDEs = len(fdes)
	t := &Table{}
	if len(fdes) > 0 {
		lo, hi := fdes[0].start, fdes[0].end
		for _, x := range fdes {
			hi = max(hi, x.end)
		}
		if hi > 0xffffffff {
			t.Base = lo
		}
		if hi-t.Base > 0xffffffff {
			return nil, fmt.Errorf("%w: code spans %#x..%#x", ErrUnsupported, lo, hi)
		}
	}
	b := builder{base: t.Base, out: make([]Entry, 0, len(fdes)*2)}
	var m machine
	for i := range fdes {
		x := &fdes[i]
		init, err := m.initial(x.cie)
		if err != nil {
			return nil, fmt.Errorf("FDE for %#x: %w", x.start, err)
		}
		m.st = *init
		m.saved = m.saved[:0]
		if err = m.run(x.cie, x, x.prog, init, x.start, x.end, b.row); err != nil {
			return nil, fmt.Errorf("FDE for %#x: %w", x.start, err)
		}
	}
	t.Entries = b.finish()
	for _, e := range t.Entries {
		if e.Kind == KindFallback {
			st.Fallbacks++
		}
	}
	t.Entries = slices.Clip(t.Entries)
	t.Stats = st
	return t, nil
}

// dropCovered removes the .debug_frame FDEs (those from index nEh on) that
// overlap an .eh_frame FDE: .eh_frame is what the runtime itself trusts.
func dropCovered(fdes []fde, nEh int) []fde {
	if nEh == len(fdes) || nEh == 0 {
		return fdes
	}
	eh := slices.Clone(fdes[:nEh])
	slices.SortFunc(eh, func(a, b fde) int {
		if a.start < b.start {
			return -1
		} else if a.start > b.start {
			return 1
		}
		return 0
	})
	out := fdes[:nEh]
	for _, x := range fdes[nEh:] {
		// first .eh_frame FDE ending after x starts
		i, _ := slices.BinarySearchFunc(eh, x.start, func(e fde, a uint64) int {
			if e.end <= a {
				return -1
			}
			return 1
		})
		if i < len(eh) && eh[i].start < x.end {
			continue
		}
		out = append(out, x)
	}
	return out
}

// builder turns rows into merged entries.
type builder struct {
	base uint64
	out  []Entry
	end  uint64 // end of the last row, absolute
}

func (b *builder) push(at uint64, e Entry) {
	e.Addr = uint32(at - b.base)
	if n := len(b.out); n > 0 {
		last := &b.out[n-1]
		if last.Addr == e.Addr {
			*last = e
			if n > 1 && b.out[n-2].sameRule(e) {
				b.out = b.out[:n-1]
			}
			return
		}
		if last.sameRule(e) {
			return
		}
	}
	b.out = append(b.out, e)
}

// row adds the rule st for [from, to); overlaps with earlier rows keep the
// earlier rule.
func (b *builder) row(from, to uint64, st *cfaState) {
	if from < b.end {
		from = b.end
	}
	if from >= to {
		return
	}
	if len(b.out) > 0 && from > b.end {
		b.push(b.end, Entry{Kind: KindFallback}) // a gap no FDE covers
	}
	b.push(from, entryFor(st))
	b.end = to
}

func (b *builder) finish() []Entry {
	if len(b.out) > 0 {
		b.out = append(b.out, Entry{Addr: uint32(b.end - b.base), Kind: KindFallback})
	}
	return b.out
}

// pltExpr is the CFA expression binutils emits for .plt (lazy binding):
// DW_OP_breg7 (rsp) 8; DW_OP_breg16 (rip) 0; DW_OP_lit15; DW_OP_and;
// DW_OP_litN; DW_OP_ge; DW_OP_lit3; DW_OP_shl; DW_OP_plus — N at index 6.
var pltExpr = []byte{0x77, 8, 0x80, 0, 0x3f, 0x1a, 0x30, 0x2a, 0x33, 0x24, 0x22}

// entryFor encodes a row, or says "fallback" when the row does not fit.
func entryFor(st *cfaState) Entry {
	switch st.ra.kind {
	case ruleUndefined:
		return Entry{Kind: KindEnd}
	case ruleOffset:
		if st.ra.off != -8 {
			return Entry{Kind: KindFallback}
		}
	default:
		return Entry{Kind: KindFallback}
	}
	if st.cfaExpr != nil {
		e := st.cfaExpr
		if len(e) == len(pltExpr) && e[6] >= 0x30 && e[6] <= 0x3f &&
			bytes.Equal(e[:6], pltExpr[:6]) && bytes.Equal(e[7:], pltExpr[7:]) {
			return Entry{Kind: KindPLT, CFAOffset: 8, Aux: e[6] - 0x30}
		}
		return Entry{Kind: KindFallback}
	}
	var k Kind
	switch st.cfaReg {
	case regRSP:
		k = KindRSP
	case regRBP:
		k = KindRBP
	default:
		return Entry{Kind: KindFallback}
	}
	if st.cfaOff < 0 || st.cfaOff > 0xffff {
		return Entry{Kind: KindFallback}
	}
	e := Entry{Kind: k, CFAOffset: uint16(st.cfaOff)}
	switch st.rbp.kind {
	case ruleUnspecified, ruleSameValue, ruleUndefined:
	case ruleOffset:
		o := st.rbp.off
		if o >= 0 || o%8 != 0 || o < -128*8 {
			return Entry{Kind: KindFallback}
		}
		e.Aux = uint8(int8(o / 8))
	default:
		return Entry{Kind: KindFallback}
	}
	return e
}
