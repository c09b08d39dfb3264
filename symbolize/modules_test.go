package symbolize

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/heapscope/heapscope/event"
)

// TestAddModuleAnyOrder checks the mapping table against the rule it keeps:
// a module replaces every earlier one it overlaps, whatever the order the
// modules come in, and an address is found in the module that holds it.
func TestAddModuleAnyOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for round := 0; round < 200; round++ {
		s := New(Options{})
		var naive []event.Module
		for i := 0; i < 60; i++ {
			start := uint64(rng.IntN(64)) * 0x1000
			m := event.Module{PID: 1, Start: start, End: start + uint64(1+rng.IntN(8))*0x1000, Path: fmt.Sprintf("/nonexistent/m%d", i)}
			s.AddModule(m)
			kept := naive[:0:0]
			for _, o := range naive {
				if o.End <= m.Start || o.Start >= m.End {
					kept = append(kept, o)
				}
			}
			naive = append(kept, m)
		}
		p := s.procs[1]
		if len(p.mods) != len(naive) {
			t.Fatalf("round %d: %d mappings, want %d", round, len(p.mods), len(naive))
		}
		for i := 1; i < len(p.mods); i++ {
			if p.mods[i-1].End > p.mods[i].Start {
				t.Fatalf("round %d: mappings %d and %d overlap or are out of order", round, i-1, i)
			}
		}
		for _, want := range naive {
			fr := s.Frames(1, want.Start+1)
			if len(fr) != 1 || fr[0].Module != want.Path {
				t.Fatalf("round %d: address %#x in %q, want %q", round, want.Start+1, fr[0].Module, want.Path)
			}
		}
	}
}
