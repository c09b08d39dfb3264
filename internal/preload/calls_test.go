//go:build linux && amd64

package preload

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/internal/testutil"
)

var allStacks = event.KindsOf(event.KindAlloc, event.KindRealloc, event.KindFree, event.KindMmap, event.KindMunmap)

// TestSiteCounts checks exact calls and bytes per call site, per thread,
// with one thread and with several.
func TestSiteCounts(t *testing.T) {
	bin := testutil.MustBuild(t, "preload_sites", testutil.Options{})
	const n = 2000
	for _, threads := range []int{0, 3} {
		t.Run(fmt.Sprintf("threads=%d", threads), func(t *testing.T) {
			r := trace(t, Config{Stacks: allStacks}, bin, strconv.Itoa(threads), strconv.Itoa(n))
			if !r.state.Success() {
				t.Fatalf("workload failed: %v", r.state)
			}
			// every site event, per thread
			type perThread struct{ malloc, calloc, small, realloc, freeM, freeC, freeR uint64 }
			tids := map[uint32]*perThread{}
			var sizeErr []string
			for _, e := range r.of(r.pid) {
				site := r.site(e)
				if !strings.HasPrefix(site, "site_") {
					continue
				}
				pt := tids[e.TID]
				if pt == nil {
					pt = &perThread{}
					tids[e.TID] = pt
				}
				want := uint64(0)
				switch {
				case site == "site_malloc" && e.Func == event.FuncMalloc:
					pt.malloc++
					want = 24
				case site == "site_malloc" && e.Func == event.FuncFree:
					pt.freeM++
				case site == "site_calloc" && e.Func == event.FuncCalloc:
					pt.calloc++
					want = 48
				case site == "site_calloc" && e.Func == event.FuncFree:
					pt.freeC++
				case site == "site_realloc" && e.Func == event.FuncMalloc:
					pt.small++
					want = 10
				case site == "site_realloc" && e.Func == event.FuncRealloc:
					pt.realloc++
					want = 1000
				case site == "site_realloc" && e.Func == event.FuncFree:
					pt.freeR++
				default:
					t.Errorf("unexpected %v from %s", e.Func, site)
				}
				if e.Size != want && len(sizeErr) < 5 {
					sizeErr = append(sizeErr, fmt.Sprintf("%v from %s: size %d, want %d", e.Func, site, e.Size, want))
				}
				if e.Func != event.FuncFree && e.Addr == 0 {
					t.Errorf("%v from %s returned NULL", e.Func, site)
				}
			}
			if len(sizeErr) > 0 {
				t.Error(strings.Join(sizeErr, "\n"))
			}
			if len(tids) != threads+1 {
				t.Fatalf("site events from %d threads, want %d", len(tids), threads+1)
			}
			// thread i calls site_malloc n*(i+1) times: one thread each
			var mallocs []int
			for tid, pt := range tids {
				if pt.calloc != n || pt.freeC != n || pt.small != n || pt.realloc != n || pt.freeR != n {
					t.Errorf("tid %d: %+v, want %d calloc, free, malloc, realloc and free from the other sites", tid, *pt, n)
				}
				if pt.freeM != pt.malloc {
					t.Errorf("tid %d: %d mallocs and %d frees in site_malloc", tid, pt.malloc, pt.freeM)
				}
				mallocs = append(mallocs, int(pt.malloc))
			}
			sort.Ints(mallocs)
			for i, m := range mallocs {
				if m != n*(i+1) {
					t.Errorf("site_malloc calls per thread %v, want %d×1..%d", mallocs, n, threads+1)
					break
				}
			}
			checkLive(t, r)
		})
	}
}

