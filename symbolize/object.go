package symbolize

import (
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/heapscope/heapscope/buildid"
	"github.com/heapscope/heapscope/event"
)

// loc is an address resolved within an object: one per frame, innermost
// first, before the mapping's module, offset and address are added.
type loc struct {
	Function string
	File     string
	Line     int
	// qualified says Function came from a mangled name: for C++ and Rust,
	// the full name with its namespaces and parameters.
	qualified bool
}

// object is one ELF file as the symbolizer sees it: the file that was mapped,
// or its separate debug file, or both; its symbols, its DWARF (decoded
// lazily), and the addresses resolved in it so far, by virtual address.
//
// Its segments and symbols are set when it is made and only read after; mu
// guards the rest.
type object struct {
	mu    sync.Mutex
	name  string // the module path, for warnings
	warn  func(format string, args ...any)
	loads []segment // from the mapped file: file offset to virtual address
	// execs are the executable segments of a debug file, used when only it
	// could be read (its segment offsets are zeroed by objcopy).
	execs      []segment
	syms       symtab
	dw         *dwarfInfo
	demangle   bool
	closers    []io.Closer // the files read lazily (DWARF)
	cache      map[uint64][]loc
	dwarfOpen  func() (*dwarfInfo, error)
	dwarfTried bool
}

// segment is a PT_LOAD program header.
type segment struct {
	off, vaddr, filesz, memsz uint64
}

func (o *object) close() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.dw != nil {
		o.dw.close()
	}
	var first error
	for _, c := range o.closers {
		if err := c.Close(); err != nil && first == nil {
			first = err
		}
	}
	o.closers = nil
	return first
}

// vaddr converts an address in a mapping of o to o's virtual address.
func (o *object) vaddr(m event.Module, pc uint64) (uint64, bool) {
	off := pc - m.Start + m.Offset
	for _, s := range o.loads {
		if off >= s.off && off-s.off < s.filesz {
			return off - s.off + s.vaddr, true
		}
	}
	if len(o.loads) > 0 || len(o.execs) == 0 {
		return 0, false
	}
	// Only a debug file: assume the mapping starts at the page where its
	// executable segment starts, which is how ld.so maps it. With several
	// executable segments, prefer the one whose page offset the mapping's
	// offset equals (offsets equal to addresses, the GNU ld layout).
	const page = 4096
	s := o.execs[0]
	for _, e := range o.execs {
		if e.vaddr&^(page-1) == m.Offset {
			s = e
		}
	}
	va := s.vaddr&^(page-1) + (pc - m.Start)
	if va >= s.vaddr+s.memsz {
		return 0, false
	}
	return va, true
}

// lookup resolves a virtual address of o, innermost frame first; nil when o
// knows nothing of it. The result is cached and shared.
func (o *object) lookup(va uint64) []loc {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.lookupLocked(va)
}

// prefetch resolves the virtual addresses vas of o, reading the DWARF units
// they fall in in one batch.
func (o *object) prefetch(vas []uint64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	todo := vas[:0:0]
	for _, va := range vas {
		if _, ok := o.cache[va]; !ok {
			todo = append(todo, va)
		}
	}
	if len(todo) == 0 {
		return
	}
	if dw := o.dwarf(); dw != nil {
		dw.prepare(todo)
	}
	for _, va := range todo {
		o.lookupLocked(va)
	}
}

func (o *object) lookupLocked(va uint64) []loc {
	if l, ok := o.cache[va]; ok {
		return l
	}
	var locs []loc
	if dw := o.dwarf(); dw != nil {
		locs = dw.lookup(va, o.demangle)
	}
	// The symbol table names what DWARF does not, and qualifies what DWARF
	// names plainly: GCC gives C++ functions with internal linkage no
	// linkage name, but their symbols are mangled.
	if n := len(locs); n == 0 || !locs[n-1].qualified {
		if sym, ok := o.syms.lookup(va); ok && (n == 0 || locs[n-1].Function == "" || isMangled(sym.name)) {
			name := sym.name
			if o.demangle {
				name = demangleName(name)
			}
			if n == 0 {
				// No DWARF: a local symbol still tells its file.
				locs = []loc{{File: sym.file}}
			}
			locs[len(locs)-1].Function = name
		}
	}
	if o.cache == nil {
		o.cache = map[uint64][]loc{}
	}
	o.cache[va] = locs
	return locs
}

