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
	cut := 0
	for i := 0; i < n; i++ {
		f := at(i)
		switch {
		case isAllocator(f.Function) || isInterposer(f.Module):
			cut = i + 1
		case isRuntimeLib(f.Module):
			// Internal to the allocator only if an allocator frame
			// follows; decided by a later iteration.
		default:
			return cut
		}
	}
	return cut
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
