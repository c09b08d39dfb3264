package census

import (
	"debug/dwarf"
	"fmt"
	"strings"
	"sync"

	"github.com/heapscope/heapscope/internal/errs"
)

// field is where a struct member lies: its offset and size in bytes.
type field struct{ off, size int64 }

// array is a struct member that is an array: its offset, the size of one
// element and the number of elements.
type array struct{ off, elem, n int64 }

// Layout is what the census needs to know of glibc's structures: the offsets
// and sizes of the members it reads, taken from the DWARF types of libc's
// debug file (LoadLayout), never from numbers written here.
type Layout struct {
	chunk struct { // struct malloc_chunk
		size           int64
		prevSize, head field
	}
	state struct { // struct malloc_state
		size                        int64
		mutex, top, next, systemMem field
		fastbins, bins              array
	}
	par struct { // struct malloc_par
		nMmaps, mmappedMem, sbrkBase, hpPagesize field
	}
	heap struct { // struct _heap_info
		size                int64
		arena, prev, length field
	}
	tcache struct { // struct tcache_perthread_struct
		size            int64
		counts, entries array
	}
	tcacheEntry struct{ next, key field } // struct tcache_entry
	linkMap     struct {                  // struct link_map (ld.so's own, with the TLS members)
		ld, next, tlsOffset, tlsModid field
	}
	rDebug struct{ rMap field } // struct r_debug
	tcb    struct{ dtv field }  // tcbhead_t

	// mallocCode is where malloc.c's code is, in the file: a thread
	// stopped there may be changing the heap.
	mallocCode []Span
}

// member is a struct member the census reads and where its place goes in a
// Layout: f for a scalar, a for an array. size is the size wanted of the
// scalar or of one element of the array; 0 takes 1, 2, 4 or 8.
type member struct {
	name string
	f    *field
	a    *array
	size int64
}

// want lists, for each struct the census reads, the members it needs.
func (l *Layout) want() map[string][]member {
	return map[string][]member{
		"malloc_chunk": {
			{name: "mchunk_prev_size", f: &l.chunk.prevSize, size: 8},
			{name: "mchunk_size", f: &l.chunk.head, size: 8},
		},
		"malloc_state": {
			{name: "mutex", f: &l.state.mutex, size: 4},
			{name: "top", f: &l.state.top, size: 8},
			{name: "next", f: &l.state.next, size: 8},
			{name: "system_mem", f: &l.state.systemMem, size: 8},
			{name: "fastbinsY", a: &l.state.fastbins, size: 8},
			{name: "bins", a: &l.state.bins, size: 8},
		},
		"malloc_par": {
			{name: "n_mmaps", f: &l.par.nMmaps},
			{name: "mmapped_mem", f: &l.par.mmappedMem, size: 8},
			{name: "sbrk_base", f: &l.par.sbrkBase, size: 8},
			{name: "hp_pagesize", f: &l.par.hpPagesize, size: 8},
		},
		"_heap_info": {
			{name: "ar_ptr", f: &l.heap.arena, size: 8},
			{name: "prev", f: &l.heap.prev, size: 8},
			{name: "size", f: &l.heap.length, size: 8},
		},
		"tcache_perthread_struct": {
			{name: "counts", a: &l.tcache.counts},
			{name: "entries", a: &l.tcache.entries, size: 8},
		},
		"tcache_entry": {
			{name: "next", f: &l.tcacheEntry.next, size: 8},
			{name: "key", f: &l.tcacheEntry.key, size: 8},
		},
		"link_map": {
			{name: "l_ld", f: &l.linkMap.ld, size: 8},
			{name: "l_next", f: &l.linkMap.next, size: 8},
			{name: "l_tls_offset", f: &l.linkMap.tlsOffset, size: 8},
			{name: "l_tls_modid", f: &l.linkMap.tlsModid, size: 8},
		},
		"r_debug":   {{name: "r_map", f: &l.rDebug.rMap, size: 8}},
		"tcbhead_t": {{name: "dtv", f: &l.tcb.dtv, size: 8}},
	}
}

// set stores member m's place, read from its DWARF description f.
func (m member) set(f *dwarf.StructField) error {
	okSize := func(s int64) bool {
		if m.size != 0 {
			return s == m.size
		}
		return s == 1 || s == 2 || s == 4 || s == 8
	}
	t := f.Type
	for {
		td, ok := t.(*dwarf.TypedefType)
		if !ok {
			break
		}
		t = td.Type
	}
	if m.f != nil {
		if !okSize(t.Size()) {
			return fmt.Errorf("member %s is %d bytes", f.Name, t.Size())
		}
		*m.f = field{f.ByteOffset, t.Size()}
		return nil
	}
	at, ok := t.(*dwarf.ArrayType)
	if !ok {
		return fmt.Errorf("member %s is not an array", f.Name)
	}
	if es := at.Type.Size(); at.Count <= 0 || !okSize(es) {
		return fmt.Errorf("member %s: %d elements of %d bytes", f.Name, at.Count, es)
	}
	*m.a = array{f.ByteOffset, at.Type.Size(), at.Count}
	return nil
}

// sizes records the struct sizes the walk needs besides the members.
func (l *Layout) setSize(name string, size int64) {
	switch name {
	case "malloc_chunk":
		l.chunk.size = size
	case "malloc_state":
		l.state.size = size
	case "_heap_info":
		l.heap.size = size
	case "tcache_perthread_struct":
		l.tcache.size = size
	}
}

