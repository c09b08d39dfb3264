package analyze

import (
	"math"
	"testing"

	"github.com/heapscope/heapscope/event"
)

// TestSampledSnapshots: in a sampled aggregate trace the totals come
// weighed by the provider and are taken as they are, while each live block
// (a sampled one, of its true size) counts what it stands for, as a block
// of a sampled stream does: in the stack's live and peak bytes and blocks,
// the leaks and the timeline.
func TestSampledSnapshots(t *testing.T) {
	const r = 1 << 16
	live := []event.LiveBlock{
		{Addr: 0x1000, Size: 64 * r, Stack: 1, Time: 10 * ms}, // weight 1: itself
		{Addr: 0x2000, Size: 16, Stack: 2, Time: 20 * ms},     // ~4096.5 blocks of 16 bytes
	}
	m := New(Options{SampleRate: r})
	must(t, m.Snapshot(event.Snapshot{PID: 5, Time: 100 * ms, Final: true, Live: live, Totals: []event.StackTotal{
		{Stack: 1, Allocs: 3, AllocBytes: 3 * 64 * r, Frees: 2, FreeBytes: 2 * 64 * r},
		{Stack: 2, Allocs: 9000, AllocBytes: 9000 * 16, Frees: 4904, FreeBytes: 4904 * 16},
	}}))
	p := m.Profile()
	if !p.Estimated() || !p.Aggregate {
		t.Fatalf("estimated %v, aggregate %v", p.Estimated(), p.Aggregate)
	}
	a, b := stackOf(t, p, 5, 1), stackOf(t, p, 5, 2)
	if a.LiveBytes != 64*r || a.LiveBlocks != 1 || a.Allocations != 3 || a.Frees != 2 || a.PeakBytes != 64*r {
		t.Errorf("a large block is itself: %+v", a)
	}
	wb, wo := SampleWeights(16, r)
	if b.LiveBytes != uint64(math.Round(wb)) || math.Abs(float64(b.LiveBlocks)-wo) > 1 || b.PeakBytes != b.LiveBytes ||
		b.Allocations != 9000 || b.Bytes != 9000*16 {
		t.Errorf("a small block stands for %.1f bytes in %.1f blocks: %+v", wb, wo, b)
	}
	if want := 64*r + uint64(math.Round(wb)); p.Summary.LiveBytes != want || p.Peak.Bytes != want {
		t.Errorf("leaked %d, peak %d; want %d", p.Summary.LiveBytes, p.Peak.Bytes, want)
	}
}
