package inject

import (
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/heapscope/heapscope/buildid"
	"github.com/heapscope/heapscope/internal/errs"
	"github.com/heapscope/heapscope/internal/proc"
)

// span is a range of addresses [lo, hi), with what it is.
type span struct {
	lo, hi uint64
	name   string
}

// funcs is a sorted list of a module's functions (from .dynsym), in the
// process's addresses.
type funcs []span

// libcInfo is what injection needs of a process's C library: where its
// functions are, which of them a thread must not be inside when another
// call runs on it, and where a trampoline can go.
type libcInfo struct {
	path string
	bias uint64
	fn   map[string]uint64 // exported functions the injector calls
	all  funcs             // every exported function, sorted
	// unsafe are the functions (and, with libc's debug file, malloc.c's
	// whole code) inside which a thread may hold the allocator's or the
	// loader's state half changed.
	unsafe []span
	caves  []span // padding after its executable segments
}

// The functions a thread must not be inside: they hold (or may be about to
// change under) a lock or state that dlopen and the interposer's start
// take: the allocator's arenas, the loader's lists, fork's and
// pthread_create's locks, exit's handlers.
var unsafeFuncs = map[string]bool{
	"malloc": true, "free": true, "calloc": true, "realloc": true, "reallocarray": true, "posix_memalign": true,
	"aligned_alloc": true, "memalign": true, "valloc": true, "pvalloc": true, "malloc_usable_size": true,
	"malloc_trim": true, "mallinfo": true, "mallinfo2": true, "malloc_stats": true, "malloc_info": true,
	"mallopt": true, "cfree": true, "__libc_malloc": true, "__libc_free": true, "__libc_calloc": true,
	"__libc_realloc": true, "__libc_memalign": true, "__libc_valloc": true, "__libc_pvalloc": true,
	"dlopen": true, "dlmopen": true, "dlclose": true, "dlsym": true, "dlvsym": true, "dladdr": true,
	"dladdr1": true, "dlinfo": true, "dlerror": true, "dl_iterate_phdr": true, "__libc_dlopen_mode": true,
	"__libc_dlsym": true, "__libc_dlvsym": true, "__libc_dlclose": true, "_dl_find_object": true,
	"fork": true, "_Fork": true, "vfork": true, "__libc_fork": true, "posix_spawn": true, "posix_spawnp": true,
	"system": true, "popen": true, "pthread_create": true, "pthread_exit": true,
	"pthread_atfork": true, "__register_atfork": true, "exit": true, "_exit": true, "quick_exit": true,
	"__cxa_finalize": true, "__cxa_thread_atexit_impl": true, "abort": true, "__libc_freeres": true,
}

// The functions the injector calls.
var neededFuncs = []string{"dlopen", "dlerror", "__errno_location", "close", "memfd_create"}

var (
	libcMu    sync.Mutex
	libcCache = map[string]*libcFile{}
)

// libcFile is what is read once per C library file (by path, device, inode
// and build-id): its symbols in file addresses.
type libcFile struct {
	syms   []elf.Symbol
	progs  []elf.ProgHeader
	malloc []span // malloc.c's code, from the debug file, in file addresses
}

