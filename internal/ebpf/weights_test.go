package ebpf

import (
	"math"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/heapscope/heapscope/internal/testutil"
)

// weightsArgs mirrors struct weights_args of bpf/heapscope.bpf.c.
type weightsArgs struct{ Size, Rate, Bytes, Objs uint64 }

// TestSampleWeightsBPF runs the BPF program's fixed-point weights of a
// sampled block (smp_weights_fx, what aggregate mode adds to a stack's
// totals) for sizes from 1 byte to 2^46 at rates from 1 byte to 2^40, and
// checks them against S/p and 1/p computed in float64 with math.Expm1:
// within 2e-5 (the bound its comment states), and the block's own size and
// one object once p rounds to 1.
func TestSampleWeightsBPF(t *testing.T) {
	testutil.SkipWithoutEBPF(t, Available())
	spec, err := loadHeapscope()
	if err != nil {
		t.Fatal(err)
	}
	prog, err := ebpf.NewProgram(spec.Programs["smp_weights_test"])
	if err != nil {
		t.Fatal(err)
	}
	defer prog.Close()
	weights := func(size, rate uint64) (float64, float64) {
		a := weightsArgs{Size: size, Rate: rate}
		var out weightsArgs
		if _, err := prog.Run(&ebpf.RunOptions{Context: a, ContextOut: &out}); err != nil {
			t.Fatal(err)
		}
		return float64(out.Bytes) / (1 << 16), float64(out.Objs) / (1 << 16)
	}
	const bound = 2e-5
	var worstB, worstO float64
	n := 0
	for _, rate := range []uint64{1, 3, 4096, 64 << 10, 512 << 10, 1 << 20, 1 << 30, maxSample} {
		for e := uint64(0); e <= 46; e++ {
			for _, size := range []uint64{1 << e, 1<<e + 1<<e/3, 1<<e*7/5 + 1, max(1<<e-1, uint64(1))} {
				b, o := weights(size, rate)
				p := -math.Expm1(-float64(size) / float64(rate))
				wantB, wantO := float64(size)/p, 1/p
				eb, eo := math.Abs(b/wantB-1), math.Abs(o/wantO-1)
				worstB, worstO = max(worstB, eb), max(worstO, eo)
				n++
				if eb > bound || eo > bound {
					t.Errorf("size %d at rate %d: weights %.6f bytes, %.6f objects; want %.6f, %.6f", size, rate, b, o, wantB, wantO)
				}
			}
		}
	}
	t.Logf("%d sizes and rates: largest relative error %.2g in bytes, %.2g in objects", n, worstB, worstO)
	// A size of 0 is never sampled; it stands for itself.
	if b, o := weights(0, 4096); b != 0 || o != 1 {
		t.Errorf("size 0: %v bytes, %v objects; want 0, 1", b, o)
	}
}
