package census

import (
	"debug/elf"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/heapscope/heapscope/buildid"
	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/internal/ebpf/sites"
	"github.com/heapscope/heapscope/internal/errs"
	"github.com/heapscope/heapscope/internal/proc"
)

// DefaultDebugDir is where Debian's -dbg packages install separate debug
// files (ROOT/.build-id/xx/yyyy.debug).
const DefaultDebugDir = "/usr/lib/debug"

// Options tune how Open finds libc's debug information.
type Options struct {
	// DebugDirs are the roots searched for libc's debug file by build-id.
	// By default DefaultDebugDir, then the same folder under the process's
	// root (/proc/PID/root), for a process in another mount namespace.
	DebugDirs []string
}

// knownVersions are the glibc versions whose malloc the census walks: the
// DWARF gives the layout, but not what the code does with it (safe-linked
// lists, the heap size, what a fencepost looks like), and the census has
// been checked against these only.
var knownVersions = map[string]bool{"2.36": true}

// Libc is the glibc of one process, as the census reads it: where its
// malloc keeps its state and how that is laid out. Open finds it from the
// files the process maps; Take reads the heap with it.
type Libc struct {
	PID       int
	Path      string // libc's path, as the process maps it
	BuildID   string // libc's build-id
	DebugFile string // the debug file the layout and symbols come from
	Version   string // glibc's version, "2.36"

	layout    *Layout
	mainArena uint64 // &main_arena in the process
	mp        uint64 // &mp_
	tcacheOff uint64 // the tcache variable's offset in libc's TLS block
	tcacheKey uint64 // &tcache_key, 0 if the symbol is not there
	dynamic   uint64 // libc's _DYNAMIC in the process: its link_map's l_ld
	rDebug    uint64 // ld.so's _r_debug in the process, 0 if not found
	code      []Span // malloc.c's code in the process
}

// Open finds the glibc malloc of process pid from its mappings, and the
// layout of its structures from the DWARF of libc's debug file (libc6-dbg),
// matched by build-id. It does not read the process's memory, so it can be
// called before the process is stopped, to keep the pause short; the layout
// of each debug file is read once per heapscope process.
//
// A process whose malloc is not glibc's (jemalloc, tcmalloc, mimalloc, musl)
// is errs.ErrNotSupported; a libc whose layout cannot be confirmed (no debug
// file, statically linked, a version the census does not know) is
// errs.ErrNoLayout.
func Open(pid int, maps []proc.Mapping, o Options) (*Libc, error) {
	if err := checkAllocator(pid, maps); err != nil {
		return nil, err
	}
	m, ok := findLibc(maps)
	if !ok {
		return nil, noLibc(pid, maps)
	}
	l := &Libc{PID: pid, Path: m.Path}
	main, err := elf.Open(proc.MappedFile(pid, m))
	if err != nil {
		return nil, fmt.Errorf("census: pid %d: %s: %w", pid, m.Path, err)
	}
	defer main.Close()
	if l.BuildID, err = buildid.ELF(main); err != nil {
		return nil, fmt.Errorf("census: pid %d: %s: %w", pid, m.Path, err)
	}
	dirs := o.DebugDirs
	if dirs == nil {
		dirs = []string{DefaultDebugDir, proc.Root + "/" + strconv.Itoa(pid) + "/root" + DefaultDebugDir}
	}
	debug, debugPath, err := findDebug(main, proc.MappedFile(pid, m), l.BuildID, dirs)
	if err != nil {
		return nil, fmt.Errorf("census: pid %d: %s: %w", pid, m.Path, err)
	}
	if debug != main {
		defer debug.Close()
	}
	l.DebugFile = debugPath

	bias, err := loadBias(main, maps, m.Path)
	if err != nil {
		return nil, fmt.Errorf("census: pid %d: %s: %w", pid, m.Path, err)
	}
	if err := l.symbols(main, debug, bias); err != nil {
		return nil, fmt.Errorf("census: pid %d: %s (debug file %s): %w", pid, m.Path, debugPath, err)
	}
	if !knownVersions[l.Version] {
		return nil, fmt.Errorf("census: pid %d: %s is glibc %s: %w: the census knows the malloc of glibc %s only",
			pid, m.Path, l.Version, errs.ErrNoLayout, strings.Join(keys(knownVersions), ", "))
	}
	debugID := l.BuildID + ":" + debugPath
	l.layout, err = cachedLayout(debugID, func() (*Layout, error) {
		d, err := debug.DWARF()
		if err != nil {
			return nil, fmt.Errorf("%w: %v", errs.ErrNoLayout, err)
		}
		return LayoutFromDWARF(d)
	})
	if err != nil {
		return nil, fmt.Errorf("census: pid %d: %s (debug file %s): %w", pid, m.Path, debugPath, err)
	}
	for _, c := range l.layout.mallocCode {
		l.code = append(l.code, Span{c.Start + bias, c.End + bias})
	}
	l.rDebug = findRDebug(pid, maps)
	return l, nil
}

