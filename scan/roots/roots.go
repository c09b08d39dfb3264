// Package roots gathers the roots of a heap scan from a process stopped by
// internal/stopped, as LeakSanitizer takes them on glibc:
//
//   - the writable PT_LOAD segments of every loaded ELF module (.data, .bss,
//     the GOT and the relro part, from the file's program headers; the end
//     rounded up to the page, where ld.so's own early allocations begin),
//     except heapscope's interposer, whose tables are not the program's;
//   - each thread's stack, from its stack pointer less the 128-byte red
//     zone to the end of the mapping that holds it, and its general
//     registers;
//   - each thread's static TLS and thread control block around its fs base
//     (glibc's layout on x86-64: struct pthread at fs base, static TLS below
//     it; for a thread that glibc started these are the top of its stack
//     mapping, already scanned), and its DTV (dtv[-1] holds its length), so
//     that the dynamic TLS blocks it points to are reached;
//   - what the loader holds: the link_map list (from _r_debug) and its
//     nodes, which ld.so allocated before malloc was there and so lie
//     outside both the modules and the heap.
//
// It lives apart from package scan, which is pure, because it knows glibc,
// ELF and ptrace'd threads; apart from internal/stopped, which knows only
// how to stop and read a process, because the census and the injector need
// none of it.
package roots

import (
	"debug/elf"
	"encoding/binary"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/heapscope/heapscope/internal/proc"
	"github.com/heapscope/heapscope/internal/stopped"
	"github.com/heapscope/heapscope/scan"
)

// Options tune Gather.
type Options struct {
	// Exclude reports whether the writable segments of the module at path
	// are left out. Nil leaves out heapscope's interposer
	// (libheapscope_preload*.so) only.
	Exclude func(path string) bool
}

// IsInterposer reports whether path is heapscope's interposer library.
func IsInterposer(path string) bool {
	return strings.HasPrefix(filepath.Base(path), "libheapscope_preload")
}

const (
	page    = 4096
	redZone = 128 // below the stack pointer, which leaf functions use (x86-64 ABI)

	// Bounds of a thread control block around its fs base when it is not
	// in the thread's stack mapping (the main thread's, which ld.so
	// allocated): struct pthread above (2304 bytes in glibc 2.36), static
	// TLS below (the modules' PT_TLS segments and a surplus of at most a
	// few KiB). Both are clipped to the mapping; scanning a little more
	// than the block only adds roots of ld.so's own.
	tcbAbove   = 4096
	tlsSurplus = 4096

	maxDTV      = 1 << 16 // entries; more is not a DTV
	linkMapSize = 1536    // bytes scanned of a link_map node (struct link_map is about 1.1 KiB)
	maxLinkMaps = 1 << 14
)

// Gather returns the roots of p, and notes on what it could not gather
// (a module whose file it cannot read, a thread whose stack pointer is in no
// mapping): roots missing, which the caller reports beside the scan.
func Gather(p *stopped.Process, opt Options) (scan.Roots, []string) {
	exclude := opt.Exclude
	if exclude == nil {
		exclude = IsInterposer
	}
	g := &gatherer{p: p, maps: p.Maps(), files: map[string]*elfInfo{}}
	g.modules(exclude)
	g.threads()
	g.loader()
	return g.roots, g.notes
}

type gatherer struct {
	p     *stopped.Process
	maps  []proc.Mapping
	files map[string]*elfInfo
	roots scan.Roots
	notes []string
	tls   uint64 // Σ PT_TLS sizes of the modules
	rdbg  uint64 // address of _r_debug, 0 if not found
}

type elfInfo struct {
	loads  []elf.ProgHeader
	tls    uint64
	rdebug uint64 // st_value of _r_debug, if the file defines it
	err    error
}

func (g *gatherer) note(format string, args ...any) {
	g.notes = append(g.notes, fmt.Sprintf(format, args...))
}

func (g *gatherer) readELF(m proc.Mapping) *elfInfo {
	key := m.Dev + ":" + strconv.FormatUint(m.Inode, 10)
	if e, ok := g.files[key]; ok {
		return e
	}
	e := &elfInfo{}
	g.files[key] = e
	defer func() {
		// debug/elf is not guaranteed against every malformed file; a
		// traced process chooses what it maps.
		if r := recover(); r != nil {
			e.err = fmt.Errorf("malformed ELF file: %v", r)
		}
	}()
	f, err := elf.Open(proc.MappedFile(g.p.PID(), m))
	if err != nil {
		e.err = err
		return e
	}
	defer f.Close()
	for _, ph := range f.Progs {
		switch ph.Type {
		case elf.PT_LOAD:
			e.loads = append(e.loads, ph.ProgHeader)
		case elf.PT_TLS:
			align := max(ph.Align, 1)
			e.tls += (ph.Memsz + align - 1) / align * align
		}
	}
	if syms, err := f.DynamicSymbols(); err == nil {
		for _, s := range syms {
			if s.Name == "_r_debug" && s.Value != 0 {
				e.rdebug = s.Value
			}
		}
	}
	return e
}

