package tracefile

import (
	"sync"
	"testing"
	"time"

	"github.com/heapscope/heapscope/event"
)

// TestConcurrentWriters writes from several goroutines at once, with the
// flush timer firing all along and explicit flushes and stats between:
// every event arrives, each goroutine's in its order.
func TestConcurrentWriters(t *testing.T) {
	for _, mode := range []Mode{Sequential, Circular, NewFile} {
		t.Run(mode.String(), func(t *testing.T) {
			dir := t.TempDir()
			path := dir + "/c.hst"
			if mode == NewFile {
				path = dir + "/c-%d.hst"
			}
			h := testHeader(mode, 0)
			if mode != Sequential {
				h.MaxSize = 256 << 10 // wraps, and rolls over, several times
			}
			w, err := Create(path, h, Options{ChunkSize: 32 << 10, FlushInterval: time.Millisecond, TimeResolution: 1})
			check(t, err)
			const writers, batches = 4, 150
			var wg sync.WaitGroup
			for k := 0; k < writers; k++ {
				wg.Add(1)
				go func(pid uint32) {
					defer wg.Done()
					g := newSynth(uint64(pid), pid, 2, 50)
					check(t, g.defs(w))
					for b := 0; b < batches; b++ {
						evs := make([]event.Event, 200)
						g.fill(evs)
						if err := w.Events(evs); err != nil {
							t.Error(err)
							return
						}
						switch b % 20 {
						case 7:
							check(t, w.Flush())
						case 13:
							check(t, w.Stats(event.Stats{Delivered: uint64(b)}))
						}
					}
				}(uint32(100 * (k + 1)))
			}
			wg.Wait()
			check(t, w.Close())

			perPID := map[uint32][]event.Event{}
			for _, f := range w.Files() {
				rec, _ := readAll(t, f, Window{})
				for _, e := range rec.events {
					perPID[e.PID] = append(perPID[e.PID], e)
				}
			}
			kept := 0
			for k := 0; k < writers; k++ {
				pid := uint32(100 * (k + 1))
				g := newSynth(uint64(pid), pid, 2, 50)
				want := make([]event.Event, 200*batches)
				g.fill(want)
				got := perPID[pid]
				kept += len(got)
				if mode == Circular {
					// A writer that finished early may have been
					// overwritten entirely; what is kept is the newest.
					want = want[len(want)-len(got):]
				}
				sameEvents(t, got, want)
			}
			if mode == Circular && (kept == 0 || kept == writers*200*batches) {
				t.Fatalf("%d events of %d kept: the ring did not wrap", kept, writers*200*batches)
			}
		})
	}
}
