package symbolize

import (
	"sort"
)

// decodeFuncs reads the functions of a unit: their entries and ranges only,
// skipping their children, and descending only into namespaces, where C++
// and Rust put functions.
func (dw *dwarfInfo) decodeFuncs(u *unit) {
	var d die
	dw.walkEntries(u, u.next, &d, func(int) bool {
		switch d.tag {
		case tagSubprogram:
			if ranges := dw.rangesOf(u, &d); len(ranges) > 0 {
				fn := int32(len(u.fns))
				u.fns = append(u.fns, function{off: d.off})
				for _, rg := range ranges {
					if rg[0] < rg[1] {
						u.funcs = append(u.funcs, funcRange{rg[0], rg[1], fn})
					}
				}
			}
		case tagNamespace, tagModule:
			return true
		}
		return false
	})
	u.maxHi = sortSpans(u.funcs)
}

// decodeFunction reads the tree of a function's entry: its ranges and the
// calls inlined into it, at any depth of lexical blocks and inlining.
func (dw *dwarfInfo) decodeFunction(u *unit, fn *function) {
	fn.decoded = true
	pos := int(fn.off - u.off)
	var d die
	pos, err := u.entry(pos, &d)
	if err != nil {
		dw.warn("%s: DWARF function at %#x: %v", dw.name, fn.off, err)
		return
	}
	s := dw.newScope(u, &d)
	for _, rg := range dw.rangesOf(u, &d) {
		if rg[0] < rg[1] {
			s.lo, s.hi = rg[0], rg[1]
			fn.scopes = append(fn.scopes, s)
		}
	}
	if !d.children {
		return
	}
	type open struct {
		depth int   // tree depth of the inlined call's entry
		inl   int32 // its inline depth
	}
	var stack []open
	dw.walkEntries(u, pos, &d, func(depth int) bool {
		for len(stack) > 0 && stack[len(stack)-1].depth >= depth {
			stack = stack[:len(stack)-1]
		}
		switch d.tag {
		case tagInlinedSubroutine:
			ranges := dw.rangesOf(u, &d)
			if len(ranges) == 0 {
				return false
			}
			s := dw.newScope(u, &d)
			s.depth = 1
			if len(stack) > 0 {
				s.depth = stack[len(stack)-1].inl + 1
			}
			s.callFile = int32(d.callFile.int())
			s.callLine = int32(d.callLine.int())
			for _, rg := range ranges {
				if rg[0] < rg[1] {
					s.lo, s.hi = rg[0], rg[1]
					fn.scopes = append(fn.scopes, s)
				}
			}
			stack = append(stack, open{depth, s.depth})
			return true
		case tagLexicalBlock:
			return true
		}
		return false
	})
}

// walkEntries reads the entries of u from pos into d, to the end of the
// level pos is at (depth 1), and calls visit with each one's depth; visit
// says whether to go into the entry's children, which are skipped
// otherwise. An entry that cannot be read ends the walk, with a warning.
func (dw *dwarfInfo) walkEntries(u *unit, pos int, d *die, visit func(depth int) (descend bool)) {
	for depth := 1; depth > 0 && pos < len(u.data); {
		next, err := u.entry(pos, d)
		if err != nil {
			dw.warn("%s: DWARF entries: %v", dw.name, err)
			return
		}
		pos = next
		if d.tag == 0 {
			depth--
			continue
		}
		if !visit(depth) {
			if pos, err = u.skip(pos, d); err != nil {
				dw.warn("%s: DWARF entries: %v", dw.name, err)
				return
			}
		} else if d.children {
			depth++
		}
	}
}

func (dw *dwarfInfo) newScope(u *unit, d *die) scope {
	s := scope{name: dw.str(u, d.name), link: dw.str(u, d.link)}
	if d.origin.ok() && isLocalRef(d.origin.form) {
		s.origin = d.origin.v
	} else if d.spec.ok() && isLocalRef(d.spec.form) {
		s.origin = d.spec.v
	}
	return s
}

