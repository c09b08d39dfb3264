package symbolize

import (
	"bytes"
	"compress/zlib"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/internal/testutil"
)

// TestCompressed reads DWARF compressed every way toolchains do it: ELF
// compressed sections with zlib and zstd, and the older .zdebug sections.
func TestCompressed(t *testing.T) {
	o := testutil.Options{}
	src, _ := testutil.Source("symbolize_inline", o)
	zstd := filepath.Join(t.TempDir(), "zstd")
	command(t, "objcopy", "--compress-debug-sections=zstd", testutil.MustBuild(t, "symbolize_inline", o), zstd)
	for _, bin := range []string{
		testutil.MustBuild(t, "symbolize_inline", testutil.Options{Flags: []string{"-gz=zlib"}}),
		testutil.MustBuild(t, "symbolize_inline", testutil.Options{Flags: []string{"-gz=zlib-gnu"}}),
		zstd,
	} {
		w := run(t, bin)
		s := w.symbolizer(Options{})
		m := w.module(t, w.pcs[0])
		checkFrames(t, s.Frames(uint32(w.pid), w.pcs[0]), src, m, w.pcs[0],
			want{"alloc_inner", "alloc_site"}, want{"alloc_outer", "call_inner"}, want{"make_buffer", "call_outer"})
		if ws := s.Warnings(); len(ws) > 0 {
			t.Errorf("%s: warnings %q", bin, ws)
		}
		s.Close()
	}
}

// TestDWARF4 reads DWARF 4 (.debug_ranges, 1-based file numbers) as well as
// the default DWARF 5.
func TestDWARF4(t *testing.T) {
	o := testutil.Options{Flags: []string{"-gdwarf-4"}}
	src, _ := testutil.Source("symbolize_inline", o)
	w := run(t, testutil.MustBuild(t, "symbolize_inline", o))
	s := w.symbolizer(Options{})
	defer s.Close()
	m := w.module(t, w.pcs[0])
	checkFrames(t, s.Frames(uint32(w.pid), w.pcs[0]), src, m, w.pcs[0],
		want{"alloc_inner", "alloc_site"}, want{"alloc_outer", "call_inner"}, want{"make_buffer", "call_outer"})
	checkFrames(t, s.Frames(uint32(w.pid), w.pcs[2]), src, m, w.pcs[2], want{"main", "call_run"})
}

// corruptions returns copies of an ELF image with, in turn, the middle of
// each section, the section headers, the program headers and the tail
// overwritten, and a truncated copy.
func corruptions(tb testing.TB, data []byte) [][]byte {
	f, err := elf.NewFile(bytes.NewReader(data))
	if err != nil {
		tb.Fatal(err)
	}
	smash := func(off, n uint64) []byte {
		c := bytes.Clone(data)
		for i := off; i < off+n && i < uint64(len(c)); i++ {
			c[i] ^= byte(0xA5 + i*7)
		}
		return c
	}
	var out [][]byte
	for _, s := range f.Sections {
		if s.Type == elf.SHT_NOBITS || s.FileSize == 0 {
			continue
		}
		// The start of a section holds its headers (a unit's, a line
		// table's, a compression header), the middle its contents.
		out = append(out, smash(s.Offset, min(s.FileSize, 16)), smash(s.Offset+s.FileSize/2, min(s.FileSize/2, 32)))
	}
	sh, ph := uint64(0), uint64(0)
	if f.Class == elf.ELFCLASS64 {
		sh, ph = f.ByteOrder.Uint64(data[0x28:]), f.ByteOrder.Uint64(data[0x20:])
	}
	out = append(out, smash(sh, 256), smash(ph, 128), smash(0x10, 48), data[:len(data)/2])
	return out
}

