package symbolize

import (
	"path"
	"strings"
)

// TrimAllocator returns frames without the allocator's frames at the top:
// the allocation functions themselves (malloc, calloc, realloc, free, the
// aligned family, operator new and delete, std::allocator, Rust's
// alloc::alloc functions, mmap, and the C library's names for them), any
// frame of the interposer library (libheapscope*.so), and the frames of the
// C and C++ runtime libraries that lie above (are called by) such a frame.
// The first frame left is the caller of the allocator. Frames of the
// runtime libraries that called the allocator themselves (strdup,
// std::string) stay: they are the caller.
func TrimAllocator(frames []Frame) []Frame {
	return frames[AllocatorFrames(len(frames), func(i int) *Frame { return &frames[i] }):]
}

// AllocatorFrames returns how many of the n frames at(0), at(1), ...
// (innermost first) TrimAllocator drops: for a caller that keeps its
// frames elsewhere than in one slice.
func AllocatorFrames(n int, at func(int) *Frame) int {
	return leadingRun(n, at, func(f *Frame) bool { return isAllocator(f.Function) || isInterposer(f.Module) },
		func(f, _ *Frame) bool { return isRuntimeLib(f.Module) })
}

// SiteFrame returns the index of the frame that names a site whose stack,
// innermost first, is the n frames at(0), at(1), ... (already without the
// allocator's frames, see TrimAllocator): the first that is not an
// allocator wrapper. A wrapper is
// a function of a program or library that allocates for its callers and
// does nothing else worth a name: xmalloc and its kin (gnulib, libiberty),
// glib's g_malloc family, sqlite3Malloc and its kin, CPython's PyMem_ and
// PyObject_ allocators; the frames of the same module above (called by) a
// wrapper are its internals, symbolized or not (sqlite3Malloc's static
// helper). The frames of wrappers stay in the stack: only the name skips
// them. It is 0 when every frame is a wrapper, or there is none.
func SiteFrame(n int, at func(int) *Frame) int {
	i := leadingRun(n, at, func(f *Frame) bool { return isWrapper(f.Function) },
		func(f, w *Frame) bool { return f.Module != "" && (w == nil || f.Module == w.Module) })
	if i == n {
		return 0
	}
	return i
}

// NoStack names a site whose events had no stack.
const NoStack = "[no stack]"

// SiteName is the name of a site whose stack is frames: the Name of its
// SiteFrame, or NoStack.
func SiteName(frames []Frame) string {
	if len(frames) == 0 {
		return NoStack
	}
	return frames[SiteFrame(len(frames), func(i int) *Frame { return &frames[i] })].Name()
}

// leadingRun returns how many of the n frames at(0), at(1), ... are a run
// that ends at a frame for which end is true: frames for which it is, and
// frames between them for which inside is true of the frame and of the
// end frame that follows them (inside is first asked with a nil end, of
// whether any end frame could have the frame inside it). The run is the
// longest such from the top.
func leadingRun(n int, at func(int) *Frame, end func(*Frame) bool, inside func(f, end *Frame) bool) int {
	cut := 0
	for i := 0; i < n; i++ {
		f := at(i)
		switch {
		case end(f):
			for j := cut; j < i; j++ {
				if !inside(at(j), f) {
					return cut
				}
			}
			cut = i + 1
		case inside(f, nil):
			// Inside an end frame only if one follows: decided by a later
			// iteration.
		default:
			return cut
		}
	}
	return cut
}

// wrapperNames are the allocator wrappers SiteFrame skips, by name.
var wrapperNames = map[string]bool{}

