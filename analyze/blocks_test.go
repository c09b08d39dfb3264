package analyze

import (
	"math/rand"
	"testing"
)

// TestBlockTable checks the live set against a Go map through growth and
// many deletions, with keys that pack into one word and keys that do not
// (a process past maxProcs, addresses above 2^48). The table itself is
// tested in internal/blocks.
func TestBlockTable(t *testing.T) {
	rng := rand.New(rand.NewSource(3))
	var bt blockTable
	procs := []*proc{{pid: 1, key: bt.procKey(1)}, {pid: 2, key: bt.procKey(2)}, {pid: 3, key: bt.procKey(maxProcs + 1)}}
	ref := map[wideKey]block{}
	for i := 0; i < 400000; i++ {
		p := procs[rng.Intn(len(procs))]
		// Few distinct addresses, clustered: long probe runs and wrap-around.
		addr := uint64(rng.Intn(6000)) * 16
		if rng.Intn(100) == 0 {
			addr |= 1 << 52
		}
		k := wideKey{p.pid, p.gen, addr}
		if rng.Intn(2) == 0 {
			b := block{size: uint64(i), site: int32(i % 7), tid: uint32(i)}
			old, ok := bt.put(p, addr, b)
			rold, rok := ref[k]
			if ok != rok || old != rold {
				t.Fatalf("put %v: got %v %v, want %v %v", k, old, ok, rold, rok)
			}
			ref[k] = b
		} else {
			b, ok := bt.take(p, addr)
			rb, rok := ref[k]
			if ok != rok || b != rb {
				t.Fatalf("take %v: got %v %v, want %v %v", k, b, ok, rb, rok)
			}
			delete(ref, k)
		}
		if bt.len() != len(ref) {
			t.Fatalf("len %d, want %d", bt.len(), len(ref))
		}
	}
	for k, want := range ref {
		p := procs[k.pid-1]
		if b, ok := bt.take(p, k.addr); !ok || b != want {
			t.Fatalf("final take %v: %v %v", k, b, ok)
		}
	}
	if bt.len() != 0 {
		t.Errorf("len %d after taking everything", bt.len())
	}
}
