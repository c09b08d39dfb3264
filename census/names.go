package census

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"io"
	"math/bits"
	"sort"
	"strings"

	"github.com/ianlancetaylor/demangle"

	"github.com/heapscope/heapscope/internal/proc"
)

// vtable is a C++ vtable symbol (_ZTV…) of a mapped module.
type vtable struct {
	start, end uint64 // in the process
	class      string // demangled: "std::basic_ios<char>", "Circle"
	data       []byte // the symbol's bytes in the file: the offsets to top are constants
}

// Namer names blocks by what they hold: a C++ object by the vtable its
// first word points at, from the vtable's symbol (_ZTV…) or, in a stripped
// module, from the type_info its vtable points at (its name, a mangled
// type, is in the module's data). It reads the files a process maps and,
// for type_info, the process's memory, so it can be made and used while
// the process runs: type information does not change.
type Namer struct {
	vtables   []vtable        // sorted by start
	typeinfos map[uint64]bool // the address points of __cxxabiv1's type_info vtables
	files     []Span          // file-backed mappings, sorted
	mem       io.ReaderAt
	cache     map[uint64]string // by first word, what the type_info says ("" nothing)
	Warnings  []string          // modules whose symbols could not be read
}

// typeinfoVtables are the vtables of the type_info objects of classes:
// without, with one, and with several or virtual bases.
var typeinfoVtables = map[string]bool{
	"_ZTVN10__cxxabiv117__class_type_infoE":     true,
	"_ZTVN10__cxxabiv120__si_class_type_infoE":  true,
	"_ZTVN10__cxxabiv121__vmi_class_type_infoE": true,
}

// maxVtable bounds the bytes of one vtable symbol the Namer keeps.
const maxVtable = 1 << 16

// NewNamer reads the vtable symbols (_ZTV…) of every file process pid maps,
// from .symtab and .dynsym, placed where the process has them. mem, which
// may be nil, reads the process's memory for the type_info of objects whose
// vtables have no symbol: the stopped process, or /proc/PID/mem once it runs.
func NewNamer(pid int, maps []proc.Mapping, mem io.ReaderAt) *Namer {
	n := &Namer{typeinfos: map[uint64]bool{}, mem: mem, cache: map[uint64]string{}}
	seen := map[string]bool{}
	for _, m := range maps {
		if !m.File() {
			continue
		}
		n.files = append(n.files, Span{m.Start, m.End})
		if seen[m.Path] {
			continue
		}
		seen[m.Path] = true
		if err := n.module(pid, maps, m); err != nil {
			n.Warnings = append(n.Warnings, fmt.Sprintf("%s: %v", m.Path, err))
		}
	}
	sort.Slice(n.vtables, func(i, j int) bool { return n.vtables[i].start < n.vtables[j].start })
	sort.Slice(n.files, func(i, j int) bool { return n.files[i].Start < n.files[j].Start })
	return n
}

func (n *Namer) module(pid int, maps []proc.Mapping, m proc.Mapping) (err error) {
	f, err := elf.Open(proc.MappedFile(pid, m))
	if err != nil {
		return nil // not an ELF file: a data file mapped, a font, ...
	}
	defer f.Close()
	defer func() {
		// debug/elf can panic on some corrupt files.
		if p := recover(); p != nil {
			err = fmt.Errorf("corrupt ELF: %v", p)
		}
	}()
	bias, err := loadBias(f, maps, m.Path)
	if err != nil {
		return nil // only its header is mapped
	}
	if f.Type == elf.ET_EXEC {
		bias = 0
	}
	seen := map[uint64]bool{}
	for _, load := range []func() ([]elf.Symbol, error){f.Symbols, f.DynamicSymbols} {
		syms, _ := load()
		for _, s := range syms {
			if !strings.HasPrefix(s.Name, "_ZTV") || s.Size < 3*sizeSz || s.Size > maxVtable ||
				elf.ST_TYPE(s.Info) != elf.STT_OBJECT || s.Section == elf.SHN_UNDEF || seen[s.Value] {
				continue
			}
			seen[s.Value] = true
			if typeinfoVtables[s.Name] {
				n.typeinfos[s.Value+bias+2*sizeSz] = true
			}
			data, err := fileBytes(f, s.Value, s.Size)
			if err != nil {
				continue
			}
			n.vtables = append(n.vtables, vtable{s.Value + bias, s.Value + bias + s.Size, className(s.Name), data})
		}
	}
	return nil
}

