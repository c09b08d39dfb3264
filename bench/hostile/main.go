// Command hostile writes the hostile but valid inputs of issue 27 item 9,
// for measuring what the analysis side needs to read them (see
// bench/RESULTS-hostile.md and run.sh):
//
//	procs.hst   1 M processes, each with one allocation and one free
//	stacks.hst  1 M stacks (IDs) of the same 127 frames (they compress to
//	            almost nothing), one allocation each
//	dwarf.so    an ELF whose compressed .debug_abbrev inflates to -dwarf MiB
//	            (zlib of zeros), and dwarf.hst, a trace whose stack points
//	            into it
//
// Usage: go run ./bench/hostile -o DIR [-procs N] [-stacks N] [-dwarf MiB]
// (0 leaves that file out).
package main

import (
	"bytes"
	"compress/zlib"
	"debug/elf"
	"encoding/binary"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/tracefile"
)

func main() {
	dir := flag.String("o", ".", "folder to write the files into")
	procs := flag.Int("procs", 1_000_000, "processes of procs.hst")
	stacks := flag.Int("stacks", 1_000_000, "stacks of stacks.hst")
	dwarf := flag.Int("dwarf", 4096, "MiB that dwarf.so's .debug_info inflates to")
	flag.Parse()
	var fs []func() error
	if *procs > 0 {
		fs = append(fs, func() error { return writeProcs(filepath.Join(*dir, "procs.hst"), *procs) })
	}
	if *stacks > 0 {
		fs = append(fs, func() error { return writeStacks(filepath.Join(*dir, "stacks.hst"), *stacks) })
	}
	if *dwarf > 0 {
		fs = append(fs, func() error { return writeDwarf(*dir, *dwarf) })
	}
	for _, f := range fs {
		if err := f(); err != nil {
			fmt.Fprintln(os.Stderr, "hostile:", err)
			os.Exit(1)
		}
	}
}

const start = int64(1_000_000_000)

func create(path string) (*tracefile.Writer, error) {
	os.Remove(path)
	return tracefile.Create(path, tracefile.Header{Session: "hostile", Provider: "preload", MonoStart: start,
		WallStart: time.Unix(1700000000, 0)}, tracefile.Options{})
}

func writeProcs(path string, n int) error {
	w, err := create(path)
	if err != nil {
		return err
	}
	for i := 0; i < n; i++ {
		pid := uint32(1000 + i)
		t := start + int64(i)*1000
		if err := w.Process(event.Process{PID: pid, PPID: 999, Time: t, Exe: "/bin/sh", Cmdline: []string{"sh", "-c", "true"}}); err != nil {
			return err
		}
		if err := w.Stack(event.Stack{PID: pid, ID: 1, Frames: []uint64{0x401000, 0x401100}}); err != nil {
			return err
		}
		evs := []event.Event{
			{Time: t + 1, PID: pid, TID: pid, Kind: event.KindAlloc, Func: event.FuncMalloc, Stack: 1, Addr: 0x10000, Size: 32},
			{Time: t + 2, PID: pid, TID: pid, Kind: event.KindFree, Func: event.FuncFree, Addr: 0x10000},
		}
		if err := w.Events(evs); err != nil {
			return err
		}
		if err := w.Exit(event.Exit{PID: pid, Time: t + 3}); err != nil {
			return err
		}
	}
	return w.Close()
}

func writeStacks(path string, n int) error {
	w, err := create(path)
	if err != nil {
		return err
	}
	if err := w.Process(event.Process{PID: 1, Time: start, Exe: "/bin/true"}); err != nil {
		return err
	}
	frames := make([]uint64, 127)
	for i := range frames {
		frames[i] = 0x400000 + uint64(i)*0x10
	}
	for i := 0; i < n; i++ {
		id := event.StackID(i + 1)
		if err := w.Stack(event.Stack{PID: 1, ID: id, Frames: frames}); err != nil {
			return err
		}
		e := event.Event{Time: start + int64(i)*100, PID: 1, TID: 1, Kind: event.KindAlloc, Func: event.FuncMalloc, Stack: id,
			Addr: 0x10000 + uint64(i)*16, Size: 16}
		if err := w.Events([]event.Event{e}); err != nil {
			return err
		}
	}
	return w.Close()
}

