//go:build linux && amd64

package preload

import (
	"testing"

	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/internal/testutil"
)

// TestFindPrivateAllocator reads real executables: ones that define an
// allocator's private entry point (as Rust's jemallocator, Redis and direct
// mimalloc users do), one with jemalloc's archive linked in as its malloc,
// one that defines malloc itself, and ones that do not (plain, jemalloc as a
// shared library, static).
func TestFindPrivateAllocator(t *testing.T) {
	const jemallocPIC = "/usr/lib/x86_64-linux-gnu/libjemalloc_pic.a" // libjemalloc-dev
	for _, c := range []struct {
		name  string
		o     testutil.Options
		found bool
		want  PrivateAllocator
	}{
		{"plain", testutil.Options{}, false, PrivateAllocator{}},
		{"rust-jemallocator", testutil.Options{Flags: []string{"-DNAME=_rjem_malloc"}}, true, PrivateAllocator{event.HeapJemalloc, "_rjem_malloc", false}},
		{"je-prefix", testutil.Options{Flags: []string{"-DNAME=je_malloc"}}, true, PrivateAllocator{event.HeapJemalloc, "je_malloc", false}},
		{"mimalloc-direct", testutil.Options{Flags: []string{"-DNAME=mi_malloc"}}, true, PrivateAllocator{event.HeapMimalloc, "mi_malloc", false}},
		{"tcmalloc-direct", testutil.Options{Flags: []string{"-DNAME=tc_malloc"}}, true, PrivateAllocator{event.HeapTcmalloc, "tc_malloc", false}},
		{"own-malloc", testutil.Options{Flags: []string{"-DNAME=malloc"}}, true, PrivateAllocator{event.HeapExe, "malloc", true}},
		{"jemalloc-archive", testutil.Options{Flags: []string{"-Wl,--whole-archive", jemallocPIC, "-Wl,--no-whole-archive", "-lstdc++"}}, true, PrivateAllocator{event.HeapJemalloc, "mallocx", true}},
		{"jemalloc-shared", testutil.Options{Flags: []string{"-Wl,--no-as-needed", libDir + "libjemalloc.so.2"}}, false, PrivateAllocator{}},
		{"static", testutil.Options{Static: true, Flags: []string{"-DNAME=_rjem_malloc"}}, false, PrivateAllocator{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			bin := testutil.MustBuild(t, "private_alloc", c.o)
			got, found, err := FindPrivateAllocator(bin)
			if err != nil {
				t.Fatal(err)
			}
			if found != c.found || got != c.want {
				t.Errorf("FindPrivateAllocator = %+v, %v; want %+v, %v", got, found, c.want, c.found)
			}
		})
	}
	if _, _, err := FindPrivateAllocator("private_test.go"); err == nil {
		t.Error("FindPrivateAllocator of a Go source file: no error")
	}
}