// checkLive replays a run's events, in the order the sink got them, and
// checks that no block is freed unless live or allocated twice: any event
// delivered out of order breaks it. Frees of blocks never seen (allocated
// before tracing began) are allowed only from outside the workload's sites.
func checkLive(t *testing.T, r *result) {
	t.Helper()
	type key struct {
		pid  uint32
		addr uint64
	}
	live := map[key]bool{}
	bad := 0
	complain := func(format string, args ...any) {
		if bad++; bad <= 5 {
			t.Errorf(format, args...)
		}
	}
	for i, e := range r.events {
		switch e.Kind {
		case event.KindAlloc:
			if e.Addr == 0 {
				continue
			}
			if live[key{e.PID, e.Addr}] {
				complain("event %d: %v returned %#x, still live", i, e.Func, e.Addr)
			}
			live[key{e.PID, e.Addr}] = true
		case event.KindRealloc:
			if e.OldAddr != 0 {
				delete(live, key{e.PID, e.OldAddr})
			}
			if e.Addr != 0 {
				live[key{e.PID, e.Addr}] = true
			}
		case event.KindFree:
			if !live[key{e.PID, e.Addr}] && strings.HasPrefix(r.site(e), "site_") {
				complain("event %d: %s frees %#x, not live", i, r.site(e), e.Addr)
			}
			delete(live, key{e.PID, e.Addr})
		}
	}
	if bad > 5 {
		t.Errorf("... %d order errors in all", bad)
	}
}

// TestHandoffOrder has blocks allocated in one thread freed in another,
// their addresses reused by a third: the merged stream must put every
// free after its malloc and every reuse after the free.
func TestHandoffOrder(t *testing.T) {
	bin := testutil.MustBuild(t, "preload_handoff", testutil.Options{})
	const n = 20000
	r := trace(t, Config{Stacks: allStacks}, bin, strconv.Itoa(n))
	if !r.state.Success() {
		t.Fatalf("workload failed: %v", r.state)
	}
	counts := r.bySite(r.pid)
	if got := counts[siteKey{"site_produce", event.FuncMalloc}].calls; got != n {
		t.Errorf("site_produce: %d mallocs, want %d", got, n)
	}
	if got := counts[siteKey{"site_consume", event.FuncFree}].calls; got != n {
		t.Errorf("site_consume: %d frees, want %d", got, n)
	}
	tids := map[string]map[uint32]bool{}
	for _, e := range r.of(r.pid) {
		if s := r.site(e); strings.HasPrefix(s, "site_") {
			if tids[s] == nil {
				tids[s] = map[uint32]bool{}
			}
			tids[s][e.TID] = true
		}
	}
	if len(tids["site_produce"]) != 1 || len(tids["site_consume"]) != 1 {
		t.Fatalf("threads per site: %v", tids)
	}
	for p := range tids["site_produce"] {
		if tids["site_consume"][p] {
			t.Fatal("producer and consumer on one thread")
		}
	}
	checkLive(t, r)
}

// outputAddrs parses a workload's "name 0xADDR" lines.
func outputAddrs(t *testing.T, out string) map[string]uint64 {
	t.Helper()
	addr := map[string]uint64{}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(l)
		if len(f) != 2 {
			t.Fatalf("bad output line %q", l)
		}
		a, err := strconv.ParseUint(strings.TrimPrefix(f[1], "0x"), 16, 64)
		if err != nil {
			t.Fatalf("bad output line %q: %v", l, err)
		}
		addr[f[0]] = a
	}
	return addr
}