// writeDwarf writes dwarf.so, a small ELF whose SHF_COMPRESSED
// .debug_abbrev holds mib MiB of zeros deflated (its one unit in
// .debug_info needs it), and dwarf.hst, whose one stack points into its
// text.
func writeDwarf(dir string, mib int) error {
	var z bytes.Buffer
	zw, _ := zlib.NewWriterLevel(&z, zlib.BestCompression)
	zero := make([]byte, 1<<20)
	for i := 0; i < mib; i++ {
		zw.Write(zero)
	}
	zw.Close()
	// Chdr64: type, reserved, size, addralign.
	var chdr [24]byte
	binary.LittleEndian.PutUint32(chdr[0:], uint32(elf.COMPRESS_ZLIB))
	binary.LittleEndian.PutUint64(chdr[8:], uint64(mib)<<20)
	binary.LittleEndian.PutUint64(chdr[16:], 1)
	abbrev := append(chdr[:], z.Bytes()...)
	// A DWARF 4 unit: length, version, abbreviation offset, address size,
	// and a DIE of abbreviation 1.
	info := []byte{8, 0, 0, 0, 4, 0, 0, 0, 0, 0, 8, 1}
	text := bytes.Repeat([]byte{0xc3}, 0x1000) // ret
	so := filepath.Join(dir, "dwarf.so")
	if err := os.WriteFile(so, buildELF(text, info, abbrev), 0o644); err != nil {
		return err
	}
	w, err := create(filepath.Join(dir, "dwarf.hst"))
	if err != nil {
		return err
	}
	abs, _ := filepath.Abs(so)
	steps := []error{
		w.Process(event.Process{PID: 1, Time: start, Exe: abs}),
		w.Module(event.Module{PID: 1, Time: start, Start: 0x400000, End: 0x402000, Offset: 0, Path: abs}),
		w.Stack(event.Stack{PID: 1, ID: 1, Frames: []uint64{0x401010}}),
		w.Events([]event.Event{{Time: start + 1, PID: 1, TID: 1, Kind: event.KindAlloc, Func: event.FuncMalloc, Stack: 1, Addr: 0x10000, Size: 64}}),
	}
	for _, err := range steps {
		if err != nil {
			return err
		}
	}
	return w.Close()
}

// buildELF lays out an x86-64 ELF shared object with a .text at file
// offset and address 0x1000, a .debug_info and a compressed .debug_abbrev.
func buildELF(text, info, abbrev []byte) []byte {
	const ehsize, phsize, shsize = 64, 56, 64
	shstr := []byte("\x00.text\x00.debug_info\x00.shstrtab\x00.debug_abbrev\x00")
	textOff := uint64(0x1000)
	infoOff := textOff + uint64(len(text))
	strOff := infoOff + uint64(len(info))
	abbrevOff := strOff + uint64(len(shstr))
	shOff := (abbrevOff + uint64(len(abbrev)) + 7) &^ 7
	b := make([]byte, shOff+5*shsize)
	copy(b[0:], []byte{0x7f, 'E', 'L', 'F', 2, 1, 1})
	le := binary.LittleEndian
	le.PutUint16(b[16:], uint16(elf.ET_DYN))
	le.PutUint16(b[18:], uint16(elf.EM_X86_64))
	le.PutUint32(b[20:], 1)
	le.PutUint64(b[24:], textOff) // entry
	le.PutUint64(b[32:], ehsize)  // phoff
	le.PutUint64(b[40:], shOff)   // shoff
	le.PutUint16(b[52:], ehsize)  // ehsize
	le.PutUint16(b[54:], phsize)  // phentsize
	le.PutUint16(b[56:], 1)       // phnum
	le.PutUint16(b[58:], shsize)  // shentsize
	le.PutUint16(b[60:], 5)       // shnum
	le.PutUint16(b[62:], 3)       // shstrndx
	ph := b[ehsize:]
	le.PutUint32(ph[0:], uint32(elf.PT_LOAD))
	le.PutUint32(ph[4:], uint32(elf.PF_R|elf.PF_X))
	le.PutUint64(ph[8:], textOff)
	le.PutUint64(ph[16:], textOff)
	le.PutUint64(ph[24:], textOff)
	le.PutUint64(ph[32:], uint64(len(text)))
	le.PutUint64(ph[40:], uint64(len(text)))
	le.PutUint64(ph[48:], 0x1000)
	copy(b[textOff:], text)
	copy(b[infoOff:], info)
	copy(b[strOff:], shstr)
	copy(b[abbrevOff:], abbrev)
	sh := func(i int, name uint32, typ elf.SectionType, flags elf.SectionFlag, addr, off, size uint64) {
		s := b[shOff+uint64(i)*shsize:]
		le.PutUint32(s[0:], name)
		le.PutUint32(s[4:], uint32(typ))
		le.PutUint64(s[8:], uint64(flags))
		le.PutUint64(s[16:], addr)
		le.PutUint64(s[24:], off)
		le.PutUint64(s[32:], size)
		le.PutUint64(s[48:], 1)
	}
	sh(1, 1, elf.SHT_PROGBITS, elf.SHF_ALLOC|elf.SHF_EXECINSTR, textOff, textOff, uint64(len(text)))
	sh(2, 7, elf.SHT_PROGBITS, 0, 0, infoOff, uint64(len(info)))
	sh(3, 19, elf.SHT_STRTAB, 0, 0, strOff, uint64(len(shstr)))
	sh(4, 29, elf.SHT_PROGBITS, elf.SHF_COMPRESSED, 0, abbrevOff, uint64(len(abbrev)))
	return b
}
