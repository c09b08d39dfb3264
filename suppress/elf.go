package suppress

import (
	"debug/elf"
	"encoding/binary"
	"path/filepath"
	"sort"
)

// elfCache answers, per module file, whether an offset lies in one of the
// module's static constructors: the functions its .init_array lists. A
// library stripped to its dynamic symbols names none of them (libstdc++'s
// emergency pool is made by one), but every function has an FDE in
// .eh_frame_hdr's table, which gives where each starts.
type elfCache struct {
	sysroot string
	mods    map[string]*initFuncs // by module path; nil when unreadable
}

type initFuncs struct {
	loads  []elf.ProgHeader // PT_LOAD
	starts []uint64         // FDE start addresses, ascending
	init   map[uint64]bool  // the .init_array entries
}

func newELFCache(sysroot string) *elfCache {
	return &elfCache{sysroot: sysroot, mods: map[string]*initFuncs{}}
}

// inStaticInit reports whether the return address at file offset off of
// module lies in a function the module's .init_array lists.
func (c *elfCache) inStaticInit(module string, off uint64) bool {
	if module == "" || off == 0 {
		return false
	}
	m, ok := c.mods[module]
	if !ok {
		p := module
		if c.sysroot != "" {
			p = filepath.Join(c.sysroot, module)
		}
		m = readInitFuncs(p)
		c.mods[module] = m
	}
	if m == nil || len(m.init) == 0 {
		return false
	}
	var addr uint64
	found := false
	for _, l := range m.loads {
		if off >= l.Off && off < l.Off+l.Filesz {
			addr, found = off-l.Off+l.Vaddr, true
			break
		}
	}
	if !found {
		return false
	}
	// A return address follows its call: the call is at addr-1.
	i := sort.Search(len(m.starts), func(i int) bool { return m.starts[i] > addr-1 }) - 1
	return i >= 0 && m.init[m.starts[i]]
}

// readInitFuncs reads what inStaticInit needs from the ELF file at p; nil
// when the file cannot be read or lacks the sections.
func readInitFuncs(p string) *initFuncs {
	f, err := elf.Open(p)
	if err != nil {
		return nil
	}
	defer f.Close()
	if f.Class != elf.ELFCLASS64 || f.ByteOrder != binary.LittleEndian {
		return nil
	}
	m := &initFuncs{init: map[uint64]bool{}}
	for _, pr := range f.Progs {
		if pr.Type == elf.PT_LOAD {
			m.loads = append(m.loads, pr.ProgHeader)
		}
	}
	ia := f.Section(".init_array")
	hdr := f.Section(".eh_frame_hdr")
	if ia == nil || hdr == nil {
		return nil
	}
	data, err := ia.Data()
	if err != nil {
		return nil
	}
	for i := 0; i+8 <= len(data); i += 8 {
		if v := binary.LittleEndian.Uint64(data[i:]); v != 0 && v != ^uint64(0) {
			m.init[v] = true
		}
	}
	// Linkers that leave the section's words 0 put the addresses in the
	// R_X86_64_RELATIVE relocations' addends.
	if rela := f.Section(".rela.dyn"); rela != nil && f.Machine == elf.EM_X86_64 {
		if rd, err := rela.Data(); err == nil {
			for i := 0; i+24 <= len(rd); i += 24 {
				off := binary.LittleEndian.Uint64(rd[i:])
				info := binary.LittleEndian.Uint64(rd[i+8:])
				add := binary.LittleEndian.Uint64(rd[i+16:])
				if elf.R_X86_64(info&0xffffffff) == elf.R_X86_64_RELATIVE && off >= ia.Addr && off < ia.Addr+ia.Size {
					m.init[add] = true
				}
			}
		}
	}
	hd, err := hdr.Data()
	if err != nil {
		return nil
	}
	m.starts = fdeStarts(hd, hdr.Addr)
	if m.starts == nil {
		return nil
	}
	return m
}

// fdeStarts decodes the binary search table of an .eh_frame_hdr section
// loaded at addr: the start of every function with an FDE, ascending. It
// reads the layout every GNU toolchain writes (a table of datarel sdata4
// pairs) and returns nil for any other.
func fdeStarts(hd []byte, addr uint64) []uint64 {
	const (
		encAbsptr = 0x00
		encUdata4 = 0x03
		encSdata4 = 0x0b
		encDatarl = 0x30
	)
	if len(hd) < 4 || hd[0] != 1 {
		return nil
	}
	ptrEnc, countEnc, tableEnc := hd[1], hd[2], hd[3]
	pos := 4
	// eh_frame_ptr: skipped; only its size matters.
	switch ptrEnc & 0x0f {
	case encUdata4, encSdata4:
		pos += 4
	case encAbsptr, 0x04, 0x0c:
		pos += 8
	default:
		return nil
	}
	var n uint64
	switch countEnc & 0x0f {
	case encUdata4, encSdata4:
		if pos+4 > len(hd) {
			return nil
		}
		n = uint64(binary.LittleEndian.Uint32(hd[pos:]))
		pos += 4
	default:
		return nil
	}
	if tableEnc != encDatarl|encSdata4 || n > uint64(len(hd)-pos)/8 {
		return nil
	}
	starts := make([]uint64, 0, n)
	for i := uint64(0); i < n; i++ {
		rel := int32(binary.LittleEndian.Uint32(hd[pos:]))
		starts = append(starts, addr+uint64(int64(rel)))
		pos += 8
	}
	if !sort.SliceIsSorted(starts, func(i, j int) bool { return starts[i] < starts[j] }) {
		sort.Slice(starts, func(i, j int) bool { return starts[i] < starts[j] })
	}
	return starts
}
