package symbolize

import (
	"bufio"
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"github.com/klauspost/compress/flate"
	"github.com/klauspost/compress/zstd"
)

// maxSection bounds the decompressed size of one section: a corrupt header
// must not make us allocate without limit.
const maxSection = 1 << 32

// maxRatio bounds how many times larger than its compressed bytes a
// section may declare itself: deflate cannot expand more than 1032 times,
// and DWARF compressed with zstd is nowhere near that. A header that claims
// more is corrupt (or a bomb), and what is allocated for a section stays
// within a fixed multiple of the file's size.
const maxRatio = 1032

// dwarfBudget bounds what the DWARF sections of a file of size bytes may
// decompress to, together. DWARF compresses 3 to 10 times (zlib, zstd),
// and a table of repeats (abbreviations, strings) some 50: 32 times the
// file, and at least 256 MiB for a small file, is room for any real one.
// A bomb (deflate expands up to 1032 times: a 4 MB file declaring 4 GB)
// is refused before anything is allocated.
func dwarfBudget(size uint64) uint64 { return max(256<<20, 32*size) }

// fileSize returns the size of the file r reads, when r can tell.
func fileSize(r io.ReaderAt) (uint64, bool) {
	switch r := r.(type) {
	case interface{ Size() int64 }: // bytes.Reader, io.SectionReader
		return uint64(max(r.Size(), 0)), true
	case interface{ Stat() (os.FileInfo, error) }: // os.File
		if fi, err := r.Stat(); err == nil && fi.Mode().IsRegular() {
			return uint64(max(fi.Size(), 0)), true
		}
	}
	return 0, false
}

const (
	compressNone = 0
	compressZlib = 1 // ELFCOMPRESS_ZLIB
	compressZstd = 2 // ELFCOMPRESS_ZSTD
)

// A dwSection is a DWARF section of an ELF file, read in parts, as the
// units that addresses fall in need them, and never kept whole unless
// asked: the DWARF of a C library is megabytes, of which a trace needs a
// few units.
//
// An uncompressed section is read where it lies in the file. A compressed
// one (ELF SHF_COMPRESSED, zlib or zstd, or an old .zdebug section) can
// only be decompressed from its start: fetch decompresses it as a stream,
// once for a whole batch of parts, and keeps only those parts; whole keeps
// the decompressed section for the small ones that are read everywhere
// (strings, range lists).
type dwSection struct {
	name  string
	r     io.ReaderAt
	off   uint64 // of the data in the file, after any compression header
	fsize uint64 // bytes in the file, from off
	size  uint64 // bytes once decompressed
	comp  uint32
	order binary.ByteOrder

	all    []byte // the decompressed section, once whole has read it
	allErr error
	passes int // passes fetch began over the compressed stream

	// The stream of the last pass, left open at zpos: a later batch of
	// extents after zpos goes on from there instead of decompressing the
	// section again from its start.
	zr    io.Reader
	zdone func()
	zpos  uint64
}

// closeStream releases the stream a pass left open.
func (s *dwSection) closeStream() {
	if s.zdone != nil {
		s.zdone()
	}
	s.zr, s.zdone, s.zpos = nil, nil, 0
}

// keepAfter is how many passes over a compressed section fetch makes before
// it keeps the section whole: lookups one at a time, all over a large
// library, would otherwise decompress it again for each unit.
const keepAfter = 2

