package ebpf

import (
	"debug/elf"
	"fmt"
	"path/filepath"

	"github.com/heapscope/heapscope/buildid"
	"github.com/heapscope/heapscope/internal/ebpf/sites"
)

// glibc's own frees.
//
// When a thread exits, glibc frees what it holds for the thread: its tcache
// and every chunk cached in it (tcache_thread_shutdown, inlined into
// __malloc_arena_thread_freeres), chunks the program freed long before,
// and a block it never saw allocated. Those are glibc's calls into its own
// allocator, not the program's; the preload provider never sees them, as
// they do not go through the dynamic symbol. The free probe drops a free
// whose return address lies in those functions, found by name in the C
// library's symbol table or its separate debug file (Debian's libc6-dbg,
// found by build-id). Without either, nothing is dropped, and a threaded
// program shows about two unmatched frees per thread.

// internalFreeFuncs are the functions whose calls to free are glibc's own.
var internalFreeFuncs = map[string]bool{
	"__malloc_arena_thread_freeres": true, // holds tcache_thread_shutdown, inlined
	"tcache_thread_shutdown":        true, // where not inlined
	"arena_thread_freeres":          true,
}

// debugRoots are where separate debug files are looked for by build-id.
var debugRoots = []string{"/usr/lib/debug"}

// internalFreeRanges returns the virtual address ranges [lo, hi) of the
// internalFreeFuncs in f (whose path is open), from its symbols or those
// of its debug file.
func internalFreeRanges(f *elf.File) [][2]uint64 {
	ranges := funcRanges(f)
	if len(ranges) > 0 {
		return ranges
	}
	id, _ := buildid.ELF(f)
	if len(id) < 3 {
		return nil
	}
	for _, root := range debugRoots {
		d, err := elf.Open(filepath.Join(root, ".build-id", id[:2], id[2:]+".debug"))
		if err != nil {
			continue
		}
		if did, _ := buildid.ELF(d); did == id {
			ranges = funcRanges(d)
		}
		d.Close()
		if len(ranges) > 0 {
			return ranges
		}
	}
	return nil
}

func funcRanges(f *elf.File) [][2]uint64 {
	syms, err := f.Symbols()
	if err != nil {
		return nil
	}
	var out [][2]uint64
	for _, s := range syms {
		if elf.ST_TYPE(s.Info) == elf.STT_FUNC && s.Size > 0 && internalFreeFuncs[s.Name] && len(out) < windowRanges {
			out = append(out, [2]uint64{s.Value, s.Value + s.Size})
		}
	}
	return out
}

// window is the BPF program's struct window: return-address offsets from
// the free probe's address.
type window struct {
	Lo, Hi [windowRanges]int64
}

// freeWindow returns the window index for free site s of the file tg
// (0: none), filling the BPF map on first use. The ranges of a file are
// found once.
func (t *Tracer) freeWindow(tg target, s sites.Site) (uint64, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	ranges, ok := t.internalRanges[tg.open]
	if !ok {
		if f, err := elf.Open(tg.open); err == nil {
			ranges = internalFreeRanges(f)
			f.Close()
		}
		if t.internalRanges == nil {
			t.internalRanges = map[string][][2]uint64{}
		}
		t.internalRanges[tg.open] = ranges
	}
	if len(ranges) == 0 {
		return 0, nil
	}
	probe := int64(s.Addr + s.Placement.Offset)
	var w window
	for i, r := range ranges {
		w.Lo[i], w.Hi[i] = int64(r[0])-probe, int64(r[1])-probe
	}
	for i, have := range t.windows {
		if have == w {
			return uint64(i + 1), nil
		}
	}
	if len(t.windows)+1 >= maxWindows {
		return 0, nil // full: that file's internal frees are counted
	}
	t.windows = append(t.windows, w)
	idx := uint32(len(t.windows))
	if err := t.coll.Maps["internal_frees"].Update(idx, w, 0); err != nil {
		return 0, fmt.Errorf("ebpf: %w", err)
	}
	return uint64(idx), nil
}
