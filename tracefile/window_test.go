package tracefile

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/heapscope/heapscope/event"
)

func TestWindow(t *testing.T) {
	for _, index := range []bool{true, false} {
		t.Run(fmt.Sprintf("index=%v", index), func(t *testing.T) {
			path := tempPath(t, "w.hst")
			all := writeSynth(t, path, testHeader(Sequential, 0), Options{TimeResolution: 1}, 50_000, 2000)
			if !index {
				cutTrailer(t, path)
			}
			r, err := Open(path)
			check(t, err)
			defer r.Close()
			first, last := all[0].Time, all[len(all)-1].Time
			for _, w := range []Window{
				{}, {From: first}, {To: last + 1}, {From: first + (last-first)/3, To: first + (last-first)/2},
				{From: last - 1000}, {To: first + 1000}, {From: last + 1}, {To: first},
			} {
				r.timelines = 0
				rec := newRecorder()
				check(t, r.Replay(rec, w))
				rec.check(t)
				var want []event.Event
				for _, e := range all {
					if w.contains(e.Time) {
						want = append(want, e)
					}
				}
				sameEvents(t, rec.events, want)
				// Every definition, whatever the window.
				if len(rec.stacks) != 500 || len(rec.procs) != 1 || len(rec.modules) != 2 || len(rec.stats) != 1 {
					t.Errorf("window %+v: %d stacks, %d processes, %d modules, %d stats", w, len(rec.stacks), len(rec.procs), len(rec.modules), len(rec.stats))
				}
				// Only the chunks that meet the window were decompressed.
				overlap := 0
				r.walk(r.size, func(e indexEntry) error {
					if e.hdr.hasTimeline() && w.overlaps(e.hdr.minTime, e.hdr.maxTime) {
						overlap++
					}
					return nil
				}, nil)
				if r.timelines != overlap {
					t.Errorf("window %+v: %d timelines decompressed; %d chunks meet the window", w, r.timelines, overlap)
				}
				if w == (Window{From: first + (last-first)/3, To: first + (last-first)/2}) && overlap > 15 {
					t.Errorf("a sixth of the trace meets %d of its 25 chunks", overlap)
				}
			}
		})
	}
}

// cutTrailer removes the last byte of a file, and with it the trailer.
func cutTrailer(t *testing.T, path string) {
	t.Helper()
	size := fileSize(t, path)
	check(t, truncate(path, size-1))
}

// TestReaderMemory checks that the reader's memory does not grow with the
// trace: while it replays a trace eight times as long, the heap peaks at
// about the same size.
func TestReaderMemory(t *testing.T) {
	peak := func(n int) uint64 {
		path := tempPath(t, "m.hst")
		writeSynth(t, path, testHeader(Sequential, 0), Options{TimeResolution: 1}, n, 0)
		r, err := Open(path)
		check(t, err)
		defer r.Close()
		runtime.GC()
		s := &heapSampler{Sink: event.Discard}
		s.sample()
		base := s.peak
		check(t, r.Replay(s, Window{}))
		if s.events != n {
			t.Fatalf("%d events, want %d", s.events, n)
		}
		return s.peak - base
	}
	small, large := peak(250_000), peak(2_000_000)
	t.Logf("the heap grew by at most %d bytes replaying 250k events, %d for 2M", small, large)
	if large > small*5/4+1<<20 {
		t.Errorf("replaying 8 times the events took %d bytes of heap, against %d", large, small)
	}
}

// heapSampler counts events and samples the heap every few batches.
type heapSampler struct {
	event.Sink
	events, batches int
	peak            uint64
}

func (s *heapSampler) sample() {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	s.peak = max(s.peak, m.HeapAlloc)
}

func (s *heapSampler) Events(evs []event.Event) error {
	s.events += len(evs)
	if s.batches++; s.batches%50 == 0 {
		s.sample()
	}
	return nil
}