// resolve gives the frames of va within unit u.
func (dw *dwarfInfo) resolve(u *unit, va uint64, demangle bool) []loc {
	// Code the line table misses is still in the unit's file, at line 0,
	// as addr2line and llvm-symbolizer say too.
	file, line, ok := u.line(va)
	if !ok {
		file, line = u.name, 0
	}
	i := searchRanges(len(u.funcs), func(i int) uint64 { return u.funcs[i].lo }, u.maxHi, va,
		func(i int) bool { return va < u.funcs[i].hi })
	if i < 0 {
		if file == "" {
			return nil
		}
		return []loc{{File: file, Line: line}}
	}
	fn := &u.fns[u.funcs[i].fn]
	if !fn.decoded {
		dw.decodeFunction(u, fn)
	}
	// The chain of scopes holding va, by depth. Well-formed DWARF nests them,
	// one per depth.
	var chain []*scope
	for j := range fn.scopes {
		s := &fn.scopes[j]
		if s.lo <= va && va < s.hi {
			for int(s.depth) >= len(chain) {
				chain = append(chain, nil)
			}
			chain[s.depth] = s
		}
	}
	// Drop anything below a gap.
	for k, s := range chain {
		if s == nil {
			chain = chain[:k]
			break
		}
	}
	if len(chain) == 0 {
		return []loc{{File: file, Line: line}}
	}
	locs := make([]loc, len(chain))
	for k := range chain {
		s := chain[len(chain)-1-k]
		l := &locs[k]
		l.Function, l.qualified = dw.funcName(s, demangle)
		if k == 0 {
			l.File, l.Line = file, line
		} else {
			in := chain[len(chain)-k]
			if int(in.callFile) < len(u.files) && in.callFile >= 0 {
				l.File = u.files[in.callFile]
			}
			l.Line = int(in.callLine)
		}
	}
	return locs
}

// line looks va up in the unit's line table.
func (u *unit) line(va uint64) (string, int, bool) {
	i := sort.Search(len(u.rows), func(i int) bool { return u.rows[i].addr > va }) - 1
	if i < 0 || u.rows[i].end {
		return "", 0, false
	}
	file := ""
	if f := u.rows[i].file; f >= 0 && int(f) < len(u.files) {
		file = u.files[f]
	}
	return file, int(u.rows[i].line), true
}

// funcName names a scope's function. A mangled linkage name, of the entry or
// of one it refers to, qualifies C++ and Rust names (ns::Widget::make(int)
// where DW_AT_name says make). Other linkage names are asm labels of C
// functions (glibc's __GI___libc_malloc for __libc_malloc): the source name
// is better. qualified says the name came from a mangled one.
func (dw *dwarfInfo) funcName(s *scope, demangle bool) (name string, qualified bool) {
	n := dw.scopeName(s, 0, demangle, 0)
	return n.name, n.qualified
}

type funcName struct {
	name      string
	qualified bool
}

func (dw *dwarfInfo) scopeName(s *scope, self uint64, demangle bool, depth int) funcName {
	if isMangled(s.link) {
		return funcName{maybeDemangle(s.link, demangle), true}
	}
	if s.origin != 0 && s.origin != self {
		if n := dw.nameAt(s.origin, demangle, depth+1); n.name != "" {
			return n
		}
	}
	if s.name != "" {
		return funcName{s.name, false}
	}
	return funcName{s.link, false}
}

// nameAt resolves the name of the entry at off, following abstract origins
// and specifications (across units, too) a few steps at most.
func (dw *dwarfInfo) nameAt(off uint64, demangle bool, depth int) funcName {
	if n, ok := dw.names[off]; ok {
		return n
	}
	if depth > 8 {
		return funcName{}
	}
	u := dw.unitAt(off)
	if u == nil {
		return funcName{}
	}
	var d die
	if _, err := u.entry(int(off-u.off), &d); err != nil || d.tag == 0 {
		return funcName{}
	}
	s := dw.newScope(u, &d)
	n := dw.scopeName(&s, off, demangle, depth)
	dw.names[off] = n
	return n
}

func maybeDemangle(name string, demangle bool) string {
	if !demangle {
		return name
	}
	return demangleName(name)
}