// FuzzObject feeds corrupt ELF files, and corrupt DWARF in them, to the
// object reader and resolves addresses in them: it must never panic, and
// what it cannot read becomes a warning. The seeds are a real binary with
// DWARF (plain and compressed) and copies of it corrupted in each section.
func FuzzObject(f *testing.F) {
	for _, o := range []testutil.Options{{}, {Flags: []string{"-gz=zlib"}}, {Flags: []string{"-gdwarf-4"}}} {
		data, err := os.ReadFile(testutil.MustBuild(f, "symbolize_inline", o))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
		for _, c := range corruptions(f, data) {
			f.Add(c)
		}
	}
	// Decompression bombs, in the DWARF and in the symbol table.
	f.Add(bombELF(f, 300, false))
	f.Add(bombELF(f, 300, true))
	f.Fuzz(func(t *testing.T, data []byte) {
		ef, err := newELF(bytes.NewReader(data))
		if err != nil {
			return
		}
		var warnings []string
		warn := func(format string, args ...any) { warnings = append(warnings, format) }
		obj := newObject("fuzz", &elfFile{ef, bytes.NewReader(data)}, nil, true, warn)
		// Every 16th address of the executable segments, and each symbol.
		for _, s := range obj.loads {
			for va := s.vaddr; va < s.vaddr+min(s.filesz, 1<<16); va += 16 {
				obj.lookup(va)
			}
		}
		for _, s := range obj.syms {
			obj.lookup(s.addr)
		}
		for _, w := range warnings {
			if !strings.HasPrefix(w, "%s: ") {
				t.Errorf("warning does not name its module: %q", w)
			}
		}
	})
}