// findLibc finds the C library process pid maps and reads it. It refuses a
// process without one (statically linked) and one whose C library is not
// glibc.
func findLibc(pid int, maps []proc.Mapping) (*libcInfo, error) {
	var m proc.Mapping
	haveLoader := false
	for _, x := range maps {
		base := filepath.Base(x.Path)
		switch {
		case strings.HasPrefix(base, "ld-musl-") || strings.HasPrefix(base, "libc.musl"):
			return nil, fmt.Errorf("pid %d runs on musl (%s): injection needs glibc: %w", pid, x.Path, errs.ErrUnavailable)
		case strings.HasPrefix(base, "ld-linux") || strings.HasPrefix(base, "ld64.so"):
			haveLoader = true
		case (base == "libc.so.6" || strings.HasPrefix(base, "libc-2.")) && m.Path == "":
			m = x
		}
	}
	if m.Path == "" {
		interp := interpreter(pid)
		if b := filepath.Base(interp); strings.HasPrefix(b, "ld-musl-") {
			return nil, fmt.Errorf("pid %d runs on musl (its interpreter is %q): injection needs glibc: %w", pid, interp, errs.ErrUnavailable)
		}
		if interp != "" && !haveLoader {
			return nil, fmt.Errorf("pid %d maps no glibc (its interpreter is %q): injection needs glibc: %w", pid, interp, errs.ErrUnavailable)
		}
		if !haveLoader {
			return nil, fmt.Errorf("pid %d is statically linked (no dynamic loader, no C library is mapped): nothing to load the interposer into; attach without --inject: %w", pid, errs.ErrUnavailable)
		}
		return nil, fmt.Errorf("pid %d maps no glibc (libc.so.6): %w", pid, errs.ErrUnavailable)
	}
	f, err := readLibcFile(pid, m)
	if err != nil {
		return nil, err
	}
	bias, err := loadBias(f.progs, maps, m.Path)
	if err != nil {
		return nil, fmt.Errorf("pid %d: %s: %w", pid, m.Path, err)
	}
	l := &libcInfo{path: m.Path, bias: bias, fn: map[string]uint64{}}
	isGlibc := false
	for _, s := range f.syms {
		if elf.ST_TYPE(s.Info) != elf.STT_FUNC && elf.ST_TYPE(s.Info) != elf.STT_GNU_IFUNC {
			if s.Name == "__libc_version" || s.Name == "gnu_get_libc_version" {
				isGlibc = true
			}
			continue
		}
		if s.Section == elf.SHN_UNDEF || s.Value == 0 {
			continue
		}
		if s.Name == "gnu_get_libc_version" {
			isGlibc = true
		}
		lo := s.Value + bias
		sp := span{lo, lo + max(s.Size, 1), s.Name}
		l.all = append(l.all, sp)
		if unsafeFuncs[s.Name] {
			l.unsafe = append(l.unsafe, sp)
		}
		if elf.ST_TYPE(s.Info) == elf.STT_FUNC {
			for _, n := range neededFuncs {
				if s.Name == n {
					if _, ok := l.fn[n]; !ok {
						l.fn[n] = lo
					}
				}
			}
		}
	}
	if !isGlibc {
		return nil, fmt.Errorf("pid %d: %s is not glibc (no gnu_get_libc_version): injection needs glibc: %w", pid, m.Path, errs.ErrUnavailable)
	}
	for _, n := range []string{"dlopen", "dlerror", "__errno_location"} {
		if l.fn[n] == 0 {
			return nil, fmt.Errorf("pid %d: %s has no %s (glibc before 2.34 keeps it in libdl): %w", pid, m.Path, n, errs.ErrUnavailable)
		}
	}
	for _, s := range f.malloc {
		l.unsafe = append(l.unsafe, span{s.lo + bias, s.hi + bias, "malloc.c"})
	}
	sort.Slice(l.all, func(i, j int) bool { return l.all[i].lo < l.all[j].lo })
	l.caves = cavesOf(f.progs, bias)
	return l, nil
}

// interpreter returns the program interpreter (PT_INTERP) of process
// pid's executable, "" for none or when it cannot be read.
func interpreter(pid int) string {
	f, err := elf.Open("/proc/" + strconv.Itoa(pid) + "/exe")
	if err != nil {
		return ""
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type != elf.PT_INTERP || p.Filesz == 0 || p.Filesz > 4096 {
			continue
		}
		b := make([]byte, p.Filesz)
		if _, err := p.ReadAt(b, 0); err != nil {
			return ""
		}
		return strings.TrimRight(string(b), "\x00")
	}
	return ""
}

