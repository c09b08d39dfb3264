package blocks

import (
	"fmt"
	"math/rand"
	"testing"
)

type val struct {
	size uint64
	site int32
	tid  uint32
}

// TestTable checks the table against a Go map through growth, replacements
// and many deletions of present and absent keys (the counts of keys that
// probed past each bucket are the delicate part). The keys cluster (few
// distinct addresses: long probe runs and wrap-around), some differ only in
// bits above the hash's (few distinct homes), and 0 is one of them.
func TestTable(t *testing.T) {
	rng := rand.New(rand.NewSource(3))
	var tb Table[val]
	ref := map[uint64]val{}
	key := func() uint64 {
		switch rng.Intn(8) {
		case 0:
			return uint64(rng.Intn(63)) << 58
		case 1:
			return uint64(rng.Intn(6000))*16 | 1<<52
		}
		return uint64(rng.Intn(6000)) * 16
	}
	for i := 0; i < 600000; i++ {
		k := key()
		switch rng.Intn(5) {
		case 0, 1:
			v := val{size: uint64(i), site: int32(i % 7), tid: uint32(i)}
			old, ok := tb.Put(k, v)
			rold, rok := ref[k]
			if ok != rok || old != rold {
				t.Fatalf("put %#x: got %v %v, want %v %v", k, old, ok, rold, rok)
			}
			ref[k] = v
		case 2, 3:
			v, ok := tb.Delete(k)
			rv, rok := ref[k]
			if ok != rok || v != rv {
				t.Fatalf("delete %#x: got %v %v, want %v %v", k, v, ok, rv, rok)
			}
			delete(ref, k)
		case 4:
			v, ok := tb.Get(k)
			rv, rok := ref[k]
			if ok != rok || v != rv {
				t.Fatalf("get %#x: got %v %v, want %v %v", k, v, ok, rv, rok)
			}
		}
		if tb.Len() != len(ref) {
			t.Fatalf("step %d: len %d, want %d", i, tb.Len(), len(ref))
		}
	}
	n := 0
	for k, v := range tb.All() {
		n++
		if rv, ok := ref[k]; !ok || rv != v {
			t.Fatalf("All: %#x: %v, want %v %v", k, v, rv, ok)
		}
	}
	if n != len(ref) {
		t.Errorf("All gave %d keys, want %d", n, len(ref))
	}
	for k, want := range ref {
		if v, ok := tb.Delete(k); !ok || v != want {
			t.Fatalf("final delete %#x: %v %v", k, v, ok)
		}
	}
	if tb.Len() != 0 {
		t.Errorf("len %d after deleting everything", tb.Len())
	}
	for b, n := range tb.over {
		if n != 0 {
			t.Fatalf("bucket %d counts %d keys past it in an empty table", b, n)
		}
	}
}

// TestTableSliding keeps a live set of a few hundred keys, each new key
// never seen before, through a million insertions: the table must not
// grow, and every bucket must count exactly the keys that probed past it
// once the keys are gone.
func TestTableSliding(t *testing.T) {
	rng := rand.New(rand.NewSource(5))
	var tb Table[val]
	var live []uint64
	ref := map[uint64]val{}
	next := uint64(0x7f00_0000_0000)
	for i := 0; i < 1000000; i++ {
		if len(live) < 500 || rng.Intn(2) == 0 {
			next += 16
			v := val{size: uint64(i), site: int32(i % 11)}
			if _, ok := tb.Put(next, v); ok {
				t.Fatalf("put %#x: replaced a value", next)
			}
			ref[next] = v
			live = append(live, next)
			continue
		}
		j := rng.Intn(len(live))
		a := live[j]
		live[j] = live[len(live)-1]
		live = live[:len(live)-1]
		if v, ok := tb.Delete(a); !ok || v != ref[a] {
			t.Fatalf("delete %#x: %v %v, want %v", a, v, ok, ref[a])
		}
		delete(ref, a)
		if _, ok := tb.Delete(a); ok {
			t.Fatalf("delete %#x twice", a)
		}
	}
	if len(tb.keys) > 1024 {
		t.Errorf("%d buckets for %d live keys", len(tb.keys), len(live))
	}
	for _, a := range live {
		if v, ok := tb.Delete(a); !ok || v != ref[a] {
			t.Fatalf("final delete %#x: %v %v", a, v, ok)
		}
	}
	for b, n := range tb.over {
		if n != 0 {
			t.Fatalf("bucket %d counts %d keys past it in an empty table", b, n)
		}
	}
}

// TestTableEmpty: the zero table answers every call.
func TestTableEmpty(t *testing.T) {
	var tb Table[*int]
	if v, ok := tb.Get(0); ok || v != nil {
		t.Errorf("Get: %v %v", v, ok)
	}
	if v, ok := tb.Delete(16); ok || v != nil {
		t.Errorf("Delete: %v %v", v, ok)
	}
	for k := range tb.All() {
		t.Errorf("All gave %#x", k)
	}
	if tb.Len() != 0 {
		t.Errorf("Len %d", tb.Len())
	}
}

func ExampleTable() {
	type block struct{ size uint64 }
	var live Table[block]
	live.Put(0x5555_0000_1000, block{size: 64})
	live.Put(0x5555_0000_2000, block{size: 32})
	if b, ok := live.Delete(0x5555_0000_1000); ok {
		fmt.Println("freed", b.size, "bytes")
	}
	if _, ok := live.Delete(0x7000); !ok {
		fmt.Println("0x7000: not a live block")
	}
	fmt.Println(live.Len(), "live")
	// Output:
	// freed 64 bytes
	// 0x7000: not a live block
	// 1 live
}