// newSection describes s of f, whose bytes r reads. A compression header
// is read now; nothing else is.
func newSection(f *elf.File, s *elf.Section, r io.ReaderAt) (*dwSection, error) {
	// Every size below is read from the file: each is bounded by the
	// file's size, or by a multiple of it, before anything is allocated.
	if n, ok := fileSize(r); ok && (s.Offset > n || s.FileSize > n-s.Offset) {
		return nil, fmt.Errorf("%d bytes at offset %d: beyond the end of the file (%d bytes)", s.FileSize, s.Offset, n)
	}
	d := &dwSection{name: s.Name, r: r, off: s.Offset, fsize: s.FileSize, size: s.FileSize, order: f.ByteOrder}
	switch {
	case strings.HasPrefix(s.Name, ".zdebug_"):
		// "ZLIB", then the size as 8 bytes big-endian, then a zlib stream.
		var h [12]byte
		if s.FileSize < 12 {
			return nil, errors.New("bad .zdebug header")
		}
		if _, err := r.ReadAt(h[:], int64(s.Offset)); err != nil {
			return nil, err
		}
		if string(h[:4]) != "ZLIB" {
			return nil, errors.New("bad .zdebug header")
		}
		d.comp, d.size, d.off, d.fsize = compressZlib, binary.BigEndian.Uint64(h[4:]), s.Offset+12, s.FileSize-12
	case s.Flags&elf.SHF_COMPRESSED != 0:
		var h [24]byte
		n := 24 // Elf64_Chdr: type, reserved, size, alignment
		if f.Class != elf.ELFCLASS64 {
			n = 12 // Elf32_Chdr: type, size, alignment
		}
		if s.FileSize < uint64(n) {
			return nil, errors.New("short compression header")
		}
		if _, err := r.ReadAt(h[:n], int64(s.Offset)); err != nil {
			return nil, err
		}
		d.comp = f.ByteOrder.Uint32(h[:])
		if n == 24 {
			d.size = f.ByteOrder.Uint64(h[8:])
		} else {
			d.size = uint64(f.ByteOrder.Uint32(h[4:]))
		}
		d.off, d.fsize = s.Offset+uint64(n), s.FileSize-uint64(n)
		if d.comp != compressZlib && d.comp != compressZstd {
			return nil, fmt.Errorf("unknown compression type %d", d.comp)
		}
	}
	if d.size > maxSection {
		return nil, fmt.Errorf("%d bytes decompressed: too large", d.size)
	}
	if d.comp != compressNone && d.size/maxRatio > d.fsize {
		return nil, fmt.Errorf("%d bytes decompressed from %d: more than %d times its compressed size", d.size, d.fsize, maxRatio)
	}
	return d, nil
}

// stream returns a reader of the decompressed section from its start.
func (s *dwSection) stream() (io.Reader, func(), error) {
	raw := io.NewSectionReader(s.r, int64(s.off), int64(s.fsize))
	switch s.comp {
	case compressNone:
		return raw, func() {}, nil
	case compressZlib:
		// The deflate stream inside the zlib one, read directly: the
		// Adler-32 check costs a tenth of the time, and a corrupt stream
		// fails to inflate or to fill the size the header gives anyway.
		var h [2]byte
		if _, err := io.ReadFull(raw, h[:]); err != nil {
			return nil, nil, err
		}
		if h[0]&0x0f != 8 || h[1]&0x20 != 0 || (uint(h[0])<<8|uint(h[1]))%31 != 0 {
			return nil, nil, errors.New("bad zlib header")
		}
		fr := flate.NewReader(bufio.NewReaderSize(raw, 32<<10))
		return fr, func() { fr.Close() }, nil
	default:
		d, err := zstd.NewReader(bufio.NewReaderSize(raw, 32<<10), zstd.WithDecoderConcurrency(1),
			zstd.WithDecoderMaxMemory(max(s.size, 64<<20)))
		if err != nil {
			return nil, nil, err
		}
		return d, d.Close, nil
	}
}

// whole returns the decompressed section, and keeps it: for the small
// sections that are read all over (strings, range lists, addresses).
func (s *dwSection) whole() ([]byte, error) {
	if s.all != nil || s.allErr != nil {
		return s.all, s.allErr
	}
	s.all, s.allErr = s.readAll()
	return s.all, s.allErr
}

