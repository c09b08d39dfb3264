package preload

import (
	"testing"

	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/internal/testutil"
)

// TestSampling runs two threads that allocate (malloc, calloc), reallocate
// and free blocks of 8 to 12000 bytes, freeing some in the other thread,
// at a sampling rate of 16 KiB: only a sample of the allocations is
// recorded; every free and realloc recorded is of a block whose allocation
// was (a block not sampled leaves no trace); and every block recorded is
// freed by the end, as the program frees everything.
func TestSampling(t *testing.T) {
	bin := testutil.MustBuild(t, "sample_threads", testutil.Options{})
	r := trace(t, Config{SampleRate: 16 << 10, SampleSeed: 42}, bin, "20000")
	live := map[uint64]bool{}
	var allocs, frees, reallocs, bytes uint64
	for _, e := range r.of(r.pid) {
		switch e.Kind {
		case event.KindAlloc:
			if e.Addr == 0 {
				t.Errorf("a failed allocation recorded while sampling: %+v", e)
				continue
			}
			if live[e.Addr] {
				t.Errorf("allocation of %#x, recorded live already", e.Addr)
			}
			live[e.Addr] = true
			allocs++
			bytes += e.Size
		case event.KindFree:
			if !live[e.Addr] {
				t.Errorf("free of %#x, whose allocation was not recorded", e.Addr)
			}
			delete(live, e.Addr)
			frees++
		case event.KindRealloc:
			if e.OldAddr != 0 {
				if !live[e.OldAddr] {
					t.Errorf("realloc of %#x, whose allocation was not recorded", e.OldAddr)
				}
				delete(live, e.OldAddr)
			}
			if e.Addr != 0 {
				live[e.Addr] = true
			}
			reallocs++
		}
	}
	// 2 × 20000 allocations of 3 KB on average and a realloc of a third:
	// about 160 MB, 10000 samples at 16 KiB; far fewer than the calls.
	calls := uint64(2 * 20000 * 4 / 3)
	if allocs+reallocs == 0 || allocs+reallocs > calls/4 {
		t.Errorf("%d allocations and %d reallocations recorded of %d calls: not sampled", allocs, reallocs, calls)
	}
	if len(live) != 0 {
		t.Errorf("%d blocks recorded and never freed; the program frees every block", len(live))
	}
	t.Logf("recorded %d allocations (%d bytes), %d reallocations, %d frees", allocs, bytes, reallocs, frees)
}