// modules adds the writable segments of each ELF module mapped, once per
// load (a mapping at file offset 0 starts one).
func (g *gatherer) modules(exclude func(string) bool) {
	for _, m := range g.maps {
		if !m.File() || m.Offset != 0 {
			continue
		}
		e := g.readELF(m)
		if e.err != nil {
			if isELFMapping(g.maps, m) {
				g.note("module %s: %v: its writable segments are not scanned", m.Path, e.err)
			}
			continue
		}
		if len(e.loads) == 0 {
			continue
		}
		// The segment at file offset 0 is mapped at m.Start.
		var first *elf.ProgHeader
		for i := range e.loads {
			if e.loads[i].Off == 0 {
				first = &e.loads[i]
				break
			}
		}
		if first == nil {
			continue
		}
		bias := m.Start - first.Vaddr&^(page-1)
		g.tls += e.tls
		if e.rdebug != 0 {
			g.rdbg = bias + e.rdebug
		}
		if exclude(m.Path) {
			continue
		}
		for _, ph := range e.loads {
			if ph.Flags&elf.PF_W == 0 || ph.Memsz == 0 {
				continue
			}
			start := (bias + ph.Vaddr) &^ (page - 1)
			end := (bias + ph.Vaddr + ph.Memsz + page - 1) &^ (page - 1)
			g.roots.Ranges = append(g.roots.Ranges, scan.Range{Addr: start, Size: end - start, Name: m.Path + " writable segment"})
		}
	}
}

// isELFMapping reports whether the file of m is also mapped executable: a
// module whose ELF could not be read (rather than a data file).
func isELFMapping(maps []proc.Mapping, m proc.Mapping) bool {
	for _, o := range maps {
		if o.Inode == m.Inode && o.Dev == m.Dev && o.Exec() {
			return true
		}
	}
	return false
}

func (g *gatherer) mapping(addr uint64) (proc.Mapping, bool) {
	for _, m := range g.maps {
		if addr >= m.Start && addr < m.End {
			return m, true
		}
	}
	return proc.Mapping{}, false
}

func (g *gatherer) word(addr uint64) (uint64, bool) {
	var b [8]byte
	if _, err := g.p.ReadAt(b[:], int64(addr)); err != nil {
		return 0, false
	}
	return binary.LittleEndian.Uint64(b[:]), true
}

// threads adds each thread's stack, registers, TLS and DTV.
func (g *gatherer) threads() {
	for _, t := range g.p.Threads() {
		name := "thread " + strconv.Itoa(t.TID)
		for _, w := range t.Words() {
			g.roots.Words = append(g.roots.Words, scan.Word{Value: w, Name: "registers of " + name})
		}
		var stack proc.Mapping
		sp := t.SP() - redZone
		if m, ok := g.mapping(t.SP()); ok {
			stack = m
			sp = max(sp, m.Start)
			g.roots.Ranges = append(g.roots.Ranges, scan.Range{Addr: sp, Size: m.End - sp, Name: "stack of " + name})
		} else {
			g.note("%s: stack pointer %#x is in no mapping: its stack is not scanned", name, t.SP())
		}
		fs := t.FSBase()
		if fs == 0 {
			continue
		}
		m, ok := g.mapping(fs)
		if !ok {
			g.note("%s: fs base %#x is in no mapping: its TLS is not scanned", name, fs)
			continue
		}
		if m.Start != stack.Start || fs < sp {
			lo := max(m.Start, fs-min(fs, g.tls+tlsSurplus))
			hi := min(m.End, fs+tcbAbove)
			g.roots.Ranges = append(g.roots.Ranges, scan.Range{Addr: lo, Size: hi - lo, Name: "TLS of " + name})
		}
		// tcbhead_t: tcb, dtv, self, ...; the DTV pointer is one entry
		// (16 bytes) past its length.
		dtv, ok := g.word(fs + 8)
		if !ok || dtv < 16 {
			continue
		}
		n, ok := g.word(dtv - 16)
		if !ok || n == 0 || n > maxDTV {
			continue
		}
		g.roots.Ranges = append(g.roots.Ranges, scan.Range{Addr: dtv - 16, Size: 16 * (n + 2), Name: "DTV of " + name})
	}
}

// loader adds the link_map nodes of the loader's list: struct r_debug is
// {int r_version; struct link_map *r_map; ...}, and a link_map begins
// {l_addr, l_name, l_ld, l_next, l_prev}.
func (g *gatherer) loader() {
	if g.rdbg == 0 {
		g.note("no _r_debug in any module: the loader's link_map list is not scanned")
		return
	}
	g.roots.Ranges = append(g.roots.Ranges, scan.Range{Addr: g.rdbg, Size: 40, Name: "_r_debug"})
	lm, ok := g.word(g.rdbg + 8)
	seen := map[uint64]bool{}
	for ok && lm != 0 && !seen[lm] && len(seen) < maxLinkMaps {
		seen[lm] = true
		if m, in := g.mapping(lm); in {
			size := min(uint64(linkMapSize), m.End-lm)
			g.roots.Ranges = append(g.roots.Ranges, scan.Range{Addr: lm, Size: size, Name: "link_map"})
		}
		lm, ok = g.word(lm + 24)
	}
}
