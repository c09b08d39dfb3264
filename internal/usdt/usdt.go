// Package usdt reads the USDT probes (SystemTap SDT probes, <sys/sdt.h>)
// that an ELF file declares in its .note.stapsdt notes: each probe's
// provider and name, its address and the file offset a uprobe attaches at,
// its semaphore (the counter a tracer increments while attached, which
// USDT-guarded code reads before doing any work) and its arguments' specs.
//
// It is pure parsing: it reads files and bytes, never a process. Nothing
// in a file can make it panic; what it cannot read is an error (a file) or
// a probe's ArgsErr (an argument spec).
//
// The note format (SystemTap's "UserSpaceProbeImplementation"): in section
// .note.stapsdt, notes of type 3 named "stapsdt", whose descriptor holds
// three addresses of the file's class (the probe's address, the link-time
// address of section .stapsdt.base, the semaphore's address, 0 for none),
// then three NUL-terminated strings: provider, name, argument specs. When
// the file has been prelinked, .stapsdt.base's address differs from the one
// recorded, and the probe's address moves by as much.
package usdt

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
)

// Probe is one probe site. A probe named several times in a program (an
// inlined function holding one) has a Probe per site.
type Probe struct {
	Provider, Name string

	// Address is the probe's virtual address in the file's layout (as
	// recorded, moved by .stapsdt.base's displacement), and Offset its
	// file offset: what a uprobe attaches at.
	Address, Offset uint64
	// Base is the .stapsdt.base address the note recorded.
	Base uint64
	// Semaphore is the semaphore's virtual address and SemaphoreOffset its
	// file offset (a uprobe's reference counter offset); both 0 when the
	// probe has none.
	Semaphore, SemaphoreOffset uint64

	// ArgsSpec is the argument specs as written ("8@%rdi -4@%esi"), Args
	// them parsed; ArgsErr says why they could not be (Args is then nil).
	ArgsSpec string
	Args     []Arg
	ArgsErr  error
}

// ErrFormat is wrapped by the errors of a note that cannot be read.
var ErrFormat = errors.New("usdt: malformed .note.stapsdt")

// noteType is NT_STAPSDT.
const noteType = 3

// maxNotes bounds the notes read from one file (libc has a few dozen).
const maxNotes = 1 << 16

// Open reads the probes of the ELF file at path.
func Open(path string) ([]Probe, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	ef, err := elf.NewFile(f)
	if err != nil {
		return nil, fmt.Errorf("usdt: %s: %w", path, err)
	}
	ps, err := Parse(ef)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return ps, nil
}

// Parse reads the probes of an ELF file: nil, and no error, when it has no
// .note.stapsdt section.
func Parse(f *elf.File) ([]Probe, error) {
	sec := f.Section(".note.stapsdt")
	if sec == nil || sec.Type == elf.SHT_NOBITS {
		return nil, nil
	}
	if sec.Size > 64<<20 {
		return nil, fmt.Errorf("%w: section of %d bytes", ErrFormat, sec.Size)
	}
	data, err := io.ReadAll(io.LimitReader(sec.Open(), int64(sec.Size)))
	if err != nil {
		return nil, fmt.Errorf("usdt: reading .note.stapsdt: %w", err)
	}
	var base uint64
	hasBase := false
	if b := f.Section(".stapsdt.base"); b != nil {
		base, hasBase = b.Addr, true
	}
	ps, err := ParseNotes(data, f.ByteOrder, f.Class)
	if err != nil {
		return nil, err
	}
	for i := range ps {
		p := &ps[i]
		if hasBase && p.Base != 0 {
			p.Address += base - p.Base // wraps as the addresses do
		}
		p.Offset, err = fileOffset(f, p.Address, elf.PF_X)
		if err != nil {
			return nil, fmt.Errorf("usdt: probe %s:%s: %w", p.Provider, p.Name, err)
		}
		if p.Semaphore != 0 {
			p.SemaphoreOffset, err = fileOffset(f, p.Semaphore, elf.PF_W)
			if err != nil {
				return nil, fmt.Errorf("usdt: semaphore of probe %s:%s: %w", p.Provider, p.Name, err)
			}
		}
	}
	return ps, nil
}