// dwarf returns o's DWARF, reading its sections on first use; nil when it has
// none or it cannot be read.
func (o *object) dwarf() *dwarfInfo {
	if o.dwarfTried {
		return o.dw
	}
	o.dwarfTried = true
	if o.dwarfOpen == nil {
		return nil
	}
	dw, err := o.dwarfOpen()
	if err != nil {
		o.warn("%s: DWARF: %v", o.name, err)
		return nil
	}
	o.dw = dw
	return dw
}

func newELF(r io.ReaderAt) (f *elf.File, err error) {
	defer func() {
		if p := recover(); p != nil {
			f, err = nil, fmt.Errorf("corrupt ELF: %v", p)
		}
	}()
	return elf.NewFile(r)
}

// buildID is f's build-id; one that cannot be read is none, and the file
// is then not taken for the traced build.
func buildID(f *elf.File) string {
	id, _ := buildid.ELF(f)
	return id
}

// elfFile is an ELF file and the reader of its raw bytes.
type elfFile struct {
	*elf.File
	r io.ReaderAt
}

// load reads what there is to read for module m, whose file is at path
// (m.Path under the sysroot). It never fails: what cannot be read becomes a
// warning, and the object resolves what it can.
func (s *Symbolizer) loadObject(m event.Module, path string) *object {
	// Files stay open for the lazy reading of DWARF, until Close.
	files := map[*os.File]bool{}
	open := func(p string) (*elfFile, error) {
		r, err := openFile(p)
		if err != nil {
			return nil, err
		}
		f, err := newELF(r)
		if err != nil {
			r.Close()
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		files[r] = true
		return &elfFile{f, r}, nil
	}
	reject := func(f *elfFile) {
		r := f.r.(*os.File)
		r.Close()
		delete(files, r)
	}

	var main *elfFile
	id := m.BuildID
	if f, err := open(path); err != nil {
		s.warnf("%s: %v", m.Path, err)
	} else if got := buildID(f.File); m.BuildID != "" && got != m.BuildID {
		s.warnf("%s: build-id %s, not the traced file's %s: not used", path, orNone(got), m.BuildID)
		reject(f)
	} else {
		main, id = f, got
	}

	debug := s.findDebug(open, reject, id, main, path, m.Path)
	if main == nil && debug == nil && m.BuildID != "" {
		s.warnf("%s: no file with build-id %s found", m.Path, m.BuildID)
	}
	o := newObject(m.Path, main, debug, !s.opts.NoDemangle, s.warnf)
	for f := range files {
		o.closers = append(o.closers, f)
	}
	return o
}

func orNone(id string) string {
	if id == "" {
		return "(none)"
	}
	return id
}

// findDebug looks for the separate debug file of a module: by build-id under
// each debug root, then by the main file's .gnu_debuglink next to it, in its
// .debug directory and under each debug root.
func (s *Symbolizer) findDebug(open func(string) (*elfFile, error), reject func(*elfFile), id string, main *elfFile, path, modPath string) *elfFile {
	if len(id) > 2 {
		for _, root := range s.debugDirs {
			p := filepath.Join(root, ".build-id", id[:2], id[2:]+".debug")
			f, err := open(p)
			if err != nil {
				if !errors.Is(err, os.ErrNotExist) {
					s.warnf("%s: %v", modPath, err)
				}
				continue
			}
			if got := buildID(f.File); got != id {
				s.warnf("%s: build-id %s, not %s: not used", p, orNone(got), id)
				reject(f)
				continue
			}
			return f
		}
	}
	if main == nil {
		return nil
	}
	name, crc, ok := debugLink(main.File)
	if !ok {
		return nil
	}
	var cands []string
	for _, dir := range []string{filepath.Dir(path)} {
		cands = append(cands, filepath.Join(dir, name), filepath.Join(dir, ".debug", name))
	}
	for _, root := range s.debugDirs {
		cands = append(cands, filepath.Join(root, filepath.Dir(modPath), name))
	}
	for _, p := range cands {
		if p == path {
			continue
		}
		f, err := open(p)
		if err != nil {
			continue
		}
		// With build-ids both sides, they must match; without, the CRC the
		// link records must.
		if id != "" {
			if got := buildID(f.File); got == id {
				return f
			}
			s.warnf("%s: build-id does not match %s: not used", p, modPath)
			reject(f)
			continue
		}
		if fileCRC(p) == crc {
			return f
		}
		s.warnf("%s: CRC does not match the debug link of %s: not used", p, modPath)
		reject(f)
	}
	return nil
}

// debugLink reads .gnu_debuglink: a file name, padding, and a CRC-32.
func debugLink(f *elf.File) (name string, crc uint32, ok bool) {
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	sec := f.Section(".gnu_debuglink")
	if sec == nil || sec.Flags&elf.SHF_COMPRESSED != 0 || sec.Size > 4096 {
		// (A name and a CRC: never compressed, never large.)
		return "", 0, false
	}
	b, err := sec.Data()
	if err != nil {
		return "", 0, false
	}
	i := bytes.IndexByte(b, 0)
	if i <= 0 {
		return "", 0, false
	}
	name = string(b[:i])
	at := (i + 4) &^ 3
	if at+4 > len(b) || strings.ContainsRune(name, '/') {
		return "", 0, false
	}
	return name, f.ByteOrder.Uint32(b[at:]), true
}

func fileCRC(path string) uint32 {
	r, err := openFile(path)
	if err != nil {
		return 0
	}
	defer r.Close()
	h := crc32.NewIEEE()
	if _, err := io.Copy(h, r); err != nil {
		return 0
	}
	return h.Sum32()
}

// newObject builds an object from the mapped file main and its debug file;
// either may be nil. Symbols are read now, DWARF when first needed.
func newObject(name string, main, debug *elfFile, demangle bool, warn func(string, ...any)) *object {
	o := &object{name: name, warn: warn, demangle: demangle}
	if main != nil {
		o.loads = segments(main.File, false)
	} else if debug != nil {
		o.execs = segments(debug.File, true)
	}
	var b symtabBuilder
	for _, f := range []*elfFile{main, debug} {
		if f == nil {
			continue
		}
		if err := tablesInFile(f); err != nil {
			warn("%s: symbols: %v", name, err)
			continue
		}
		if err := b.add(f.File); err != nil {
			warn("%s: symbols: %v", name, err)
		}
	}
	o.syms = b.build()
	// DWARF from the debug file when it has some, else from the file itself.
	for _, f := range []*elfFile{debug, main} {
		if f != nil && hasDWARF(f.File) {
			o.dwarfOpen = func() (*dwarfInfo, error) { return openDWARF(f, name, warn) }
			break
		}
	}
	if (main != nil || debug != nil) && len(o.syms) == 0 && o.dwarfOpen == nil {
		warn("%s: no symbols and no debug information: its frames are module+offset", name)
	}
	return o
}

// tablesInFile checks that f's symbol and string tables lie within the
// file, before package elf reads them: their sizes come from the file; and
// that those it would decompress (SHF_COMPRESSED) fit the file's budget
// (dwarfBudget).
func tablesInFile(f *elfFile) error {
	n, ok := fileSize(f.r)
	if !ok {
		return nil
	}
	var inflated uint64
	for _, s := range f.Sections {
		switch s.Type {
		case elf.SHT_SYMTAB, elf.SHT_DYNSYM, elf.SHT_STRTAB:
			if s.Offset > n || s.FileSize > n-s.Offset {
				return fmt.Errorf("section %s: %d bytes at offset %d: beyond the end of the file (%d bytes)", s.Name, s.FileSize, s.Offset, n)
			}
			if s.Flags&elf.SHF_COMPRESSED != 0 {
				inflated += s.Size // decompressed whole by debug/elf
			}
		}
	}
	if inflated > dwarfBudget(n) {
		return fmt.Errorf("compressed symbol tables of %d bytes, more than a file of %d bytes can honestly hold (%d)", inflated, n, dwarfBudget(n))
	}
	return nil
}

// segments returns the PT_LOAD segments of f, or only the executable ones.
func segments(f *elf.File, execOnly bool) []segment {
	var segs []segment
	for _, p := range f.Progs {
		if p.Type != elf.PT_LOAD || execOnly && p.Flags&elf.PF_X == 0 {
			continue
		}
		segs = append(segs, segment{off: p.Off, vaddr: p.Vaddr, filesz: p.Filesz, memsz: p.Memsz})
	}
	return segs
}

func hasDWARF(f *elf.File) bool {
	for _, name := range []string{".debug_info", ".zdebug_info"} {
		if s := f.Section(name); s != nil && s.Type != elf.SHT_NOBITS && s.Size > 0 {
			return true
		}
	}
	return false
}
