// Package buildid reads the GNU build-id of an ELF file: the note
// (NT_GNU_BUILD_ID) that the linker writes from a hash of the output, which
// names one build of a file and keys its separate debug file
// (/usr/lib/debug/.build-id/xx/yyyy.debug). Module records carry it as
// lower-case hex, which is what this package returns.
package buildid

import (
	"debug/elf"
	"encoding/hex"
	"fmt"
	"io"
)

// maxNotes bounds the note data read from one segment or section: build-id
// notes are a few dozen bytes, and the size comes from the file.
const maxNotes = 1 << 20

// File returns the build-id of the ELF file at path, or "" if it has none.
func File(path string) (string, error) {
	f, err := elf.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	return ELF(f)
}

// ELF returns the build-id of an open ELF file, or "" if it has none. It
// looks in the PT_NOTE segments, as the loaded image has them, then in the
// .note.gnu.build-id section, which a separate debug file keeps. A note
// cut short or malformed is no build-id, not an error; a file that cannot be
// read is.
func ELF(f *elf.File) (id string, err error) {
	defer func() {
		// debug/elf can panic on some corrupt headers.
		if p := recover(); p != nil {
			id, err = "", fmt.Errorf("buildid: corrupt ELF: %v", p)
		}
	}()
	for _, p := range f.Progs {
		if p.Type != elf.PT_NOTE {
			continue
		}
		if id, ok, err := find(p.Open(), p.Filesz, f.ByteOrder); err != nil || ok {
			return id, err
		}
	}
	if s := f.Section(".note.gnu.build-id"); s != nil && s.Type == elf.SHT_NOTE {
		if id, ok, err := find(s.Open(), s.Size, f.ByteOrder); err != nil || ok {
			return id, err
		}
	}
	return "", nil
}

// ntGNUBuildID is the note type of a build-id, in the "GNU" namespace.
const ntGNUBuildID = 3

// find scans size bytes of ELF notes from r for the GNU build-id.
func find(r io.Reader, size uint64, order interface{ Uint32([]byte) uint32 }) (string, bool, error) {
	if size > maxNotes {
		return "", false, nil
	}
	buf := make([]byte, size)
	n, err := io.ReadFull(r, buf)
	if err != nil && err != io.ErrUnexpectedEOF && err != io.EOF {
		return "", false, fmt.Errorf("buildid: reading notes: %w", err)
	}
	buf = buf[:n]
	// Each note: namesz, descsz, type, then name and desc, each padded to 4.
	for len(buf) >= 12 {
		namesz, descsz, typ := order.Uint32(buf[0:]), order.Uint32(buf[4:]), order.Uint32(buf[8:])
		nameEnd := 12 + align4(uint64(namesz))
		descEnd := nameEnd + align4(uint64(descsz))
		if descEnd > uint64(len(buf)) {
			return "", false, nil
		}
		if typ == ntGNUBuildID && namesz == 4 && string(buf[12:16]) == "GNU\x00" {
			return hex.EncodeToString(buf[nameEnd : nameEnd+uint64(descsz)]), true, nil
		}
		buf = buf[descEnd:]
	}
	return "", false, nil
}

func align4(n uint64) uint64 { return (n + 3) &^ 3 }
