//go:build linux && amd64

package preload

import (
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/heapscope/heapscope/event"
)

// testRing makes a ring the way the interposer does: a sealed memfd.
func testRing(tb testing.TB, size uint32) *ring {
	fd, err := unix.MemfdCreate("test-ring", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		tb.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.Ftruncate(fd, int64(ringData)+int64(size)); err != nil {
		tb.Fatal(err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW); err != nil {
		tb.Fatal(err)
	}
	m, err := unix.Mmap(fd, 0, ringData, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		tb.Fatal(err)
	}
	binary.LittleEndian.PutUint32(m[ringMagic:], magic)
	binary.LittleEndian.PutUint32(m[ringSize:], size)
	unix.Munmap(m)
	r, err := mapRing(fd, size)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(r.unmap)
	return r
}

// produce appends a record to r as the interposer would, with a PAD record
// when it would wrap (the caller keeps within one lap of the tail).
func produce(r *ring, words ...uint64) {
	h := atomic.LoadUint64(r.head)
	if off := h & r.mask; off+uint64(len(words))*8 > r.size {
		binary.LittleEndian.PutUint64(r.data[off:], recPad|(r.size-off)/8<<8)
		h += r.size - off
	}
	for i, w := range words {
		binary.LittleEndian.PutUint64(r.data[(h+uint64(i)*8)&r.mask:], w)
	}
	atomic.StoreUint64(r.head, h+uint64(len(words))*8)
}

// BenchmarkDrain delivers one ring's malloc+free pairs.
func BenchmarkDrain(b *testing.B) { benchDrain(b, 1, 1) }

// BenchmarkDrain2 merges two rings whose records alternate in time, as two
// busy threads' do: each thread writes run malloc+free pairs, then the
// other does.
func BenchmarkDrain2(b *testing.B) {
	for _, run := range []int{1, 4, 16} {
		b.Run(fmt.Sprintf("run=%d", run), func(b *testing.B) { benchDrain(b, 2, run) })
	}
}

// benchDrain times drain over laps that fill nrings rings (threads 7, 8, …)
// with malloc+free pairs, run pairs in each ring in turn.
func benchDrain(b *testing.B, nrings, run int) {
	const size = 1 << 22
	c := &Collector{sink: &counter{Sink: event.Discard}, batch: make([]event.Event, 0, batchSize), clk: newClock(tscUsable())}
	p := &proc{pid: 1, final: true}
	for i := 0; i < nrings; i++ {
		r := testRing(b, size)
		produce(r, recThread|2<<8|uint64(7+i)<<32, 1)
		p.rings = append(p.rings, r)
	}
	ts := uint64(1000)
	n := 0
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		// one lap: malloc+free pairs, then drain
		if n == 0 {
			b.StopTimer()
			for j := 0; j < size/8/7-8*run; j += 7 * run {
				for _, r := range p.rings {
					for k := 0; k < run; k++ {
						ts++
						produce(r, uint64(event.FuncMalloc)|4<<8|5<<32, ts, 0x1000, 24)
						ts++
						produce(r, uint64(event.FuncFree)|3<<8, ts, 0x1000)
						n += 2
					}
				}
			}
			b.StartTimer()
		}
		c.drain(p, false)
		i += n - 1
		n = 0
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/event")
	if got := c.sink.(*counter).n; got < uint64(b.N) {
		b.Fatalf("sink saw %d events of %d", got, b.N)
	}
	for _, r := range p.rings {
		if r.broken {
			b.Fatal("a well-formed ring was marked broken")
		}
	}
}