func keys(m map[string]bool) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	return ks
}

// libcName matches glibc's file names: libc.so.6, and libc-2.NN.so before
// 2.34.
var libcName = regexp.MustCompile(`^libc(\.so\.6|-2\.[0-9]+\.so)$`)

func findLibc(maps []proc.Mapping) (proc.Mapping, bool) {
	for _, m := range maps {
		if m.File() && libcName.MatchString(filepath.Base(m.Path)) {
			return m, true
		}
	}
	return proc.Mapping{}, false
}

// noLibc says why a process maps no glibc: musl, or a static executable.
func noLibc(pid int, maps []proc.Mapping) error {
	for _, m := range maps {
		if b := filepath.Base(m.Path); strings.HasPrefix(b, "ld-musl") || strings.HasPrefix(b, "libc.musl") {
			return fmt.Errorf("census: pid %d maps musl's libc (%s): %w: the census reads glibc's malloc", pid, m.Path, errs.ErrNotSupported)
		}
	}
	exe, _ := proc.Exe(pid)
	return fmt.Errorf("census: pid %d (%s) maps no libc.so.6: %w: a statically linked glibc's malloc has no debug information the census can match", pid, exe, errs.ErrNoLayout)
}

// otherAllocators are the shared libraries of allocators that replace
// glibc's malloc, by the start of their file names.
var otherAllocators = map[string]event.Heap{
	"libjemalloc":         event.HeapJemalloc,
	"libtcmalloc":         event.HeapTcmalloc,
	"libmimalloc":         event.HeapMimalloc,
	"libtcmalloc_minimal": event.HeapTcmalloc,
}

// checkAllocator refuses a process whose malloc is jemalloc, tcmalloc or
// mimalloc: mapped as a shared library, or linked into the executable.
func checkAllocator(pid int, maps []proc.Mapping) error {
	exe, _ := proc.Exe(pid)
	seen := map[string]bool{}
	for _, m := range maps {
		if !m.File() || seen[m.Path] {
			continue
		}
		seen[m.Path] = true
		base := filepath.Base(m.Path)
		for prefix, h := range otherAllocators {
			if strings.HasPrefix(base, prefix+".") || strings.HasPrefix(base, prefix+"-") {
				return fmt.Errorf("census: pid %d uses %s (%s): %w: the census reads glibc's malloc", pid, h, m.Path, errs.ErrNotSupported)
			}
		}
		if m.Path != exe {
			continue
		}
		f, err := elf.Open(proc.MappedFile(pid, m))
		if err != nil {
			continue // the executable's file is gone: libc's check decides
		}
		h, ok := sites.Identify(f)
		f.Close()
		if ok {
			return fmt.Errorf("census: pid %d: its executable %s has %s linked in: %w: the census reads glibc's malloc", pid, m.Path, h, errs.ErrNotSupported)
		}
	}
	return nil
}

// findDebug returns the file with libc's DWARF and full symbol table: the
// separate debug file by build-id under one of dirs, checked by build-id,
// or libc itself when it was not stripped.
func findDebug(main *elf.File, mainPath, id string, dirs []string) (*elf.File, string, error) {
	if main.Section(".debug_info") != nil && hasSymbol(main, "main_arena") {
		return main, mainPath, nil
	}
	if len(id) < 3 {
		return nil, "", fmt.Errorf("%w: libc has no build-id to find its debug file by", errs.ErrNoLayout)
	}
	var tried []string
	for _, dir := range dirs {
		p := filepath.Join(dir, ".build-id", id[:2], id[2:]+".debug")
		tried = append(tried, p)
		f, err := elf.Open(p)
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) {
				return nil, "", fmt.Errorf("%s: %w", p, err)
			}
			continue
		}
		if got, _ := buildid.ELF(f); got != id {
			f.Close()
			return nil, "", fmt.Errorf("%w: %s has build-id %q, not libc's %s", errs.ErrNoLayout, p, got, id)
		}
		return f, p, nil
	}
	return nil, "", fmt.Errorf("%w: no debug file for libc's build-id %s (tried %s): install libc6-dbg, whose DWARF says where glibc keeps its heap", errs.ErrNoLayout, id, strings.Join(tried, ", "))
}

func hasSymbol(f *elf.File, name string) bool {
	syms, _ := f.Symbols()
	for _, s := range syms {
		if s.Name == name {
			return true
		}
	}
	return false
}

