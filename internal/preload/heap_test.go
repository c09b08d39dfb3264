//go:build linux && amd64

package preload

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/internal/testutil"
)

const libDir = "/usr/lib/x86_64-linux-gnu/"

// TestAllocatorHeap traces preload_sites with the C library's malloc and
// with jemalloc (Debian's libjemalloc2: preloaded, and linked), tcmalloc
// (libtcmalloc-minimal4, preloaded) and mimalloc (libmimalloc2.0,
// preloaded), and jemalloc under another file name (told by a function only
// it defines): every heap event carries the allocator the interposer
// forwarded it to, and every call is still counted, at its site, with its
// size.
func TestAllocatorHeap(t *testing.T) {
	const n = 500
	for _, c := range []struct {
		name    string
		lib     string // must exist
		flags   []string
		preload bool
		rename  bool // preload a copy of lib named libmyalloc.so
		heap    event.Heap
	}{
		{"glibc", "libc.so.6", nil, false, false, event.HeapLibc},
		{"jemalloc-preloaded", "libjemalloc.so.2", nil, true, false, event.HeapJemalloc},
		{"jemalloc-linked", "libjemalloc.so.2", []string{"-Wl,--no-as-needed", libDir + "libjemalloc.so.2"}, false, false, event.HeapJemalloc},
		{"jemalloc-renamed", "libjemalloc.so.2", nil, true, true, event.HeapJemalloc},
		{"tcmalloc-preloaded", "libtcmalloc_minimal.so.4", nil, true, false, event.HeapTcmalloc},
		{"mimalloc-preloaded", "libmimalloc.so.2", nil, true, false, event.HeapMimalloc},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := os.Stat(libDir + c.lib); err != nil {
				t.Fatalf("%v: install the Debian package (see .ci/run)", err)
			}
			bin := testutil.MustBuild(t, "preload_sites", testutil.Options{Flags: c.flags})
			cmd := exec.Command(bin, "0", strconv.Itoa(n))
			if c.preload {
				lib := libDir + c.lib
				if c.rename {
					b, err := os.ReadFile(lib)
					if err != nil {
						t.Fatal(err)
					}
					lib = filepath.Join(t.TempDir(), "libmyalloc.so")
					if err := os.WriteFile(lib, b, 0o700); err != nil {
						t.Fatal(err)
					}
				}
				cmd.Env = append(os.Environ(), "LD_PRELOAD="+lib)
			}
			r := traceCmd(t, Config{Stacks: allStacks, Families: event.FamilyAll}, cmd)
			if !r.state.Success() {
				t.Fatalf("workload failed: %v", r.state)
			}
			heaps := map[event.Heap]int{}
			for _, e := range r.of(r.pid) {
				want := c.heap
				if e.Func.Family() == event.FamilyMmap {
					want = event.HeapMmap
				}
				if e.Heap != want {
					heaps[e.Heap]++
				}
			}
			if len(heaps) > 0 {
				t.Errorf("events labeled with another heap than %v (or mmap for the mmap family): %v", c.heap, heaps)
			}
			got := r.bySite(r.pid)
			for k, want := range map[siteKey]siteCount{
				{"site_malloc", event.FuncMalloc}:   {n, n * 24},
				{"site_malloc", event.FuncFree}:     {n, 0},
				{"site_calloc", event.FuncCalloc}:   {n, n * 48},
				{"site_calloc", event.FuncFree}:     {n, 0},
				{"site_realloc", event.FuncMalloc}:  {n, n * 10},
				{"site_realloc", event.FuncRealloc}: {n, n * 1000},
				{"site_realloc", event.FuncFree}:    {n, 0},
			} {
				if got[k] != want {
					t.Errorf("%s %v: %d calls, %d bytes; want %d, %d", k.site, k.fn, got[k].calls, got[k].bytes, want.calls, want.bytes)
				}
			}
			checkLive(t, r)
		})
	}
}

// TestProgramHeapUntouched runs preload_mallinfo (mallinfo2() before the
// first allocation, after each of a series of allocations and after
// freeing them, as heaptrack's measure_malloc_overhead shows it) untraced
// and traced under every unwinder, single-threaded and after 8 threads:
// the program's heap must be the same, figure for figure. What the C
// library allocates for the interposer (libunwind's loading and thread
// data, dlsym's buffers) used to come from the program's malloc: under
// --unwind tables and dwarf the first small allocation found an arena
// already grown. With threads, the loader's per-thread TLS vector (from the
// program's heap) grows by 16 bytes for each module with TLS, which the
// interposer has, and libunwind once loaded: the untraced run preloads as
// many builds of a library with nothing but TLS.
func TestProgramHeapUntouched(t *testing.T) {
	bin := testutil.MustBuild(t, "preload_mallinfo", testutil.Options{})
	tls1 := testutil.MustBuild(t, "preload_tlsonly", testutil.Options{Flags: []string{"-shared", "-fPIC"}})
	tls2 := testutil.MustBuild(t, "preload_tlsonly", testutil.Options{Flags: []string{"-shared", "-fPIC", "-DSECOND"}})
	untraced := func(preload string, args ...string) string {
		cmd := exec.Command(bin, args...)
		if preload != "" {
			cmd.Env = append(os.Environ(), "LD_PRELOAD="+preload)
		}
		out, err := cmd.Output()
		if err != nil {
			t.Fatal(err)
		}
		return string(out)
	}
	for _, u := range threadStartUnwinders {
		for _, threads := range []string{"0", "8"} {
			t.Run(u.String()+"/threads="+threads, func(t *testing.T) {
				preload := ""
				if threads != "0" {
					preload = tls1
					if u != event.UnwindFP {
						preload += " " + tls2 // libunwind's
					}
				}
				want := untraced(preload, threads)
				r := trace(t, Config{Unwind: u}, bin, threads)
				if r.stdout != want {
					t.Errorf("mallinfo2 traced:\n%s\nuntraced:\n%s", r.stdout, want)
				}
				if len(r.of(r.pid)) == 0 {
					t.Error("nothing traced")
				}
			})
		}
	}
}