// TestEveryFunction calls each wrapped function once and finds each with
// its size, address and kind.
func TestEveryFunction(t *testing.T) {
	bin := testutil.MustBuild(t, "preload_funcs", testutil.Options{})
	r := trace(t, Config{Families: event.FamilyAll, Stacks: allStacks}, bin)
	if !r.state.Success() {
		t.Fatalf("workload failed: %v", r.state)
	}
	addr := outputAddrs(t, r.stdout)
	var fromMain []event.Event
	for _, e := range r.of(r.pid) {
		if r.site(e) == "main" {
			fromMain = append(fromMain, e)
		}
	}
	type want struct {
		fn         event.Func
		kind       event.Kind
		heap       event.Heap
		addr, size uint64
		old        uint64
		oldSize    uint64
	}
	wants := []want{
		{event.FuncMalloc, event.KindAlloc, event.HeapLibc, addr["malloc"], 101, 0, 0},
		{event.FuncCalloc, event.KindAlloc, event.HeapLibc, addr["calloc"], 77, 0, 0},
		{event.FuncRealloc, event.KindRealloc, event.HeapLibc, addr["realloc"], 202, addr["malloc"], 0},
		{event.FuncReallocarray, event.KindRealloc, event.HeapLibc, addr["reallocarray"], 303, addr["realloc"], 0},
		{event.FuncPosixMemalign, event.KindAlloc, event.HeapLibc, addr["posix_memalign"], 404, 0, 0},
		{event.FuncAlignedAlloc, event.KindAlloc, event.HeapLibc, addr["aligned_alloc"], 512, 0, 0},
		{event.FuncMemalign, event.KindAlloc, event.HeapLibc, addr["memalign"], 606, 0, 0},
		{event.FuncValloc, event.KindAlloc, event.HeapLibc, addr["valloc"], 707, 0, 0},
		{event.FuncPvalloc, event.KindAlloc, event.HeapLibc, addr["pvalloc"], 808, 0, 0},
		{event.FuncMmap, event.KindMmap, event.HeapMmap, addr["mmap"], 8192, 0, 0},
		{event.FuncMremap, event.KindRealloc, event.HeapMmap, addr["mremap"], 16384, addr["mmap"], 8192},
		{event.FuncMunmap, event.KindMunmap, event.HeapMmap, addr["mremap"], 16384, 0, 0},
		{event.FuncMalloc, event.KindAlloc, event.HeapLibc, 0, 1 << 62, 0, 0}, // failed: Addr 0
		{event.FuncFree, event.KindFree, event.HeapLibc, addr["calloc"], 0, 0, 0},
		{event.FuncFree, event.KindFree, event.HeapLibc, addr["reallocarray"], 0, 0, 0},
		{event.FuncFree, event.KindFree, event.HeapLibc, addr["posix_memalign"], 0, 0, 0},
		{event.FuncFree, event.KindFree, event.HeapLibc, addr["aligned_alloc"], 0, 0, 0},
		{event.FuncFree, event.KindFree, event.HeapLibc, addr["memalign"], 0, 0, 0},
		{event.FuncFree, event.KindFree, event.HeapLibc, addr["valloc"], 0, 0, 0},
		{event.FuncFree, event.KindFree, event.HeapLibc, addr["pvalloc"], 0, 0, 0},
	}
	// printf allocates stdout's buffer from main too: skip main's other
	// events, but the wanted ones must come in this order.
	i := 0
	for _, e := range fromMain {
		if i == len(wants) {
			break
		}
		w := wants[i]
		got := want{e.Func, e.Kind, e.Heap, e.Addr, e.Size, e.OldAddr, e.OldSize}
		if got == w {
			i++
			continue
		}
		if e.Func == w.fn {
			t.Errorf("event %d: got %+v, want %+v", i, got, w)
			i++
		}
	}
	if i != len(wants) {
		t.Errorf("found %d of the %d calls; next missing %+v", i, len(wants), wants[i])
	}
	if addr["pvalloc"]%4096 != 0 || addr["valloc"]%4096 != 0 || addr["memalign"]%256 != 0 {
		t.Errorf("alignment not kept: %v", addr)
	}

	// by default, the mmap family is not traced
	r = trace(t, Config{}, bin)
	for _, e := range r.events {
		if e.Func.Family() == event.FamilyMmap {
			t.Fatalf("%v traced without the mmap family", e.Func)
		}
	}
}

