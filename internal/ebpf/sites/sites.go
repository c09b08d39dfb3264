// Package sites finds the allocator entry points in an ELF file (the malloc
// family, operator new and delete) and decides where in each to put a
// uprobe. It reads files only; attaching is the tracer's business.
package sites

import (
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/heapscope/heapscope/event"
	"golang.org/x/arch/x86/x86asm"
)

// Role says how a probe on a function observes a call.
type Role uint8

// The roles.
const (
	// RoleAlloc: an entry probe reads the arguments and a return probe the
	// block (malloc, calloc, realloc, the aligned family).
	RoleAlloc Role = iota
	// RoleFree: an entry probe reads the block (free).
	RoleFree
	// RoleWrapAlloc: operator new. It calls malloc (or aligned_alloc),
	// whose probes report the call under new's name.
	RoleWrapAlloc
	// RoleWrapFree: operator delete, which calls free.
	RoleWrapFree
)

func (r Role) String() string {
	switch r {
	case RoleAlloc:
		return "alloc"
	case RoleFree:
		return "free"
	case RoleWrapAlloc:
		return "wrap-alloc"
	case RoleWrapFree:
		return "wrap-free"
	}
	return fmt.Sprintf("role(%d)", uint8(r))
}

func (r Role) hasReturn() bool { return r == RoleAlloc }

// argRegs are the registers the probe reads at the placed instruction.
func (r Role) argRegs() []x86asm.Reg {
	if r == RoleAlloc {
		return []x86asm.Reg{x86asm.RDI, x86asm.RSI, x86asm.RDX}
	}
	return []x86asm.Reg{x86asm.RDI}
}

// Site is one allocator entry point in a file.
type Site struct {
	Func   event.Func
	Role   Role
	Symbol string // the name it was found under (the first, when aliased)
	// Addr is the function's virtual address in the file, Offset its file
	// offset (what a uprobe takes), Size its length in bytes.
	Addr, Offset, Size uint64
	Placement          Placement
}

// ProbeOffset is the file offset to put the uprobe at.
func (s Site) ProbeOffset() uint64 { return s.Offset + s.Placement.Offset }

func (s Site) String() string {
	return fmt.Sprintf("%s %s@%#x %v", s.Func, s.Symbol, s.Offset, s.Placement)
}

// The C allocator's functions, by symbol name.
var cFuncs = map[string]event.Func{
	"malloc":         event.FuncMalloc,
	"calloc":         event.FuncCalloc,
	"realloc":        event.FuncRealloc,
	"reallocarray":   event.FuncReallocarray,
	"free":           event.FuncFree,
	"posix_memalign": event.FuncPosixMemalign,
	"aligned_alloc":  event.FuncAlignedAlloc,
	"memalign":       event.FuncMemalign,
	"valloc":         event.FuncValloc,
	"pvalloc":        event.FuncPvalloc,
}

// Other allocators' own names for the C functions, besides the standard
// ones they also define: jemalloc's with its configurable prefix (je_ in
// builds that keep the C library's malloc) and its extended API,
// tcmalloc's and mimalloc's.
var prefixes = []string{"je_", "tc_", "mi_"}

var jemallocFuncs = map[string]event.Func{
	"mallocx":  event.FuncMalloc,
	"rallocx":  event.FuncRealloc,
	"dallocx":  event.FuncFree,
	"sdallocx": event.FuncFree,
}

// cxxFunc classifies the Itanium-mangled names of operator new and delete
// (all variants: sized, aligned, nothrow) on LP64.
func cxxFunc(name string) (event.Func, bool) {
	switch {
	case strings.HasPrefix(name, "_Znwm"):
		return event.FuncNew, true
	case strings.HasPrefix(name, "_Znam"):
		return event.FuncNewArray, true
	case strings.HasPrefix(name, "_ZdlPv"):
		return event.FuncDelete, true
	case strings.HasPrefix(name, "_ZdaPv"):
		return event.FuncDeleteArray, true
	}
	return 0, false
}

// Classify returns the function and role a symbol name stands for, if it is
// an allocator entry point.
func Classify(name string) (event.Func, Role, bool) {
	f, ok := cFuncs[name]
	for _, p := range prefixes {
		if rest, cut := strings.CutPrefix(name, p); cut && !ok {
			f, ok = cFuncs[rest]
		}
	}
	if !ok {
		f, ok = jemallocFuncs[strings.TrimPrefix(name, "je_")]
	}
	if ok {
		r := RoleAlloc
		if f == event.FuncFree {
			r = RoleFree
		}
		return f, r, true
	}
	if f, ok := cxxFunc(name); ok {
		r := RoleWrapAlloc
		if f == event.FuncDelete || f == event.FuncDeleteArray {
			r = RoleWrapFree
		}
		return f, r, true
	}
	return 0, 0, false
}

// ErrNotELF64 is returned for files that are not x86-64 ELF.
var ErrNotELF64 = errors.New("not an x86-64 ELF file")

// Find returns the allocator entry points defined in f, placed. Aliases (two
// names at one address, like glibc's memalign and aligned_alloc) give one
// site, named after the first in this order: the C names, then the C++
// ones. A file that defines none gives none.
func Find(f *elf.File) ([]Site, error) { return findIn(f, false) }

// FindOwn is Find for a file that is itself an allocator (jemalloc,
// tcmalloc, mimalloc; see Identify), whose operator new and delete may be
// its own entry points rather than wrappers of malloc and free: one that
// calls nothing through the PLT is probed as an allocation or a free
// function (RoleAlloc, RoleFree) and reports its calls itself.
func FindOwn(f *elf.File) ([]Site, error) { return findIn(f, true) }

