package analyze

import (
	"math"
	"math/rand"
	"testing"

	"github.com/heapscope/heapscope/event"
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

// TestSampleVariance: SampleVariance finds the recorded block's size again
// from its bytes, and the variance the model sums is the spread of its
// estimates: sampling the same allocations many times, the standard
// deviation of the bytes allocated (and of the leaks) is the square root
// of the variance each run reports, within the noise of 400 runs.
func TestSampleVariance(t *testing.T) {
	const r = 1 << 14
	for _, size := range []uint64{1, 100, r, 10 * r} {
		b, _ := SampleWeights(size, r)
		p := float64(size) / b
		want := (1 - p) * b * b
		if got := SampleVariance(uint64(math.Round(b)), r); math.Abs(got-want) > 1e-3*want+b {
			t.Errorf("size %d: variance %v, want %v", size, got, want)
		}
	}
	if SampleVariance(100, 0) != 0 {
		t.Error("an exact trace has no variance")
	}
	rng := rand.New(rand.NewSource(1))
	sizes := make([]uint64, 3000)
	for i := range sizes {
		sizes[i] = uint64(1 + rng.Intn(4*r))
	}
	var sum, sum2, vars, lsum, lsum2, lvars float64
	const runs = 400
	for k := 0; k < runs; k++ {
		s := &seq{}
		for i, size := range sizes {
			if rng.Float64() < -math.Expm1(-float64(size)/r) {
				s.alloc(event.StackID(1+i%5), uint64(0x1000+16*i), size)
				if i%2 == 0 {
					s.free(uint64(0x1000 + 16*i))
				}
			}
		}
		p := run(t, Options{SampleRate: r}, s)
		x := float64(p.Summary.Bytes)
		sum, sum2, vars = sum+x, sum2+x*x, vars+p.Summary.BytesVar
		var lv float64
		for _, st := range p.Stacks {
			lv += st.LiveVar
		}
		l := float64(p.Summary.LiveBytes)
		lsum, lsum2, lvars = lsum+l, lsum2+l*l, lvars+lv
	}
	for _, c := range []struct {
		what            string
		sum, sum2, vars float64
	}{{"bytes allocated", sum, sum2, vars}, {"leaked", lsum, lsum2, lvars}} {
		mean := c.sum / runs
		sd := math.Sqrt(c.sum2/runs - mean*mean)
		est := math.Sqrt(c.vars / runs)
		t.Logf("%s: mean %.0f, standard deviation %.0f, reported %.0f", c.what, mean, sd, est)
		if math.Abs(sd-est) > 0.15*sd {
			t.Errorf("%s: the estimates' standard deviation %.0f, the variance reported gives %.0f", c.what, sd, est)
		}
	}
}