// fileOffset converts a virtual address to a file offset through the
// loadable segment with the permission flag want that holds it.
func fileOffset(f *elf.File, addr uint64, want elf.ProgFlag) (uint64, error) {
	for _, p := range f.Progs {
		if p.Type != elf.PT_LOAD || p.Flags&want == 0 {
			continue
		}
		if addr >= p.Vaddr && addr-p.Vaddr < p.Filesz {
			return addr - p.Vaddr + p.Off, nil
		}
	}
	return 0, fmt.Errorf("%w: address %#x is in no loadable segment of the file", ErrFormat, addr)
}

// ParseNotes reads the stapsdt notes in the contents of a .note.stapsdt
// section, of a file of the given byte order and class. The addresses are
// as recorded: Offset and SemaphoreOffset are left 0 (Parse sets them from
// the file's segments). Notes of other types or names are skipped.
func ParseNotes(data []byte, order binary.ByteOrder, class elf.Class) ([]Probe, error) {
	var asize int
	switch class {
	case elf.ELFCLASS32:
		asize = 4
	case elf.ELFCLASS64:
		asize = 8
	default:
		return nil, fmt.Errorf("%w: ELF class %v", ErrFormat, class)
	}
	addr := func(b []byte) uint64 {
		if asize == 4 {
			return uint64(order.Uint32(b))
		}
		return order.Uint64(b)
	}
	var probes []Probe
	for off, n := 0, 0; off < len(data); n++ {
		if n == maxNotes {
			return nil, fmt.Errorf("%w: more than %d notes", ErrFormat, maxNotes)
		}
		if len(data)-off < 12 {
			return nil, fmt.Errorf("%w: note header cut at offset %d", ErrFormat, off)
		}
		namesz := uint64(order.Uint32(data[off:]))
		descsz := uint64(order.Uint32(data[off+4:]))
		typ := order.Uint32(data[off+8:])
		off += 12
		rest := uint64(len(data) - off)
		nameEnd := align4(namesz)
		if nameEnd > rest || descsz > rest-nameEnd {
			return nil, fmt.Errorf("%w: note at offset %d runs past the section", ErrFormat, off-12)
		}
		name := data[off : off+int(namesz)]
		desc := data[off+int(nameEnd) : off+int(nameEnd)+int(descsz)]
		// The last descriptor may lack its padding.
		off += int(min(nameEnd+align4(descsz), rest))
		if typ != noteType || string(bytes.TrimRight(name, "\x00")) != "stapsdt" {
			continue
		}
		if len(desc) < 3*asize {
			return nil, fmt.Errorf("%w: descriptor of %d bytes", ErrFormat, len(desc))
		}
		p := Probe{Address: addr(desc), Base: addr(desc[asize:]), Semaphore: addr(desc[2*asize:])}
		strs := desc[3*asize:]
		var fields [3]string
		for i := range fields {
			end := bytes.IndexByte(strs, 0)
			if end < 0 {
				return nil, fmt.Errorf("%w: probe strings not terminated", ErrFormat)
			}
			fields[i] = string(strs[:end])
			strs = strs[end+1:]
		}
		p.Provider, p.Name, p.ArgsSpec = fields[0], fields[1], fields[2]
		if p.Provider == "" || p.Name == "" {
			return nil, fmt.Errorf("%w: probe with an empty provider or name", ErrFormat)
		}
		p.Args, p.ArgsErr = ParseArgs(p.ArgsSpec)
		probes = append(probes, p)
	}
	return probes, nil
}

func align4(n uint64) uint64 { return (n + 3) &^ 3 }

// Find returns the probes of provider named name.
func Find(probes []Probe, provider, name string) []Probe {
	var out []Probe
	for _, p := range probes {
		if p.Provider == provider && p.Name == name {
			out = append(out, p)
		}
	}
	return out
}