// fileBytes reads size bytes at vaddr from the file's loaded segments.
func fileBytes(f *elf.File, vaddr, size uint64) ([]byte, error) {
	for _, p := range f.Progs {
		if p.Type != elf.PT_LOAD || vaddr < p.Vaddr || vaddr+size > p.Vaddr+p.Filesz {
			continue
		}
		b := make([]byte, size)
		if _, err := p.ReadAt(b, int64(vaddr-p.Vaddr)); err != nil {
			return nil, err
		}
		return b, nil
	}
	return nil, fmt.Errorf("%#x is not in the file's data", vaddr)
}

// className demangles a vtable's symbol into the name of its class.
func className(sym string) string {
	s, err := demangleSafe(sym)
	if err != nil {
		return sym
	}
	return strings.TrimPrefix(s, "vtable for ")
}

// Class returns the C++ class of an object whose first word is first: a
// pointer to one of the address points of a vtable (16 bytes or more into
// it, after the offset to top and the type info) whose offset to top is 0,
// which only the vtable of a complete object's start has.
func (n *Namer) Class(first uint64) (string, bool) {
	if n == nil || first%sizeSz != 0 {
		return "", false
	}
	i := sort.Search(len(n.vtables), func(i int) bool { return n.vtables[i].end > first })
	if i == len(n.vtables) || n.vtables[i].start > first {
		return n.rtti(first)
	}
	v := n.vtables[i]
	off := first - v.start
	if off < 2*sizeSz || off >= v.end-v.start || binary.LittleEndian.Uint64(v.data[off-2*sizeSz:]) != 0 {
		return "", false
	}
	return v.class, true
}

// maxTypeName bounds the mangled name of a type read from a type_info.
const maxTypeName = 1024

// rtti names the class of an object whose vtable has no symbol, from the
// vtable's type_info: the word before the address point. It must be a
// type_info of a class (its own vtable is one of __cxxabiv1's), and its
// name a mangled type that demangles.
func (n *Namer) rtti(first uint64) (string, bool) {
	if n.mem == nil || len(n.typeinfos) == 0 || !n.inFile(first) {
		return "", false
	}
	if name, ok := n.cache[first]; ok {
		return name, name != ""
	}
	name := n.readRTTI(first)
	n.cache[first] = name
	return name, name != ""
}

func (n *Namer) readRTTI(first uint64) string {
	var b [2 * sizeSz]byte
	if _, err := n.mem.ReadAt(b[:], int64(first-2*sizeSz)); err != nil {
		return ""
	}
	top, ti := binary.LittleEndian.Uint64(b[:]), binary.LittleEndian.Uint64(b[sizeSz:])
	if top != 0 || !n.inFile(ti) || ti > 1<<63-1 {
		return ""
	}
	if _, err := n.mem.ReadAt(b[:], int64(ti)); err != nil {
		return ""
	}
	vptr, namePtr := binary.LittleEndian.Uint64(b[:]), binary.LittleEndian.Uint64(b[sizeSz:])
	if !n.typeinfos[vptr] || !n.inFile(namePtr) || namePtr > 1<<63-1 {
		return ""
	}
	buf := make([]byte, maxTypeName)
	k, _ := n.mem.ReadAt(buf, int64(namePtr))
	end := bytes.IndexByte(buf[:k], 0)
	if end <= 0 {
		return ""
	}
	for _, c := range buf[:end] {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '$') {
			return ""
		}
	}
	// A type_info's name is a mangled type: as the name of its typeinfo
	// name symbol, it demangles.
	s, err := demangleSafe("_ZTS" + string(buf[:end]))
	if err != nil || !strings.HasPrefix(s, "typeinfo name for ") {
		return ""
	}
	return strings.TrimPrefix(s, "typeinfo name for ")
}

// inFile reports whether addr is in a file-backed mapping.
func (n *Namer) inFile(addr uint64) bool {
	i := sort.Search(len(n.files), func(i int) bool { return n.files[i].End > addr })
	return i < len(n.files) && n.files[i].Start <= addr
}

func demangleSafe(sym string) (s string, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("demangling %q: %v", sym, p)
		}
	}()
	return demangle.ToString(sym, demangle.NoClones, demangle.MaxLength(16))
}

// SizeClass is a range of chunk sizes, [Lo, Hi): one size each below 1 KiB
// (glibc's small bins), glibc's large bins up to 768 KiB, then powers of
// two.
type SizeClass struct{ Lo, Hi uint64 }

func (s SizeClass) String() string {
	if s.Hi == s.Lo+align {
		return fmt.Sprintf("%d B", s.Lo)
	}
	return fmt.Sprintf("%d-%d B", s.Lo, s.Hi-1)
}

