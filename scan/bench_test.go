package scan

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// cpuTime is this process's CPU time so far, user and system.
func cpuTime() time.Duration {
	var ru unix.Rusage
	unix.Getrusage(unix.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// synthetic is a heap laid out in one byte slice from base: blocks of 16 to
// 1024 bytes, 16 bytes apart as malloc's headers put them, whose words are
// pointers to other blocks (ptrFrac of them, a fifth of those interior) or
// other values; and a root range holding pointers to some blocks.
type synthetic struct {
	base   uint64
	heap   []byte
	blocks []Block
	roots  Roots
	rootB  []byte
}

func newSynthetic(size int, ptrFrac float64, seed uint64) *synthetic {
	rng := rand.New(rand.NewPCG(seed, 1))
	s := &synthetic{base: 0x5555_0000_0000, heap: make([]byte, size)}
	for at := uint64(16); ; {
		n := uint64(16 + 8*rng.IntN(127))
		if at+n > uint64(size) {
			break
		}
		s.blocks = append(s.blocks, Block{Addr: s.base + at, Size: n, ID: uint64(len(s.blocks))})
		at = (at + n + 16 + 15) &^ 15
	}
	ptr := func() uint64 {
		b := s.blocks[rng.IntN(len(s.blocks))]
		if rng.IntN(5) == 0 {
			return b.Addr + 8*uint64(rng.IntN(int(b.Size/8)))
		}
		return b.Addr
	}
	for _, b := range s.blocks {
		off := b.Addr - s.base
		for k := uint64(0); k+8 <= b.Size; k += 8 {
			var v uint64
			switch r := rng.Float64(); {
			case r < ptrFrac:
				v = ptr()
			case r < ptrFrac+0.4:
				v = uint64(rng.IntN(1000)) // small integers
			default:
				v = rng.Uint64() // text, hashes, doubles
			}
			binary.LittleEndian.PutUint64(s.heap[off+k:], v)
		}
	}
	s.rootB = make([]byte, 1<<20)
	for k := 0; k < len(s.rootB); k += 8 {
		if rng.IntN(10) == 0 {
			binary.LittleEndian.PutUint64(s.rootB[k:], ptr())
		}
	}
	s.roots.Ranges = []Range{{Addr: 0x4000_0000, Size: uint64(len(s.rootB)), Name: "globals"}}
	return s
}

func (s *synthetic) ReadAt(p []byte, off int64) (int, error) {
	at := uint64(off)
	switch {
	case at >= s.base && at-s.base < uint64(len(s.heap)):
		return bytes.NewReader(s.heap).ReadAt(p, int64(at-s.base))
	case at >= 0x4000_0000 && at-0x4000_0000 < uint64(len(s.rootB)):
		return bytes.NewReader(s.rootB).ReadAt(p, int64(at-0x4000_0000))
	}
	return 0, errHole
}

// BenchmarkScan scans synthetic heaps; it reports the throughput over the
// heap and roots (the goal is at least 1 GiB/s).
func BenchmarkScan(b *testing.B) {
	for _, size := range []int{64 << 20, 256 << 20} {
		for _, frac := range []float64{0.05, 0.25} {
			s := newSynthetic(size, frac, 1)
			for _, rules := range []Rules{Memcheck, LeakSanitizer} {
				b.Run(fmt.Sprintf("%dMiB/ptr%.0f%%/%v", size>>20, frac*100, rules), func(b *testing.B) {
					b.SetBytes(int64(size + len(s.rootB)))
					cpu0 := cpuTime()
					for b.Loop() {
						if _, err := Scan(s.blocks, s, s.roots, Options{Rules: rules}); err != nil {
							b.Fatal(err)
						}
					}
					// The machine may be shared: CPU time is steadier than wall time.
					cpu := (cpuTime() - cpu0).Seconds() / float64(b.N)
					b.ReportMetric(cpu, "cpu-s/op")
					b.ReportMetric(float64(size+len(s.rootB))/(1<<30)/cpu, "GiB/cpu-s")
				})
			}
		}
	}
}