// readAll reads the decompressed section without keeping it.
func (s *dwSection) readAll() ([]byte, error) {
	if s.comp == compressNone {
		b := make([]byte, s.size)
		if _, err := s.r.ReadAt(b, int64(s.off)); err != nil {
			return nil, err
		}
		return b, nil
	}
	zr, done, err := s.stream()
	if err != nil {
		return nil, err
	}
	defer done()
	// Read straight into a buffer of the size the header gives, when that
	// is plausible for the input; grow as needed otherwise.
	if s.size <= 64*s.fsize+4096 {
		out := make([]byte, s.size)
		if _, err := io.ReadFull(zr, out); err != nil {
			return nil, fmt.Errorf("decompressing: %w", err)
		}
		return out, nil
	}
	var out bytes.Buffer
	n, err := io.Copy(&out, io.LimitReader(zr, int64(s.size)))
	if err != nil {
		return nil, fmt.Errorf("decompressing: %w", err)
	}
	if uint64(n) != s.size {
		return nil, fmt.Errorf("decompressed %d bytes, header says %d", n, s.size)
	}
	return out.Bytes(), nil
}

// at returns n bytes at off, or fewer at the end of the section.
func (s *dwSection) at(off, n uint64) ([]byte, error) {
	if off > s.size {
		return nil, fmt.Errorf("%s: offset %#x beyond its %d bytes", s.name, off, s.size)
	}
	n = min(n, s.size-off)
	if s.comp != compressNone || s.all != nil {
		all, err := s.whole()
		if err != nil {
			return nil, err
		}
		return all[off : off+n], nil
	}
	b := make([]byte, n)
	if _, err := s.r.ReadAt(b, int64(s.off+off)); err != nil {
		return nil, err
	}
	return b, nil
}

// cstring returns the NUL-terminated string at off.
func (s *dwSection) cstring(off uint64) (string, error) {
	for n := uint64(64); ; n *= 4 {
		b, err := s.at(off, n)
		if err != nil {
			return "", err
		}
		if i := bytes.IndexByte(b, 0); i >= 0 {
			return string(b[:i]), nil
		}
		if uint64(len(b)) < n {
			return "", fmt.Errorf("%s: unterminated string at %#x", s.name, off)
		}
	}
}

// uint reads an unsigned integer of size bytes (1, 2, 3, 4 or 8) at off.
func (s *dwSection) uint(off uint64, size int) (uint64, error) {
	b, err := s.at(off, uint64(size))
	if err != nil {
		return 0, err
	}
	if len(b) < size {
		return 0, fmt.Errorf("%s: %d bytes at %#x beyond its end", s.name, size, off)
	}
	return readUint(s.order, b, size), nil
}

func readUint(order binary.ByteOrder, b []byte, size int) uint64 {
	switch size {
	case 1:
		return uint64(b[0])
	case 2:
		return uint64(order.Uint16(b))
	case 3:
		if order == binary.BigEndian {
			return uint64(b[0])<<16 | uint64(b[1])<<8 | uint64(b[2])
		}
		return uint64(b[2])<<16 | uint64(b[1])<<8 | uint64(b[0])
	case 4:
		return uint64(order.Uint32(b))
	default:
		return order.Uint64(b)
	}
}

// An extent is a part of a section that fetch reads: from off, as long as
// length says once it has seen enough of its first bytes.
type extent struct {
	off uint64
	// length returns the extent's length from its first bytes b, or
	// ok false when it needs more of them; an error when they are bad.
	length func(b []byte) (n uint64, ok bool, err error)

	data []byte // set by fetch
	err  error  // set by fetch when this extent could not be read
}