// ClassOf returns the size class of a chunk size (as glibc's
// largebin_index_64 draws them).
func ClassOf(size uint64) SizeClass {
	if size < 1024 {
		lo := size &^ (align - 1)
		return SizeClass{lo, lo + align}
	}
	// Each tier's bins are 1<<shift wide, up to below<<shift; the first
	// bin of a tier starts where the tier before ended.
	prevEnd := uint64(1024)
	for _, s := range []struct{ shift, below uint64 }{{6, 49}, {9, 21}, {12, 11}, {15, 5}, {18, 3}} {
		if size>>s.shift < s.below {
			lo := max(size>>s.shift<<s.shift, prevEnd)
			return SizeClass{lo, size>>s.shift<<s.shift + 1<<s.shift}
		}
		prevEnd = s.below << s.shift
	}
	k := uint64(63 - bits.LeadingZeros64(size))
	return SizeClass{max(1<<k, prevEnd), 1<<k + 1<<k}
}

// Holders says who holds each live block: for block i of Live(), the
// index in Live() of a block that points at it, or -1 and the name of the
// root that does (a thread's stack, a module's data); -1 and "" when
// nothing is known. The heap scanner (package scan) is to provide it.
type Holders func(i int) (block int, root string)

// Group is the allocated blocks of one size class and one kind.
type Group struct {
	Class  SizeClass
	Name   string // a C++ class, "string", libc's own ("glibc: tcache"), or "" when nothing tells
	Blocks uint64
	Bytes  uint64 // usable bytes
	// Example is one of the blocks; Text, for strings, what it says.
	Example uint64
	Text    string
	// HeldBy is who holds most of the group's blocks, when Holders tells:
	// "a 65536 B block (Cache)", "stack of thread 42"; Held is how many
	// of its blocks that one holds.
	HeldBy string
	Held   uint64
}

// Describe groups the allocated blocks by size class and by what they are:
// C++ objects by the vtable their first word points at (n, which may be
// nil), strings (blocks that start with printable text), libc's own
// blocks. held, which may be nil, names who holds them. The groups come
// largest (in bytes) first.
func (c *Census) Describe(n *Namer, held Holders) []Group {
	type key struct {
		class SizeClass
		name  string
	}
	type acc struct {
		g       Group
		holders map[string]uint64
	}
	groups := map[key]*acc{}
	var live []int // chunk index of each block of Live()
	for i, ch := range c.Chunks {
		if ch.State.Allocated() {
			live = append(live, i)
		}
	}
	names := make([]string, len(live))
	for li, i := range live {
		ch := c.Chunks[i]
		name, text := c.name(n, i), ""
		if name == "" {
			if s, ok := c.Text(i); ok {
				name, text = "string", s
			}
		}
		names[li] = name
		k := key{ClassOf(ch.Size), name}
		a := groups[k]
		if a == nil {
			a = &acc{g: Group{Class: k.class, Name: name, Example: ch.User(), Text: text}}
			groups[k] = a
		}
		a.g.Blocks++
		a.g.Bytes += ch.Usable()
	}
	if held != nil {
		for li, i := range live {
			ch := c.Chunks[i]
			b, root := held(li)
			var who string
			switch {
			case b >= 0 && b < len(live):
				hc := c.Chunks[live[b]]
				who = fmt.Sprintf("a %d B block", hc.Usable())
				if names[b] != "" && names[b] != "string" {
					who += " (" + names[b] + ")"
				}
			case root != "":
				who = root
			default:
				continue
			}
			a := groups[key{ClassOf(ch.Size), names[li]}]
			if a.holders == nil {
				a.holders = map[string]uint64{}
			}
			a.holders[who]++
		}
	}
	out := make([]Group, 0, len(groups))
	for _, a := range groups {
		for who, k := range a.holders {
			if k > a.g.Held || k == a.g.Held && who < a.g.HeldBy {
				a.g.HeldBy, a.g.Held = who, k
			}
		}
		out = append(out, a.g)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Bytes != out[j].Bytes {
			return out[i].Bytes > out[j].Bytes
		}
		if out[i].Class != out[j].Class {
			return out[i].Class.Lo < out[j].Class.Lo
		}
		return out[i].Name < out[j].Name
	})
	return out
}

// name is what names chunk i: libc's own, or a C++ class.
func (c *Census) name(n *Namer, i int) string {
	ch := c.Chunks[i]
	if what, ok := c.Internal[ch.Addr]; ok {
		// "glibc: tcache of thread 42" names the group "glibc: tcache".
		what, _, _ = strings.Cut(what, " of thread ")
		return what
	}
	if cls, ok := n.Class(ch.First); ok {
		return cls
	}
	return ""
}

// Name returns what names chunk i, if anything does: a C++ class (n may be
// nil), "string" and its text, or libc's own block.
func (c *Census) Name(n *Namer, i int) (name, text string) {
	if name := c.name(n, i); name != "" {
		return name, ""
	}
	if s, ok := c.Text(i); ok {
		return "string", s
	}
	return "", ""
}