// loadBias returns what to add to a vaddr of f to find it in the process,
// from the mapping of path that starts at file offset 0 or any other that
// falls in one of f's loaded segments.
func loadBias(f *elf.File, maps []proc.Mapping, path string) (uint64, error) {
	for _, m := range maps {
		if m.Path != path {
			continue
		}
		for _, p := range f.Progs {
			if p.Type != elf.PT_LOAD || m.Offset < p.Off || m.Offset >= p.Off+p.Filesz {
				continue
			}
			if p.Vaddr%4096 != p.Off%4096 {
				continue
			}
			return m.Start - (p.Vaddr + (m.Offset - p.Off)), nil
		}
	}
	return 0, fmt.Errorf("no mapping of its loaded segments")
}

// symbols finds, in the debug file's full symbol table, main_arena, mp_,
// the thread-local tcache and the version string, and in libc, _DYNAMIC.
func (l *Libc) symbols(main, debug *elf.File, bias uint64) error {
	syms, err := debug.Symbols()
	if err != nil {
		return fmt.Errorf("%w: reading the symbol table: %v", errs.ErrNoLayout, err)
	}
	var version elf.Symbol
	found := map[string]bool{}
	for _, s := range syms {
		switch {
		case s.Name == "main_arena" && elf.ST_TYPE(s.Info) == elf.STT_OBJECT:
			l.mainArena = s.Value + bias
		case s.Name == "mp_" && elf.ST_TYPE(s.Info) == elf.STT_OBJECT:
			l.mp = s.Value + bias
		case s.Name == "tcache" && elf.ST_TYPE(s.Info) == elf.STT_TLS:
			l.tcacheOff = s.Value
		case s.Name == "tcache_key" && elf.ST_TYPE(s.Info) == elf.STT_OBJECT:
			l.tcacheKey = s.Value + bias
		case s.Name == "__libc_version" && elf.ST_TYPE(s.Info) == elf.STT_OBJECT:
			version = s
		default:
			continue
		}
		found[s.Name] = true
	}
	for _, name := range []string{"main_arena", "mp_", "tcache", "__libc_version"} {
		if !found[name] {
			return fmt.Errorf("%w: no symbol %s", errs.ErrNoLayout, name)
		}
	}
	v, err := readString(main, version.Value, 32)
	if err != nil {
		return fmt.Errorf("%w: reading glibc's version: %v", errs.ErrNoLayout, err)
	}
	l.Version = v
	for _, p := range main.Progs {
		if p.Type == elf.PT_DYNAMIC {
			l.dynamic = p.Vaddr + bias
		}
	}
	if l.dynamic == 0 {
		return fmt.Errorf("%w: libc has no dynamic section", errs.ErrNoLayout)
	}
	return nil
}

// readString reads a NUL-terminated string of at most max bytes at vaddr
// from the file's loaded data.
func readString(f *elf.File, vaddr uint64, max int) (string, error) {
	for _, p := range f.Progs {
		if p.Type != elf.PT_LOAD || vaddr < p.Vaddr || vaddr >= p.Vaddr+p.Filesz {
			continue
		}
		n := max
		if rest := p.Vaddr + p.Filesz - vaddr; uint64(n) > rest {
			n = int(rest)
		}
		b := make([]byte, n)
		k, err := p.ReadAt(b, int64(vaddr-p.Vaddr))
		if k == 0 && err != nil {
			return "", err
		}
		s, _, ok := strings.Cut(string(b[:k]), "\x00")
		if !ok {
			return "", fmt.Errorf("no string at %#x", vaddr)
		}
		return s, nil
	}
	return "", fmt.Errorf("%#x is in no loaded segment", vaddr)
}

// findRDebug returns the address of ld.so's _r_debug in the process (0 if
// there is none): the head of the list of loaded objects, where libc's
// link_map holds its TLS block's offset.
func findRDebug(pid int, maps []proc.Mapping) uint64 {
	seen := map[string]bool{}
	for _, m := range maps {
		base := filepath.Base(m.Path)
		if !m.File() || seen[m.Path] || !strings.HasPrefix(base, "ld-") {
			continue
		}
		seen[m.Path] = true
		f, err := elf.Open(proc.MappedFile(pid, m))
		if err != nil {
			continue
		}
		syms, _ := f.DynamicSymbols()
		bias, berr := loadBias(f, maps, m.Path)
		f.Close()
		if berr != nil {
			continue
		}
		for _, s := range syms {
			if s.Name == "_r_debug" && s.Section != elf.SHN_UNDEF {
				return s.Value + bias
			}
		}
	}
	return 0
}