// check confirms what the walk assumes of the structures beyond their
// members' places: glibc's chunk header, bins in pairs, one tcache count per
// entry.
func (l *Layout) check() error {
	switch {
	case l.chunk.prevSize.off != 0 || l.chunk.head.off != 8:
		return fmt.Errorf("malloc_chunk's header is not prev_size, size at 0 and 8")
	case l.state.bins.n%2 != 0 || l.state.bins.n < 4:
		return fmt.Errorf("malloc_state has %d bin pointers", l.state.bins.n)
	case l.tcache.counts.n != l.tcache.entries.n:
		return fmt.Errorf("tcache_perthread_struct has %d counts for %d entries", l.tcache.counts.n, l.tcache.entries.n)
	case l.state.size <= 0 || l.heap.size <= 0 || l.tcache.size <= 0 || l.chunk.size < 4*sizeSz:
		return fmt.Errorf("a struct has no size")
	case (l.heap.size+16)%16 != 0:
		return fmt.Errorf("_heap_info is %d bytes, not aligned as glibc pads it", l.heap.size)
	}
	return nil
}

// LayoutFromDWARF reads the layout from the DWARF of a libc (its debug file).
// Every struct the census reads must be there with every member it needs,
// or the layout cannot be confirmed (errs.ErrNoLayout).
func LayoutFromDWARF(d *dwarf.Data) (l *Layout, err error) {
	defer func() {
		// debug/dwarf can panic on some corrupt input.
		if p := recover(); p != nil {
			l, err = nil, fmt.Errorf("%w: reading DWARF: %v", errs.ErrNoLayout, p)
		}
	}()
	l = &Layout{}
	want := l.want()
	r := d.Reader()
	for len(want) > 0 || l.mallocCode == nil {
		e, err := r.Next()
		if err != nil {
			return nil, fmt.Errorf("%w: reading DWARF: %v", errs.ErrNoLayout, err)
		}
		if e == nil {
			break
		}
		switch e.Tag {
		case dwarf.TagCompileUnit, dwarf.TagPartialUnit:
			if name, _ := e.Val(dwarf.AttrName).(string); name == "malloc.c" || strings.HasSuffix(name, "/malloc.c") {
				rs, err := d.Ranges(e)
				if err != nil || len(rs) == 0 {
					return nil, fmt.Errorf("%w: malloc.c's unit has no code ranges: %v", errs.ErrNoLayout, err)
				}
				for _, r := range rs {
					l.mallocCode = append(l.mallocCode, Span{r[0], r[1]})
				}
			}
			continue // into the unit
		case dwarf.TagStructType, dwarf.TagTypedef:
			name, _ := e.Val(dwarf.AttrName).(string)
			if ms, ok := want[name]; ok && !declaration(e) {
				done, err := l.take(d, e, name, ms)
				if err != nil {
					return nil, err
				}
				if done {
					delete(want, name)
				}
			}
		}
		r.SkipChildren()
	}
	for name := range want {
		return nil, fmt.Errorf("%w: the DWARF has no struct %s with the members the census reads", errs.ErrNoLayout, name)
	}
	if l.mallocCode == nil {
		return nil, fmt.Errorf("%w: the DWARF has no unit for malloc.c", errs.ErrNoLayout)
	}
	if err := l.check(); err != nil {
		return nil, fmt.Errorf("%w: %v", errs.ErrNoLayout, err)
	}
	return l, nil
}

func declaration(e *dwarf.Entry) bool {
	d, _ := e.Val(dwarf.AttrDeclaration).(bool)
	return d
}

// take reads one struct's members into l. It reports false, with no error,
// for a struct of the name that lacks members: libc's DWARF has two
// link_maps, the public one of <link.h> and ld.so's own.
func (l *Layout) take(d *dwarf.Data, e *dwarf.Entry, name string, ms []member) (bool, error) {
	t, err := d.Type(e.Offset)
	if err != nil {
		return false, nil
	}
	for {
		td, ok := t.(*dwarf.TypedefType)
		if !ok {
			break
		}
		t = td.Type
	}
	st, ok := t.(*dwarf.StructType)
	if !ok || st.Incomplete {
		return false, nil
	}
	byName := map[string]*dwarf.StructField{}
	for _, f := range st.Field {
		byName[f.Name] = f
	}
	for _, m := range ms {
		if byName[m.name] == nil {
			return false, nil
		}
	}
	for _, m := range ms {
		if err := m.set(byName[m.name]); err != nil {
			return false, fmt.Errorf("%w: struct %s: %v", errs.ErrNoLayout, name, err)
		}
	}
	l.setSize(name, st.ByteSize)
	return true, nil
}

var (
	layoutsMu sync.Mutex
	layouts   = map[string]*Layout{} // by build-id of the debug file
)

// cachedLayout returns the layout of the debug file with build-id id,
// reading it with read the first time.
func cachedLayout(id string, read func() (*Layout, error)) (*Layout, error) {
	layoutsMu.Lock()
	defer layoutsMu.Unlock()
	if l, ok := layouts[id]; ok && id != "" {
		return l, nil
	}
	l, err := read()
	if err != nil {
		return nil, err
	}
	if id != "" {
		layouts[id] = l
	}
	return l, nil
}