// TestCXX traces C++ operator new and delete as themselves, and, with the
// C++ family off, as the malloc and free they call.
func TestCXX(t *testing.T) {
	bin := testutil.MustBuild(t, "preload_cxx", testutil.Options{CXX: true})
	r := trace(t, Config{Stacks: allStacks}, bin)
	if !r.state.Success() {
		t.Fatalf("workload failed: %v", r.state)
	}
	got := r.bySite(r.pid)
	// new Obj twice (once nothrow) and once after the exception; new[] once,
	// and once failing; the exception object, allocated by libstdc++ inside
	// the failing new and freed when main's handler ends
	for k, want := range map[siteKey]siteCount{
		{"main", event.FuncNew}:         {3, 144},
		{"main", event.FuncNewArray}:    {2, 100 + 1<<62},
		{"main", event.FuncDelete}:      {3, 0},
		{"main", event.FuncDeleteArray}: {1, 0},
		{"main", event.FuncMalloc}:      {0, 0},
		{"main", event.FuncFree}:        {1, 0},
	} {
		if got[k] != want {
			t.Errorf("%s %v: %+v, want %+v", k.site, k.fn, got[k], want)
		}
	}
	var exc, failed event.Event
	for _, e := range r.of(r.pid) {
		if e.Func == event.FuncMalloc && r.site(e) == "__cxa_allocate_exception" {
			exc = e
		}
		if e.Func == event.FuncNewArray && e.Size == 1<<62 {
			failed = e
		}
	}
	if exc.Addr == 0 || failed.Func == 0 || failed.Addr != 0 {
		t.Errorf("exception object %+v, failed new[] %+v", exc, failed)
	}
	// the operators' own malloc and free are not seen twice
	for k, c := range got {
		if (k.fn == event.FuncMalloc || k.fn == event.FuncFree) && strings.HasPrefix(k.site, "operator") {
			t.Errorf("%d %v calls from inside %s", c.calls, k.fn, k.site)
		}
	}
	checkLive(t, r)

	// With the C++ family off, the operators are seen as the malloc and
	// free libstdc++ calls: the three blocks main allocated, freed.
	r = trace(t, Config{Families: event.FamilyHeap &^ event.FamilyCXX, Stacks: allStacks}, bin)
	live := map[uint64]bool{}
	allocs, frees := 0, 0
	for _, e := range r.of(r.pid) {
		if e.Func.Family() == event.FamilyCXX {
			t.Errorf("%v traced with the C++ family off", e.Func)
		}
		if e.Func == event.FuncMalloc && e.Addr != 0 && (e.Size == 48 || e.Size == 100) && r.site(e) != "main" {
			allocs++
			live[e.Addr] = true
		}
		if e.Func == event.FuncFree && live[e.Addr] {
			frees++
			delete(live, e.Addr)
		}
	}
	if allocs != 4 || frees != 4 {
		t.Errorf("with the C++ family off: %d blocks of 48 or 100 bytes malloc'd from libstdc++, %d of them freed; want 4 and 4", allocs, frees)
	}
}

// TestReallocMove sees a realloc that moves its block as one event from
// the old address to the new one.
func TestReallocMove(t *testing.T) {
	bin := testutil.MustBuild(t, "preload_realloc", testutil.Options{})
	r := trace(t, Config{}, bin)
	out := outputAddrs(t, r.stdout)
	oldA, newA := out["old"], out["new"]
	if oldA == newA {
		t.Fatal("the workload's realloc did not move")
	}
	var found []event.Event
	for _, e := range r.of(r.pid) {
		if e.Kind == event.KindRealloc {
			found = append(found, e)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d reallocs, want 1", len(found))
	}
	e := found[0]
	if e.OldAddr != oldA || e.Addr != newA || e.Size != 1<<20 || r.site(e) != "main" {
		t.Errorf("realloc %+v from %s, want %#x -> %#x, 1 MiB, from main", e, r.site(e), oldA, newA)
	}
	checkLive(t, r)
}

// TestUnknownFree frees a block allocated past the interposer: the program
// is unaffected and the free is reported as it happened.
func TestUnknownFree(t *testing.T) {
	bin := testutil.MustBuild(t, "preload_prefree", testutil.Options{})
	r := trace(t, Config{Stacks: allStacks}, bin)
	if !r.state.Success() {
		t.Fatalf("workload failed: %v", r.state)
	}
	block := outputAddrs(t, r.stdout)["block"]
	frees := 0
	for _, e := range r.of(r.pid) {
		if e.Addr == block && e.Kind == event.KindAlloc {
			t.Error("the block's allocation was seen")
		}
		if e.Addr == block && e.Kind == event.KindFree && r.site(e) == "main" {
			frees++
		}
	}
	if frees != 1 {
		t.Errorf("%d frees of the block from main, want 1", frees)
	}
}