func init() {
	for _, n := range []string{
		// gnulib, libiberty (gcc, binutils, coreutils)
		"xmalloc", "xcalloc", "xrealloc", "xzalloc", "xnmalloc", "xnrealloc", "x2realloc", "x2nrealloc", "ximalloc", "xicalloc", "xirealloc",
		"xcharalloc", "xireallocarray", "xreallocarray",
		// glib
		"g_malloc", "g_malloc0", "g_realloc", "g_try_malloc", "g_try_malloc0", "g_try_realloc", "g_malloc_n", "g_malloc0_n",
		"g_realloc_n", "g_try_malloc_n", "g_try_malloc0_n", "g_try_realloc_n", "g_slice_alloc", "g_slice_alloc0",
		// SQLite
		"sqlite3Malloc", "sqlite3MallocZero", "sqlite3Realloc", "sqlite3_malloc", "sqlite3_malloc64", "sqlite3_realloc",
		"sqlite3_realloc64", "sqlite3DbMallocRaw", "sqlite3DbMallocRawNN", "sqlite3DbMallocZero", "sqlite3DbRealloc",
		"sqlite3MemMalloc", "sqlite3MemRealloc",
	} {
		wrapperNames[n] = true
	}
}

// wrapperPrefixes begin the names of CPython's allocators (PyMem_Malloc,
// PyObject_Malloc, _PyMem_RawMalloc, _PyObject_Calloc, ...).
var wrapperPrefixes = []string{"PyMem_", "_PyMem_", "PyObject_Malloc", "PyObject_Calloc", "PyObject_Realloc",
	"_PyObject_Malloc", "_PyObject_Calloc", "_PyObject_Realloc"}

func isWrapper(fn string) bool {
	if fn == "" {
		return false
	}
	if wrapperNames[fn] {
		return true
	}
	for _, p := range wrapperPrefixes {
		if strings.HasPrefix(fn, p) {
			return true
		}
	}
	return false
}

var allocatorNames = map[string]bool{}

func init() {
	for _, n := range []string{
		"malloc", "calloc", "realloc", "reallocarray", "free", "cfree",
		"posix_memalign", "aligned_alloc", "memalign", "valloc", "pvalloc",
		"mmap", "mmap64", "munmap", "mremap",
	} {
		allocatorNames[n] = true
		// glibc's internal and exported aliases of the same functions.
		allocatorNames["__libc_"+n] = true
		allocatorNames["__"+n] = true
	}
}

func isAllocator(fn string) bool {
	if fn == "" {
		return false
	}
	fn = strings.TrimPrefix(fn, "__GI_")
	if allocatorNames[fn] {
		return true
	}
	// operator new/delete, demangled ("operator new(unsigned long)",
	// "operator delete[](void*, std::align_val_t)") or not (_Znwm, _ZdaPv).
	if strings.HasPrefix(fn, "operator new") || strings.HasPrefix(fn, "operator delete") ||
		strings.HasPrefix(fn, "_Znw") || strings.HasPrefix(fn, "_Zna") ||
		strings.HasPrefix(fn, "_Zdl") || strings.HasPrefix(fn, "_Zda") {
		return true
	}
	for _, p := range allocPrefixes {
		if strings.HasPrefix(fn, p) {
			return true
		}
	}
	return false
}

// allocPrefixes begin the names of the plumbing between a container and
// operator new, usually inlined into the program: C++'s std::allocator and
// its traits, and Rust's counterparts of operator new and delete (the
// global allocator's entry points and the alloc crate's functions that call
// it). The containers that allocate (std::vector, RawVec, String) stay: they
// are the caller.
var allocPrefixes = []string{
	"std::__new_allocator<", "__gnu_cxx::new_allocator<", "std::allocator<", "std::allocator_traits<",
	"__rust_alloc", "__rust_realloc", "__rust_dealloc", "__rdl_",
	"alloc::alloc::", "<alloc::alloc::Global", "std::alloc::", "<std::alloc::System",
}

func isInterposer(module string) bool {
	base := path.Base(module)
	return strings.HasPrefix(base, "libheapscope") && strings.Contains(base, ".so")
}

// runtimeLibs are the libraries whose frames between the allocator and its
// caller are allocator internals.
var runtimeLibs = []string{"libc.so", "libc-", "ld-linux", "libstdc++.so", "libc++.so", "libc++abi.so", "libgcc_s.so"}

func isRuntimeLib(module string) bool {
	if module == "" {
		return false
	}
	base := path.Base(module)
	for _, p := range runtimeLibs {
		if strings.HasPrefix(base, p) {
			return true
		}
	}
	return false
}