func readLibcFile(pid int, m proc.Mapping) (*libcFile, error) {
	path := proc.MappedFile(pid, m)
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("pid %d: %s: %w", pid, m.Path, err)
	}
	key := m.Path + "\x00" + m.Dev + "\x00" + strconv.FormatUint(m.Inode, 10) + "\x00" + strconv.FormatInt(fi.Size(), 10) + "\x00" + fi.ModTime().String()
	libcMu.Lock()
	defer libcMu.Unlock()
	if f := libcCache[key]; f != nil {
		return f, nil
	}
	ef, err := elf.Open(path)
	if err != nil {
		return nil, fmt.Errorf("pid %d: %s: %w", pid, m.Path, err)
	}
	defer ef.Close()
	syms, err := ef.DynamicSymbols()
	if err != nil {
		return nil, fmt.Errorf("pid %d: %s: reading its dynamic symbols: %w", pid, m.Path, err)
	}
	f := &libcFile{syms: syms}
	for _, p := range ef.Progs {
		f.progs = append(f.progs, p.ProgHeader)
	}
	if id, err := buildid.ELF(ef); err == nil && len(id) > 2 {
		f.malloc = mallocCode(id, pid)
	}
	libcCache[key] = f
	return f, nil
}

// mallocCode returns where malloc.c's functions are, static ones
// included (_int_malloc, sysmalloc, arena_get2, ...), from glibc's
// separate debug file (libc6-dbg, found by build-id): its full symbol
// table lists each source file's local symbols after the file's own
// symbol, as the census finds malloc.c's code in the DWARF (the symbol
// table is read in milliseconds, the DWARF in a tenth of a second). A
// thread anywhere in them is inside malloc. Without the debug file, nil:
// the exported functions' ranges stand for it (a thread inside malloc.c's
// code has one of them among its callers).
func mallocCode(id string, pid int) []span {
	for _, dir := range []string{"/usr/lib/debug", "/proc/" + strconv.Itoa(pid) + "/root/usr/lib/debug"} {
		p := filepath.Join(dir, ".build-id", id[:2], id[2:]+".debug")
		f, err := elf.Open(p)
		if err != nil {
			continue
		}
		got, _ := buildid.ELF(f)
		var spans []span
		if got == id {
			spans = fileFuncs(f, "malloc.c")
		}
		f.Close()
		if spans != nil {
			return spans
		}
	}
	return nil
}

// fileFuncs returns the local functions that f's symbol table lists after
// the STT_FILE symbol name (up to the next file's).
func fileFuncs(f *elf.File, name string) []span {
	syms, err := f.Symbols()
	if err != nil {
		return nil
	}
	var out []span
	in := false
	for _, s := range syms {
		if elf.ST_TYPE(s.Info) == elf.STT_FILE {
			in = s.Name == name
			continue
		}
		if in && elf.ST_TYPE(s.Info) == elf.STT_FUNC && s.Value != 0 && s.Size != 0 {
			out = append(out, span{s.Value, s.Value + s.Size, s.Name})
		}
	}
	return out
}

// loadBias returns what to add to a file address of the file mapped at path
// to find it in the process.
func loadBias(progs []elf.ProgHeader, maps []proc.Mapping, path string) (uint64, error) {
	for _, m := range maps {
		if m.Path != path {
			continue
		}
		for _, p := range progs {
			if p.Type != elf.PT_LOAD || m.Offset < p.Off || m.Offset >= p.Off+p.Filesz || p.Vaddr%4096 != p.Off%4096 {
				continue
			}
			return m.Start - (p.Vaddr + (m.Offset - p.Off)), nil
		}
	}
	return 0, errors.New("no mapping of its loaded segments")
}

// cavesOf returns the padding after each executable segment, up to its
// page's end: mapped, executable, and never run.
func cavesOf(progs []elf.ProgHeader, bias uint64) []span {
	var out []span
	for _, p := range progs {
		if p.Type != elf.PT_LOAD || p.Flags&elf.PF_X == 0 || p.Memsz == 0 {
			continue
		}
		end := bias + p.Vaddr + p.Memsz
		page := (end + 4095) &^ 4095
		if page > end {
			out = append(out, span{end, page, "padding"})
		}
	}
	return out
}
