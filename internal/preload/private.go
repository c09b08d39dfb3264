package preload

import (
	"debug/elf"
	"fmt"
	"strings"

	"github.com/heapscope/heapscope/event"
)

// A PrivateAllocator is an allocator linked into an executable that the
// interposer does not see: the program calls it by names of its own (Rust's
// jemallocator: _rjem_malloc; Redis: je_malloc; mimalloc's mi_malloc called
// directly), or it is the executable's own malloc, which the dynamic linker
// binds the program's calls (and the C library's) to before the
// interposer's. Those allocations are not recorded by the preload provider;
// the eBPF provider probes them.
type PrivateAllocator struct {
	Heap   event.Heap // the allocator: jemalloc, tcmalloc, mimalloc, or HeapExe for an unknown one
	Symbol string     // the defined function that told it
	Malloc bool       // the executable defines malloc too: even its malloc calls bypass the interposer
}

// privateMarks are the entry points of allocators linked in privately, by
// the name of a function only that allocator defines (as internal/ebpf's
// sites.Identify tells them apart), with the prefixes programs give them.
var privateMarks = []struct {
	name string
	heap event.Heap
}{
	{"_rjem_malloc", event.HeapJemalloc}, {"_rjem_mallocx", event.HeapJemalloc}, {"_rjem_sdallocx", event.HeapJemalloc},
	{"je_malloc", event.HeapJemalloc}, {"je_mallocx", event.HeapJemalloc}, {"mallocx", event.HeapJemalloc},
	{"tc_malloc", event.HeapTcmalloc}, {"tc_free", event.HeapTcmalloc},
	{"mi_malloc", event.HeapMimalloc}, {"mi_malloc_aligned", event.HeapMimalloc}, {"mi_free", event.HeapMimalloc},
}

// FindPrivateAllocator reads the symbols of the executable at path and
// reports an allocator defined in it (see PrivateAllocator), if any. A
// static executable is not looked at: the preload provider refuses it
// anyway. A stripped executable shows only what it exports. The error is
// that of reading the file as ELF.
func FindPrivateAllocator(path string) (PrivateAllocator, bool, error) {
	f, err := elf.Open(path)
	if err != nil {
		return PrivateAllocator{}, false, fmt.Errorf("preload: %w", err)
	}
	defer f.Close()
	a, ok := privateAllocator(f)
	return a, ok, nil
}

// privateAllocator is FindPrivateAllocator of an open file.
func privateAllocator(f *elf.File) (PrivateAllocator, bool) {
	dynamic := false
	for _, p := range f.Progs {
		dynamic = dynamic || p.Type == elf.PT_INTERP
	}
	if !dynamic {
		return PrivateAllocator{}, false
	}
	defined := map[string]bool{}
	malloc := false
	for _, load := range []func() ([]elf.Symbol, error){f.Symbols, f.DynamicSymbols} {
		syms, _ := load() // a table that is missing or unreadable tells nothing
		for _, s := range syms {
			if s.Section == elf.SHN_UNDEF || elf.ST_TYPE(s.Info) != elf.STT_FUNC {
				continue
			}
			name, _, _ := strings.Cut(s.Name, "@")
			defined[name] = true
			// a local malloc is nobody's malloc but its file's
			if name == "malloc" && elf.ST_BIND(s.Info) != elf.STB_LOCAL {
				malloc = true
			}
		}
	}
	for _, m := range privateMarks {
		if defined[m.name] {
			return PrivateAllocator{Heap: m.heap, Symbol: m.name, Malloc: malloc}, true
		}
	}
	if malloc {
		return PrivateAllocator{Heap: event.HeapExe, Symbol: "malloc", Malloc: true}, true
	}
	return PrivateAllocator{}, false
}

// Warning is a line that tells the user of `heapscope run` what prog's
// allocator means for the trace, and what to use instead: "warning: " and
// Text.
func (a PrivateAllocator) Warning(prog string) string { return "warning: " + a.Text(prog) }

// Text says what prog's allocator means for the trace, and what to use
// instead (the text of the collector's WarnAllocatorUnseen warning).
func (a PrivateAllocator) Text(prog string) string {
	var what string
	switch {
	case a.Heap == event.HeapExe:
		what = fmt.Sprintf("%s defines its own malloc: the interposer sees none of its allocations", prog)
	case a.Malloc:
		what = fmt.Sprintf("%s has %v linked in as its malloc (%s, malloc): the interposer sees none of its allocations", prog, a.Heap, a.Symbol)
	default:
		what = fmt.Sprintf("%s has %v linked in under names of its own (%s): what it allocates bypasses malloc and is not recorded", prog, a.Heap, a.Symbol)
	}
	return what + "; trace it with --provider ebpf (as root)"
}