// TestCorruptFile: a file whose DWARF is corrupt gives a warning naming it,
// and frames from what is left (the symbol table); never a panic, never a
// lost frame.
func TestCorruptFile(t *testing.T) {
	bin := testutil.MustBuild(t, "symbolize_inline", testutil.Options{})
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	f, err := elf.NewFile(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	var fn uint64
	syms, _ := f.Symbols()
	for _, s := range syms {
		if s.Name == "run_workload" {
			fn = s.Value
		}
	}
	abbrev := f.Section(".debug_abbrev")
	if fn == 0 || abbrev == nil {
		t.Fatal("no run_workload or no .debug_abbrev")
	}
	// Abbreviation codes and tags of 0xff...: no entry decodes.
	for i := abbrev.Offset; i < abbrev.Offset+abbrev.FileSize; i++ {
		data[i] = 0xff
	}
	path := filepath.Join(t.TempDir(), "corrupt")
	if err := os.WriteFile(path, data, 0o755); err != nil {
		t.Fatal(err)
	}
	const base = 0x10000 // mapped at 0x10000 + its addresses
	s := New(Options{})
	defer s.Close()
	s.AddModule(event.Module{PID: 1, Start: base, End: base + 0x100000, Path: path})
	frames := s.Frames(1, base+fn+1)
	if len(frames) != 1 || frames[0].Function != "run_workload" || frames[0].Module != path {
		t.Errorf("frames: %+v", frames)
	}
	ws := s.Warnings()
	if len(ws) == 0 || !strings.HasPrefix(ws[0], path+": ") || !strings.Contains(ws[0], "DWARF") {
		t.Errorf("warnings: %q", ws)
	}
}

// TestHugeSizes: a small binary whose headers claim sections of 3.75 GiB
// (an uncompressed section's size in its section header, a compressed one's
// decompressed size in its compression header) must not make the
// symbolizer allocate anything like that: every size read from a file is
// bounded by the file's size. FuzzObject found a 21 KB file that made
// `report` allocate 3.8 GiB.
func TestHugeSizes(t *testing.T) {
	const huge = 0xF000_0000
	plain, err := os.ReadFile(testutil.MustBuild(t, "symbolize_inline", testutil.Options{}))
	if err != nil {
		t.Fatal(err)
	}
	zlib, err := os.ReadFile(testutil.MustBuild(t, "symbolize_inline", testutil.Options{Flags: []string{"-gz=zlib"}}))
	if err != nil {
		t.Fatal(err)
	}
	type crafted struct {
		name string
		data []byte
	}
	var cases []crafted
	for _, sec := range []string{".debug_abbrev", ".debug_info", ".debug_str", ".debug_line", ".debug_line_str", ".debug_aranges",
		".debug_rnglists", ".symtab", ".strtab", ".dynsym", ".dynstr", ".gnu_debuglink", ".note.gnu.build-id"} {
		// The section header's size.
		data := bytes.Clone(plain)
		f, err := elf.NewFile(bytes.NewReader(data))
		if err != nil {
			t.Fatal(err)
		}
		shoff := f.ByteOrder.Uint64(data[0x28:])
		for i, s := range f.Sections {
			if s.Name == sec {
				f.ByteOrder.PutUint64(data[shoff+uint64(i)*64+32:], huge)
				cases = append(cases, crafted{sec + " size", data})
			}
		}
		// The compression header's size (Elf64_Chdr: type, reserved, size).
		data = bytes.Clone(zlib)
		if f, err = elf.NewFile(bytes.NewReader(data)); err != nil {
			t.Fatal(err)
		}
		if s := f.Section(sec); s != nil && s.Flags&elf.SHF_COMPRESSED != 0 {
			f.ByteOrder.PutUint64(data[s.Offset+8:], huge)
			cases = append(cases, crafted{sec + " compressed size", data})
		}
	}
	// Program headers' sizes: of the notes (the build-id) and of the
	// segments (Elf64_Phdr: type, flags, offset, vaddr, paddr, filesz).
	{
		f, err := elf.NewFile(bytes.NewReader(plain))
		if err != nil {
			t.Fatal(err)
		}
		phoff := f.ByteOrder.Uint64(plain[0x20:])
		for i, p := range f.Progs {
			if p.Type == elf.PT_NOTE || p.Type == elf.PT_LOAD {
				data := bytes.Clone(plain)
				f.ByteOrder.PutUint64(data[phoff+uint64(i)*56+32:], huge)
				cases = append(cases, crafted{fmt.Sprintf("program header %d (%v) size", i, p.Type), data})
			}
		}
	}
	if len(cases) < 20 {
		t.Fatalf("only %d crafted files", len(cases))
	}
	for _, c := range cases {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		ef, err := newELF(bytes.NewReader(c.data))
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		var warnings []string
		warn := func(format string, args ...any) { warnings = append(warnings, fmt.Sprintf(format, args...)) }
		obj := newObject("crafted", &elfFile{ef, bytes.NewReader(c.data)}, nil, true, warn)
		for _, s := range obj.syms {
			obj.lookup(s.addr)
		}
		// And through a Symbolizer, from a file on disk, as `report` reads.
		path := filepath.Join(t.TempDir(), "crafted")
		if err := os.WriteFile(path, c.data, 0o600); err != nil {
			t.Fatal(err)
		}
		sym := New(Options{})
		sym.AddModule(event.Module{PID: 1, Start: 0x10000, End: 0x10000 + 0x100000, Path: path})
		for _, s := range obj.syms {
			sym.Frames(1, 0x10000+s.addr+1)
		}
		sym.Close()
		runtime.ReadMemStats(&after)
		alloc := after.TotalAlloc - before.TotalAlloc
		t.Logf("%s: %d KiB allocated (file %d KiB); warnings %q", c.name, alloc>>10, len(c.data)>>10, warnings)
		if alloc > 64<<20 {
			t.Errorf("%s: %d MiB allocated for a file of %d KiB", c.name, alloc>>20, len(c.data)>>10)
		}
		if len(warnings) == 0 && strings.HasPrefix(c.name, ".debug") {
			t.Errorf("%s: no warning", c.name)
		}
	}
}

// bombELF is an x86-64 ELF shared object with a .text at 0x1000, a DWARF 4
// unit in .debug_info, and a .debug_abbrev, or (symtab) a .symtab, that is
// SHF_COMPRESSED: zlib of mib MiB of zeros, a few hundred bytes a MiB.
func bombELF(tb testing.TB, mib int, symtab bool) []byte {
	tb.Helper()
	var z bytes.Buffer
	zw, _ := zlib.NewWriterLevel(&z, zlib.BestCompression)
	zero := make([]byte, 1<<20)
	for i := 0; i < mib; i++ {
		zw.Write(zero)
	}
	zw.Close()
	var chdr [24]byte
	binary.LittleEndian.PutUint32(chdr[0:], uint32(elf.COMPRESS_ZLIB))
	binary.LittleEndian.PutUint64(chdr[8:], uint64(mib)<<20)
	binary.LittleEndian.PutUint64(chdr[16:], 1)
	bomb := append(chdr[:], z.Bytes()...)
	info := []byte{8, 0, 0, 0, 4, 0, 0, 0, 0, 0, 8, 1}
	text := bytes.Repeat([]byte{0xc3}, 0x1000)
	shstr := []byte("\x00.text\x00.debug_info\x00.shstrtab\x00.debug_abbrev\x00.symtab\x00")
	const ehsize, phsize, shsize = 64, 56, 64
	textOff := uint64(0x1000)
	infoOff := textOff + uint64(len(text))
	strOff := infoOff + uint64(len(info))
	bombOff := strOff + uint64(len(shstr))
	shOff := (bombOff + uint64(len(bomb)) + 7) &^ 7
	b := make([]byte, shOff+5*shsize)
	copy(b, []byte{0x7f, 'E', 'L', 'F', 2, 1, 1})
	le := binary.LittleEndian
	le.PutUint16(b[16:], uint16(elf.ET_DYN))
	le.PutUint16(b[18:], uint16(elf.EM_X86_64))
	le.PutUint32(b[20:], 1)
	le.PutUint64(b[32:], ehsize)
	le.PutUint64(b[40:], shOff)
	le.PutUint16(b[52:], ehsize)
	le.PutUint16(b[54:], phsize)
	le.PutUint16(b[56:], 1)
	le.PutUint16(b[58:], shsize)
	le.PutUint16(b[60:], 5)
	le.PutUint16(b[62:], 3)
	ph := b[ehsize:]
	le.PutUint32(ph[0:], uint32(elf.PT_LOAD))
	le.PutUint32(ph[4:], uint32(elf.PF_R|elf.PF_X))
	for _, o := range []int{8, 16, 24} {
		le.PutUint64(ph[o:], textOff)
	}
	le.PutUint64(ph[32:], uint64(len(text)))
	le.PutUint64(ph[40:], uint64(len(text)))
	le.PutUint64(ph[48:], 0x1000)
	copy(b[textOff:], text)
	copy(b[infoOff:], info)
	copy(b[strOff:], shstr)
	copy(b[bombOff:], bomb)
	sh := func(i int, name uint32, typ elf.SectionType, flags elf.SectionFlag, addr, off, size uint64) {
		s := b[shOff+uint64(i)*shsize:]
		le.PutUint32(s[0:], name)
		le.PutUint32(s[4:], uint32(typ))
		le.PutUint64(s[8:], uint64(flags))
		le.PutUint64(s[16:], addr)
		le.PutUint64(s[24:], off)
		le.PutUint64(s[32:], size)
		le.PutUint64(s[48:], 1)
		if typ == elf.SHT_SYMTAB {
			le.PutUint32(s[40:], 3) // link: its strings
			le.PutUint64(s[56:], 24)
		}
	}
	sh(1, 1, elf.SHT_PROGBITS, elf.SHF_ALLOC|elf.SHF_EXECINSTR, textOff, textOff, uint64(len(text)))
	sh(2, 7, elf.SHT_PROGBITS, 0, 0, infoOff, uint64(len(info)))
	sh(3, 19, elf.SHT_STRTAB, 0, 0, strOff, uint64(len(shstr)))
	if symtab {
		sh(4, 43, elf.SHT_SYMTAB, elf.SHF_COMPRESSED, 0, bombOff, uint64(len(bomb)))
	} else {
		sh(4, 29, elf.SHT_PROGBITS, elf.SHF_COMPRESSED, 0, bombOff, uint64(len(bomb)))
	}
	return b
}

// TestDecompressionBudget: a small file whose compressed DWARF, or symbol
// table, claims (and holds) 512 MiB is refused with a warning naming it,
// before anything is decompressed: a file's sections may decompress to 32
// times its size, at least 256 MiB (dwarfBudget), and deflate's 1032 times
// does not pass (a 4 MB file took report to 4.1 GB; a 16.8 GB RSS here).
func TestDecompressionBudget(t *testing.T) {
	for _, symtab := range []bool{false, true} {
		data := bombELF(t, 512, symtab)
		ef, err := newELF(bytes.NewReader(data))
		if err != nil {
			t.Fatal(err)
		}
		var warnings []string
		warn := func(format string, args ...any) { warnings = append(warnings, fmt.Sprintf(format, args...)) }
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		obj := newObject("bomb", &elfFile{ef, bytes.NewReader(data)}, nil, true, warn)
		obj.lookup(0x1010)
		runtime.ReadMemStats(&after)
		if n := after.TotalAlloc - before.TotalAlloc; n > 64<<20 {
			t.Errorf("symtab %v: reading a %d-byte file allocated %d bytes", symtab, len(data), n)
		}
		if !strings.Contains(strings.Join(warnings, "\n"), "can honestly hold") {
			t.Errorf("symtab %v: warnings %q", symtab, warnings)
		}
	}
}
