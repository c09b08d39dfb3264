package sites

import (
	"bytes"
	"debug/elf"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/arch/x86/x86asm"

	"github.com/heapscope/heapscope/event"
)

// libraries returns the paths of this machine's C library and C++ runtime.
func libraries() map[string]string {
	libs := map[string]string{}
	for _, dir := range []string{"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64"} {
		for key, name := range map[string]string{"libc": "libc.so.6", "libstdc++": "libstdc++.so.6"} {
			if _, err := os.Stat(filepath.Join(dir, name)); err == nil && libs[key] == "" {
				libs[key] = filepath.Join(dir, name)
			}
		}
	}
	return libs
}

func find(t *testing.T, path string) []Site {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ss, err := Find(f)
	if err != nil {
		t.Fatal(err)
	}
	return ss
}

// TestFindLibc checks the placements in this machine's C library: every
// C allocator function is found, each probe is on an instruction the
// kernel emulates (or, when single-stepped, says why), and free's probe
// is past its NULL test.
func TestFindLibc(t *testing.T) {
	libc := libraries()["libc"]
	if libc == "" {
		t.Skip("no libc.so.6 found")
	}
	ss := find(t, libc)
	got := map[event.Func]Site{}
	for _, s := range ss {
		got[s.Func] = s
		t.Logf("%v", s)
		checkSite(t, libc, s)
	}
	for name, fn := range cFuncs {
		if _, ok := got[fn]; !ok && !(fn == event.FuncMemalign && got[event.FuncAlignedAlloc].Symbol != "") {
			t.Errorf("%s not found in %s", name, libc)
		}
	}
	free := got[event.FuncFree]
	if !free.Placement.Emulated {
		t.Errorf("free's probe is single-stepped: %v", free.Placement)
	}
}

func TestFindLibstdcxx(t *testing.T) {
	lib := libraries()["libstdc++"]
	if lib == "" {
		t.Skip("no libstdc++.so.6 found")
	}
	n := map[event.Func]int{}
	for _, s := range find(t, lib) {
		n[s.Func]++
		checkSite(t, lib, s)
		if s.Role != RoleWrapAlloc && s.Role != RoleWrapFree {
			t.Errorf("%v: role %v in the C++ runtime", s, s.Role)
		}
	}
	for _, fn := range []event.Func{event.FuncNew, event.FuncNewArray, event.FuncDelete, event.FuncDeleteArray} {
		if n[fn] == 0 {
			t.Errorf("no %v found in %s", fn, lib)
		}
	}
}

// checkSite re-reads the probed instruction from the file and checks the
// placement's claims about it.
func checkSite(t *testing.T, path string, s Site) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 16)
	if _, err := f.ReadAt(buf, int64(s.ProbeOffset())); err != nil {
		t.Fatal(err)
	}
	in, err := x86asm.Decode(buf, 64)
	if err != nil && !bytes.HasPrefix(buf, endbr64) {
		t.Errorf("%v: probed bytes do not decode: %v", s, err)
		return
	}
	p := s.Placement
	if p.Emulated != emulated(buf[:in.Len]) {
		t.Errorf("%v: Emulated = %v for % x", s, p.Emulated, buf[:in.Len])
	}
	if !p.Emulated && (p.Offset != 0 || p.Reason == "") {
		t.Errorf("%v: a single-stepped probe must be at the entry, with a reason", s)
	}
	if s.Role == RoleAlloc && p.SPDelta != 0 {
		t.Errorf("%v: a return probe where the stack pointer has moved", s)
	}
	if p.Offset >= s.Size && s.Size != 0 {
		t.Errorf("%v: probe beyond the function's %d bytes", s, s.Size)
	}
}

func TestClassify(t *testing.T) {
	for name, want := range map[string]event.Func{
		"malloc": event.FuncMalloc, "free": event.FuncFree, "pvalloc": event.FuncPvalloc,
		"_Znwm": event.FuncNew, "_ZnamRKSt9nothrow_t": event.FuncNewArray,
		"_ZdlPvm": event.FuncDelete, "_ZdaPvSt11align_val_t": event.FuncDeleteArray,
	} {
		if f, _, ok := Classify(name); !ok || f != want {
			t.Errorf("Classify(%q) = %v, %v", name, f, ok)
		}
	}
	for _, name := range []string{"nallocx", "_Znwj", "__libc_malloc_impl", "freeaddrinfo"} {
		if _, _, ok := Classify(name); ok {
			t.Errorf("Classify(%q) accepted", name)
		}
	}
}

func TestFindNotELF64(t *testing.T) {
	f := &elf.File{FileHeader: elf.FileHeader{Class: elf.ELFCLASS32, Machine: elf.EM_386}}
	if _, err := Find(f); err != ErrNotELF64 {
		t.Errorf("Find(32-bit) = %v", err)
	}
}

// TestClassifyOtherAllocators: the names other allocators give the C
// functions (jemalloc's je_ prefix and extended API, tcmalloc's tc_,
// mimalloc's mi_) are entry points of the same roles.
func TestClassifyOtherAllocators(t *testing.T) {
	for name, want := range map[string]event.Func{
		"je_malloc": event.FuncMalloc, "je_free": event.FuncFree, "je_posix_memalign": event.FuncPosixMemalign,
		"mallocx": event.FuncMalloc, "je_rallocx": event.FuncRealloc, "sdallocx": event.FuncFree, "dallocx": event.FuncFree,
		"tc_calloc": event.FuncCalloc, "tc_free": event.FuncFree, "mi_realloc": event.FuncRealloc, "mi_aligned_alloc": event.FuncAlignedAlloc,
	} {
		f, role, ok := Classify(name)
		wantRole := RoleAlloc
		if want == event.FuncFree {
			wantRole = RoleFree
		}
		if !ok || f != want || role != wantRole {
			t.Errorf("Classify(%q) = %v %v %v, want %v %v", name, f, role, ok, want, wantRole)
		}
	}
	for _, name := range []string{"je_", "tc_version", "mi_stats_print", "xmalloc"} {
		if f, _, ok := Classify(name); ok {
			t.Errorf("Classify(%q) = %v, want none", name, f)
		}
	}
}

// TestFindOwnJemalloc: in Debian's jemalloc, operator delete jumps to
// free@plt (a wrapper, as the C++ runtime's), while sized delete and
// operator new do the work themselves (probed as a free and an allocation).
// Identify names the allocator.
func TestFindOwnJemalloc(t *testing.T) {
	const lib = "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"
	f, err := elf.Open(lib)
	if err != nil {
		t.Fatalf("%v (Debian package libjemalloc2)", err)
	}
	defer f.Close()
	if h, ok := Identify(f); !ok || h != event.HeapJemalloc {
		t.Errorf("Identify = %v %v, want jemalloc", h, ok)
	}
	ss, err := FindOwn(f)
	if err != nil {
		t.Fatal(err)
	}
	roles := map[string]Role{}
	for _, s := range ss {
		roles[s.Symbol] = s.Role
	}
	for sym, want := range map[string]Role{"_ZdlPv": RoleWrapFree, "_ZdlPvm": RoleFree, "_Znwm": RoleAlloc, "malloc": RoleAlloc, "free": RoleFree} {
		if got, ok := roles[sym]; !ok || got != want {
			t.Errorf("%s: role %v (found %v), want %v", sym, got, ok, want)
		}
	}
	libc := libraries()["libc"]
	g, err := elf.Open(libc)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if h, ok := Identify(g); ok {
		t.Errorf("Identify(libc) = %v, want none", h)
	}
}