func findIn(f *elf.File, own bool) ([]Site, error) {
	if f.Class != elf.ELFCLASS64 || f.Machine != elf.EM_X86_64 {
		return nil, ErrNotELF64
	}
	var syms []elf.Symbol
	if s, err := f.DynamicSymbols(); err == nil {
		syms = append(syms, s...)
	}
	if s, err := f.Symbols(); err == nil {
		syms = append(syms, s...)
	}

	byAddr := map[uint64]*Site{}
	for _, s := range syms {
		if elf.ST_TYPE(s.Info) != elf.STT_FUNC && elf.ST_TYPE(s.Info) != elf.STT_GNU_IFUNC {
			continue
		}
		if s.Section == elf.SHN_UNDEF || s.Value == 0 || elf.ST_TYPE(s.Info) == elf.STT_GNU_IFUNC {
			continue
		}
		name, _, _ := strings.Cut(s.Name, "@") // versioned names
		fn, role, ok := Classify(name)
		if !ok {
			continue
		}
		if old, ok := byAddr[s.Value]; ok {
			if rank(fn) >= rank(old.Func) {
				continue
			}
		}
		byAddr[s.Value] = &Site{Func: fn, Role: role, Symbol: name, Addr: s.Value, Size: s.Size}
	}

	sites := make([]Site, 0, len(byAddr))
	for _, s := range byAddr {
		off, code, err := fileOffset(f, s.Addr, s.Size)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", s.Symbol, err)
		}
		s.Offset = off
		if own && (s.Role == RoleWrapAlloc || s.Role == RoleWrapFree) && !callsPLT(f, s.Addr, code) {
			if s.Role == RoleWrapAlloc {
				s.Role = RoleAlloc
			} else {
				s.Role = RoleFree
			}
		}
		s.Placement = Place(code, s.Role)
		sites = append(sites, *s)
	}
	sort.Slice(sites, func(i, j int) bool { return sites[i].Addr < sites[j].Addr })
	return sites, nil
}

// rank orders aliases: the lower names the site. aligned_alloc before
// memalign, as C11 programs call it.
func rank(f event.Func) int {
	switch f {
	case event.FuncAlignedAlloc:
		return 0
	case event.FuncMemalign:
		return 1
	}
	return int(f) + 1
}

// fileOffset maps a virtual address to its file offset through the loadable
// segments, and returns the function's bytes.
func fileOffset(f *elf.File, addr, size uint64) (uint64, []byte, error) {
	for _, p := range f.Progs {
		if p.Type != elf.PT_LOAD || p.Flags&elf.PF_X == 0 {
			continue
		}
		if addr < p.Vaddr || addr >= p.Vaddr+p.Filesz {
			continue
		}
		off := addr - p.Vaddr + p.Off
		if size == 0 || size > p.Vaddr+p.Filesz-addr {
			size = p.Vaddr + p.Filesz - addr
		}
		if size > 1<<16 {
			size = 1 << 16 // enough to place a probe and check the branches
		}
		code := make([]byte, size)
		if _, err := p.ReadAt(code, int64(addr-p.Vaddr)); err != nil && err != io.EOF {
			return 0, nil, err
		}
		return off, code, nil
	}
	return 0, nil, fmt.Errorf("address %#x is in no executable segment", addr)
}

// allocatorMarks are symbols only one allocator defines.
var allocatorMarks = map[string]event.Heap{
	"mallocx":    event.HeapJemalloc,
	"je_mallocx": event.HeapJemalloc,
	"je_malloc":  event.HeapJemalloc,
	"tc_malloc":  event.HeapTcmalloc,
	"mi_malloc":  event.HeapMimalloc,
}

// Identify says which allocator other than a C library's f defines, by a
// symbol only it defines: jemalloc, tcmalloc or mimalloc, whether f is the
// allocator's shared library or a program or library it is linked into.
func Identify(f *elf.File) (event.Heap, bool) {
	for _, load := range []func() ([]elf.Symbol, error){f.DynamicSymbols, f.Symbols} {
		syms, _ := load()
		for _, s := range syms {
			if s.Section == elf.SHN_UNDEF || elf.ST_TYPE(s.Info) != elf.STT_FUNC {
				continue
			}
			name, _, _ := strings.Cut(s.Name, "@")
			if h, ok := allocatorMarks[name]; ok {
				return h, true
			}
		}
	}
	return 0, false
}

// callsPLT reports whether the function at addr, whose code is code, calls
// or jumps to a PLT entry: an operator new or delete that does is a
// wrapper of malloc or free (jemalloc's delete jumps to free@plt).
func callsPLT(f *elf.File, addr uint64, code []byte) bool {
	var plts [][2]uint64
	for _, sec := range f.Sections {
		if strings.HasPrefix(sec.Name, ".plt") {
			plts = append(plts, [2]uint64{sec.Addr, sec.Addr + sec.Size})
		}
	}
	for off := 0; off < len(code); {
		in, err := x86asm.Decode(code[off:], 64)
		if err != nil {
			return false
		}
		pc := addr + uint64(off) + uint64(in.Len)
		off += in.Len
		if in.Op != x86asm.CALL && in.Op != x86asm.JMP {
			continue
		}
		rel, ok := in.Args[0].(x86asm.Rel)
		if !ok {
			continue
		}
		to := pc + uint64(int64(rel))
		for _, p := range plts {
			if to >= p[0] && to < p[1] {
				return true
			}
		}
	}
	return false
}
