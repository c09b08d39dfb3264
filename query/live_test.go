package query

import (
	"math/rand"
	"testing"
)

// The live table holds what a Go map would, through inserts, replacements,
// deletions (of present and absent keys), growth and runs of colliding
// keys (addresses that differ only in bits above the hash's).
func TestLiveTable(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	var lt liveTable
	want := map[uint64]liveRef{}
	key := func() uint64 {
		if rng.Intn(4) == 0 {
			return uint64(1+rng.Intn(63)) << 58 // few distinct homes
		}
		return 16 * uint64(1+rng.Intn(50000))
	}
	for i := 0; i < 400000; i++ {
		k := key()
		switch rng.Intn(3) {
		case 0, 1:
			if i > 200000 && rng.Intn(2) == 0 {
				lt.del(k)
				delete(want, k)
				break
			}
			v := liveRef{row: uint32(i), tid: uint32(k), size: uint64(i) * 3}
			lt.put(k, v)
			want[k] = v
		case 2:
			lt.del(k)
			delete(want, k)
		}
		if i%50000 == 0 || i == 399999 {
			if lt.n != len(want) {
				t.Fatalf("step %d: %d entries, want %d", i, lt.n, len(want))
			}
			for k, v := range want {
				if got, ok := lt.get(k); !ok || got != v {
					t.Fatalf("step %d: key %#x: %+v %v, want %+v", i, k, got, ok, v)
				}
			}
		}
	}
	if _, ok := lt.get(12345); ok {
		t.Error("an absent key was found")
	}
	lt.put(0, liveRef{row: 1})
	if _, ok := lt.get(0); ok || lt.n != len(want) {
		t.Error("address 0 was stored")
	}
}
