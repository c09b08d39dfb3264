package analyze

import (
	"math/rand"
	"testing"
)

// TestBlockTable checks the open-addressing table against a Go map through
// growth and many deletions (the counts of keys that probed past each
// bucket are the delicate part).
func TestBlockTable(t *testing.T) {
	rng := rand.New(rand.NewSource(3))
	bt := newBlockTable()
	procs := []*proc{{pid: 1, key: bt.procKey(1)}, {pid: 2, key: bt.procKey(2)}, {pid: 3, key: bt.procKey(maxProcs + 1)}}
	ref := map[wideKey]block{}
	for i := 0; i < 400000; i++ {
		p := procs[rng.Intn(len(procs))]
		// Few distinct addresses, clustered: long probe runs and wrap-around.
		addr := uint64(rng.Intn(6000)) * 16
		if rng.Intn(100) == 0 {
			addr |= 1 << 52
		}
		k := wideKey{p.pid, addr}
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

// TestBlockTableSliding keeps a live set of a few hundred keys, each new
// key never seen before, through a million insertions: the table must not
// grow, and every bucket must count exactly the keys that probed past it
// once the keys are gone.
func TestBlockTableSliding(t *testing.T) {
	rng := rand.New(rand.NewSource(5))
	bt := newBlockTable()
	p := &proc{pid: 1, key: bt.procKey(1)}
	var live []uint64
	ref := map[uint64]block{}
	next := uint64(0x7f00_0000_0000)
	for i := 0; i < 1000000; i++ {
		if len(live) < 500 || rng.Intn(2) == 0 {
			next += 16
			b := block{size: uint64(i), site: int32(i % 11)}
			if _, ok := bt.put(p, next, b); ok {
				t.Fatalf("put %#x: replaced a block", next)
			}
			ref[next] = b
			live = append(live, next)
			continue
		}
		j := rng.Intn(len(live))
		a := live[j]
		live[j] = live[len(live)-1]
		live = live[:len(live)-1]
		if b, ok := bt.take(p, a); !ok || b != ref[a] {
			t.Fatalf("take %#x: %v %v, want %v", a, b, ok, ref[a])
		}
		delete(ref, a)
		if _, ok := bt.take(p, a); ok {
			t.Fatalf("take %#x twice", a)
		}
	}
	if len(bt.keys) > 1024 {
		t.Errorf("%d buckets for %d live keys", len(bt.keys), len(live))
	}
	for _, a := range live {
		if b, ok := bt.take(p, a); !ok || b != ref[a] {
			t.Fatalf("final take %#x: %v %v", a, b, ok)
		}
	}
	for b, n := range bt.over {
		if n != 0 {
			t.Fatalf("bucket %d counts %d keys past it in an empty table", b, n)
		}
	}
}
