package symbolize

import (
	"debug/elf"
	"fmt"
	"sort"
	"strings"
)

// symtab is an index of the function symbols of an object, sorted by
// address, one per address.
type symtab []sym

type sym struct {
	addr, size uint64
	name       string
	file       string // local symbols: the source file their STT_FILE names
	rank       int    // lower is the better name for the address
}

// lookup returns the symbol of the function that holds va. A symbol with a
// size holds only addresses below its end; one without (hand-written
// assembly) holds those up to the next symbol.
func (t symtab) lookup(va uint64) (*sym, bool) {
	i := sort.Search(len(t), func(i int) bool { return t[i].addr > va }) - 1
	if i < 0 {
		return nil, false
	}
	s := &t[i]
	if s.size != 0 && va-s.addr >= s.size {
		return nil, false
	}
	return s, true
}

// symtabBuilder gathers symbols from .symtab and .dynsym of one or more files
// (an object and its debug file) into a symtab.
type symtabBuilder struct {
	syms []sym
}

// add reads the function symbols of f.
func (b *symtabBuilder) add(f *elf.File) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("corrupt symbol table: %v", p)
		}
	}()
	var errs []error
	for _, read := range []func() ([]elf.Symbol, error){f.Symbols, f.DynamicSymbols} {
		syms, err := read()
		if err != nil {
			if err != elf.ErrNoSymbols {
				errs = append(errs, err)
			}
			continue
		}
		// Local symbols follow the STT_FILE symbol of their source file.
		file := ""
		for _, s := range syms {
			if elf.ST_TYPE(s.Info) == elf.STT_FILE {
				file = s.Name
				continue
			}
			if r, ok := rank(f, s); ok {
				x := sym{addr: s.Value, size: s.Size, name: s.Name, rank: r}
				if elf.ST_BIND(s.Info) == elf.STB_LOCAL {
					x.file = file
				}
				b.syms = append(b.syms, x)
			}
		}
	}
	if len(errs) > 0 {
		return errs[0]
	}
	return nil
}

// rank says whether s names code and how good a name it is among the
// symbols at its address: functions before plain labels, global before weak
// before local, fewer leading underscores (malloc before __libc_malloc).
func rank(f *elf.File, s elf.Symbol) (int, bool) {
	if s.Name == "" || s.Value == 0 || s.Section == elf.SHN_UNDEF || s.Section >= elf.SHN_LORESERVE {
		return 0, false
	}
	r := 0
	switch elf.ST_TYPE(s.Info) {
	case elf.STT_FUNC, elf.STT_GNU_IFUNC:
	case elf.STT_NOTYPE:
		// Assembly labels; only in code, and not local labels.
		if int(s.Section) >= len(f.Sections) || f.Sections[s.Section].Flags&elf.SHF_EXECINSTR == 0 ||
			strings.HasPrefix(s.Name, ".L") || strings.HasPrefix(s.Name, "$") {
			return 0, false
		}
		r += 100
	default:
		return 0, false
	}
	switch elf.ST_BIND(s.Info) {
	case elf.STB_GLOBAL:
	case elf.STB_WEAK:
		r += 10
	default:
		r += 20
	}
	r += len(s.Name) - len(strings.TrimLeft(s.Name, "_"))
	return r, true
}

// build sorts the symbols and keeps the best name at each address, with the
// largest size any symbol there gives.
func (b *symtabBuilder) build() symtab {
	s := b.syms
	sort.Slice(s, func(i, j int) bool {
		if s[i].addr != s[j].addr {
			return s[i].addr < s[j].addr
		}
		if s[i].rank != s[j].rank {
			return s[i].rank < s[j].rank
		}
		return s[i].name < s[j].name
	})
	out := s[:0]
	for _, x := range s {
		if n := len(out); n > 0 && out[n-1].addr == x.addr {
			if x.size > out[n-1].size {
				out[n-1].size = x.size
			}
			continue
		}
		out = append(out, x)
	}
	b.syms = nil
	return symtab(out[:len(out):len(out)])
}
