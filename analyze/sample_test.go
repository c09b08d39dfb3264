package analyze

import (
	"math"
	"testing"
)

func TestSampleWeights(t *testing.T) {
	const r = 1 << 16
	for _, c := range []struct {
		size          uint64
		bytes, object float64
	}{
		{0, 0, 1},
		{1, r + 0.5, r + 0.5}, // 1/(1-e^(-1/R)) = R + 1/2 + O(1/R)
		{r, r / (1 - math.Exp(-1)), 1 / (1 - math.Exp(-1))}, // 1.582 R, 1.582
		{64 * r, 64 * r, 1}, // certain
	} {
		b, o := SampleWeights(c.size, r)
		if math.Abs(b-c.bytes) > 1e-6*c.bytes+1e-3 || math.Abs(o-c.object) > 1e-6*c.object+1e-3 {
			t.Errorf("SampleWeights(%d) = %v, %v; want %v, %v", c.size, b, o, c.bytes, c.object)
		}
	}
	if b, o := SampleWeights(100, 0); b != 100 || o != 1 {
		t.Errorf("exact trace: %v, %v", b, o)
	}
}

// TestSampledModel: in a sampled trace each block counts its weights, its
// free takes away what it added, realloc moves the weights, and the
// profile has no temporaries.
func TestSampledModel(t *testing.T) {
	const r = 1 << 16
	s := &seq{}
	s.alloc(1, 0x1000, 64*r) // weight 1: 4 MiB, 1 object
	s.alloc(2, 0x9000, r)    // 1.582 R, 1 or 2 objects
	s.alloc(3, 0xa000, 16)   // ~4096.5 objects of 16 bytes
	s.free(0x9000)
	s.realloc(3, 0xa000, 0xb000, 32) // the old weights go, the new block weighs by its size
	p := run(t, Options{SampleRate: r}, s)
	if p.SampleRate != r || !p.Estimated() || !p.Missing.Has(NoTemporaries|NoFailed) {
		t.Fatalf("rate %d, estimated %v, missing %v", p.SampleRate, p.Estimated(), p.Missing)
	}
	if p.Summary.Sampled != 4 {
		t.Errorf("Sampled %d, want 4 (3 allocations, 1 realloc)", p.Summary.Sampled)
	}
	a, b, c := stackOf(t, p, 1, 1), stackOf(t, p, 1, 2), stackOf(t, p, 1, 3)
	if a.Bytes != 64*r || a.Allocations != 1 || a.LiveBytes != 64*r || a.LiveBlocks != 1 {
		t.Errorf("a large block is itself: %+v", a)
	}
	wb, wo := SampleWeights(r, r)
	if b.Bytes != uint64(math.Round(wb)) || b.LiveBytes != 0 || b.LiveBlocks != 0 || b.FreedBytes != b.Bytes ||
		b.Frees != b.Allocations || float64(b.Allocations) != math.Floor(wo) && float64(b.Allocations) != math.Ceil(wo) {
		t.Errorf("a freed block of R bytes: %+v, weights %v %v", b, wb, wo)
	}
	w16, _ := SampleWeights(16, r)
	w32, o32 := SampleWeights(32, r)
	if c.Bytes != uint64(math.Round(w16))+uint64(math.Round(w32)) || c.LiveBytes != uint64(math.Round(w32)) ||
		math.Abs(float64(c.LiveBlocks)-o32) > 1 || math.Abs(float64(c.Reallocations)-o32) > 1 {
		t.Errorf("a reallocated small block: %+v", c)
	}
	if p.Summary.LiveBytes != 64*r+c.LiveBytes {
		t.Errorf("leaked %d, want %d", p.Summary.LiveBytes, 64*r+c.LiveBytes)
	}
	if p.Peak.Bytes < 64*r+b.Bytes {
		t.Errorf("peak %d: less than the two first blocks, %d", p.Peak.Bytes, 64*r+b.Bytes)
	}
}