// fetch reads the extents: from the file for an uncompressed section; for
// a compressed one in one pass over the decompressed stream, which stops
// after the last extent. Extents may overlap. The error is for the pass as
// a whole; an extent that is bad on its own has its err set.
func (s *dwSection) fetch(exts []*extent) error {
	sort.Slice(exts, func(i, j int) bool { return exts[i].off < exts[j].off })
	if s.comp != compressNone && s.all == nil && s.passes >= keepAfter {
		if _, err := s.whole(); err != nil {
			return err
		}
	}
	if s.comp == compressNone || s.all != nil {
		for _, e := range exts {
			e.data, e.err = s.readExtent(e, func(off, n uint64) ([]byte, error) { return s.at(off, n) })
		}
		return nil
	}
	if len(exts) == 0 {
		return nil
	}
	if s.zr == nil || exts[0].off < s.zpos {
		s.closeStream()
		s.passes++
		zr, done, err := s.stream()
		if err != nil {
			return err
		}
		s.zr, s.zdone = zr, done
	}
	zr, pos := s.zr, s.zpos
	defer func() {
		s.zpos = pos
		if pos >= s.size {
			s.closeStream()
		}
	}()
	// The bytes read so far that a later extent may still need: from
	// bufOff, the decompressed stream's position minus len(buf).
	var buf []byte
	bufOff := pos
	read := func(off, n uint64) ([]byte, error) {
		n = min(n, s.size-min(off, s.size))
		if off < bufOff {
			return nil, fmt.Errorf("%s: extents out of order", s.name)
		}
		if off > pos {
			// Skip to off, keeping nothing before it.
			if _, err := io.CopyN(io.Discard, zr, int64(off-pos)); err != nil {
				return nil, fmt.Errorf("%s: decompressing: %w", s.name, err)
			}
			pos, buf, bufOff = off, buf[:0], off
		}
		if off > bufOff {
			buf, bufOff = buf[off-bufOff:], off
		}
		if end := off + n; end > pos {
			have := len(buf)
			buf = append(buf, make([]byte, end-pos)...)
			if _, err := io.ReadFull(zr, buf[have:]); err != nil {
				return nil, fmt.Errorf("%s: decompressing: %w", s.name, err)
			}
			pos = end
		}
		return buf[:n:n], nil
	}
	for _, e := range exts {
		data, err := s.readExtent(e, read)
		if err != nil && errors.Is(err, errStream) {
			pos = s.size // the stream is broken: start again next time
			return err
		}
		// Copied out of the buffer, which later extents reuse.
		e.data, e.err = bytes.Clone(data), err
	}
	return nil
}

var errStream = errors.New("decompressing")

// readExtent reads e with read, which returns up to n bytes at off.
func (s *dwSection) readExtent(e *extent, read func(off, n uint64) ([]byte, error)) ([]byte, error) {
	if e.off >= s.size {
		return nil, fmt.Errorf("%s: offset %#x beyond its %d bytes", s.name, e.off, s.size)
	}
	for n := uint64(64); ; n *= 4 {
		b, err := read(e.off, n)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", errStream, err)
		}
		l, ok, err := e.length(b)
		if err != nil {
			return nil, fmt.Errorf("%s at %#x: %w", s.name, e.off, err)
		}
		if ok {
			if l > s.size-e.off {
				return nil, fmt.Errorf("%s at %#x: %d bytes beyond its end", s.name, e.off, l)
			}
			if l <= uint64(len(b)) {
				return b[:l], nil
			}
			b, err := read(e.off, l)
			if err != nil {
				return nil, fmt.Errorf("%w: %w", errStream, err)
			}
			return b, nil
		}
		if uint64(len(b)) < n {
			return nil, fmt.Errorf("%s at %#x: cut at the end of the section", s.name, e.off)
		}
	}
}

// initialLength is an extent's length function for units that start with a
// DWARF initial length: .debug_info units, line tables.
func initialLength(order binary.ByteOrder) func(b []byte) (uint64, bool, error) {
	return func(b []byte) (uint64, bool, error) {
		if len(b) < 4 {
			return 0, false, nil
		}
		switch l := order.Uint32(b); {
		case l < 0xfffffff0:
			return uint64(l) + 4, true, nil
		case l == 0xffffffff:
			if len(b) < 12 {
				return 0, false, nil
			}
			n := order.Uint64(b[4:])
			if n > maxSection {
				return 0, false, fmt.Errorf("unit length %#x", n)
			}
			return n + 12, true, nil
		default:
			return 0, false, fmt.Errorf("reserved unit length %#x", l)
		}
	}
}
