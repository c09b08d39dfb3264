package symbolize

import (
	"bytes"
	"debug/dwarf"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/klauspost/compress/flate"
	"github.com/klauspost/compress/zstd"
)

// dwarfSections are the DWARF sections symbolizing reads: the entries, the
// line tables and what they refer to. Location lists, call frame information,
// name indexes and type units are never read.
var dwarfSections = []string{"info", "abbrev", "str", "line", "ranges", "addr", "line_str", "str_offsets", "rnglists", "aranges"}

// readDWARF reads f's DWARF sections, decompressing them (zlib or zstd, the
// ELF way or the old .zdebug way) in parallel with klauspost/compress, which
// is several times faster than debug/elf's compress/zlib, and builds the
// dwarf.Data. ra reads f's raw bytes. The aranges section is returned apart:
// package dwarf has no use for it.
func readDWARF(f *elf.File, ra io.ReaderAt) (d *dwarf.Data, aranges []byte, err error) {
	if f.Type == elf.ET_REL {
		// Relocatable objects need relocations applied: debug/elf does it.
		d, err := f.DWARF()
		return d, nil, err
	}
	secs := map[string]*elf.Section{}
	for _, s := range f.Sections {
		name, ok := strings.CutPrefix(s.Name, ".debug_")
		if !ok {
			name, ok = strings.CutPrefix(s.Name, ".zdebug_")
		}
		if ok && s.Type != elf.SHT_NOBITS {
			secs[name] = s
		}
	}
	data := make(map[string][]byte, len(dwarfSections))
	errs := make(map[string]error, len(dwarfSections))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, name := range dwarfSections {
		s := secs[name]
		if s == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			b, err := sectionData(f, s, ra)
			mu.Lock()
			data[name], errs[name] = b, err
			mu.Unlock()
		}()
	}
	wg.Wait()
	for _, name := range dwarfSections {
		if errs[name] != nil {
			return nil, nil, fmt.Errorf("section %s: %w", secs[name].Name, errs[name])
		}
	}
	if data["info"] == nil {
		return nil, nil, errors.New("no .debug_info")
	}
	d, err = newDWARF(data)
	if err != nil {
		return nil, nil, err
	}
	return d, data["aranges"], nil
}

func newDWARF(data map[string][]byte) (d *dwarf.Data, err error) {
	defer func() {
		if p := recover(); p != nil {
			d, err = nil, fmt.Errorf("corrupt DWARF: %v", p)
		}
	}()
	d, err = dwarf.New(data["abbrev"], nil, nil, data["info"], data["line"], nil, data["ranges"], data["str"])
	if err != nil {
		return nil, err
	}
	for _, name := range []string{"addr", "line_str", "str_offsets", "rnglists"} {
		if b := data[name]; b != nil {
			if err := d.AddSection(".debug_"+name, b); err != nil {
				return nil, err
			}
		}
	}
	return d, nil
}

// maxSection bounds the decompressed size of one section: a corrupt header
// must not make us allocate without limit.
const maxSection = 1 << 32

const (
	compressZlib = 1 // ELFCOMPRESS_ZLIB
	compressZstd = 2 // ELFCOMPRESS_ZSTD
)

// sectionData returns the contents of s, decompressed.
func sectionData(f *elf.File, s *elf.Section, ra io.ReaderAt) ([]byte, error) {
	compressed := s.Flags&elf.SHF_COMPRESSED != 0
	old := strings.HasPrefix(s.Name, ".zdebug_")
	if !compressed && !old {
		return s.Data()
	}
	if s.FileSize > maxSection {
		return nil, fmt.Errorf("%d bytes compressed: too large", s.FileSize)
	}
	raw := make([]byte, s.FileSize)
	if _, err := ra.ReadAt(raw, int64(s.Offset)); err != nil {
		return nil, err
	}
	var typ uint32
	var size uint64
	switch {
	case old:
		// "ZLIB", then the size as 8 bytes big-endian, then a zlib stream.
		if len(raw) < 12 || string(raw[:4]) != "ZLIB" {
			return nil, errors.New("bad .zdebug header")
		}
		typ, size, raw = compressZlib, binary.BigEndian.Uint64(raw[4:]), raw[12:]
	case f.Class == elf.ELFCLASS64:
		// Elf64_Chdr: type, reserved, size, alignment.
		if len(raw) < 24 {
			return nil, errors.New("short compression header")
		}
		typ, size, raw = f.ByteOrder.Uint32(raw), f.ByteOrder.Uint64(raw[8:]), raw[24:]
	default:
		// Elf32_Chdr: type, size, alignment.
		if len(raw) < 12 {
			return nil, errors.New("short compression header")
		}
		typ, size, raw = f.ByteOrder.Uint32(raw), uint64(f.ByteOrder.Uint32(raw[4:])), raw[12:]
	}
	if size > maxSection {
		return nil, fmt.Errorf("%d bytes decompressed: too large", size)
	}
	var zr io.Reader
	switch typ {
	case compressZlib:
		// The deflate stream inside the zlib one, read directly: the
		// Adler-32 check costs a tenth of the time, and a corrupt stream
		// fails to inflate or to fill the size the header gives anyway.
		if len(raw) < 2 || raw[0]&0x0f != 8 || raw[1]&0x20 != 0 || (uint(raw[0])<<8|uint(raw[1]))%31 != 0 {
			return nil, errors.New("bad zlib header")
		}
		fr := flate.NewReader(bytes.NewReader(raw[2:]))
		defer fr.Close()
		zr = fr
	case compressZstd:
		d, err := zstd.NewReader(bytes.NewReader(raw), zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(max(size, 64<<20)))
		if err != nil {
			return nil, err
		}
		defer d.Close()
		zr = d
	default:
		return nil, fmt.Errorf("unknown compression type %d", typ)
	}
	// Read straight into a buffer of the size the header gives, when that
	// is plausible for the input; grow as needed otherwise.
	if size <= 64*uint64(len(raw))+4096 {
		out := make([]byte, size)
		if _, err := io.ReadFull(zr, out); err != nil {
			return nil, fmt.Errorf("decompressing: %w", err)
		}
		return out, nil
	}
	var out bytes.Buffer
	n, err := io.Copy(&out, io.LimitReader(zr, int64(size)))
	if err != nil {
		return nil, err
	}
	if uint64(n) != size {
		return nil, fmt.Errorf("decompressed %d bytes, header says %d", n, size)
	}
	return out.Bytes(), nil
}
