package tracefile

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/heapscope/heapscope/event"
)

// A generator makes a stream of events after its definitions.
type generator interface {
	defs(event.Sink) error
	fill([]event.Event)
}

// makeBatches makes n events of g's stream in batches of 1024, as a
// collector would pass them.
func makeBatches(g generator, n int) [][]event.Event {
	var bs [][]event.Event
	for n > 0 {
		b := make([]event.Event, min(n, 1024))
		g.fill(b)
		bs = append(bs, b)
		n -= len(b)
	}
	return bs
}

// streamCases are the event streams BenchmarkWrite and BenchmarkReplay
// run on, each at 1 ns and at the default time resolution (res 0).
var streamCases = []struct {
	name string
	res  int64
}{{"synthetic/exact", 1}, {"synthetic/default", 0}, {"churn/exact", 1}, {"churn/default", 0}, {"python/exact", 1}, {"python/default", 0}}

// benchStream is the generator of a synthetic or churn case: the synthetic
// stream is the noisier one, churn the churn workload's with two threads.
func benchStream(name string) generator {
	if strings.HasPrefix(name, "churn") {
		return newChurnSynth(1)
	}
	return newSynth(7, 100, 4, 3000)
}

// BenchmarkWrite measures the Writer as its caller sees it, one b.N = one
// event: encoding, and waiting for the compressor when it falls behind
// (compression and writing run in the Writer's own goroutine, which
// events/cpu-s, the CPU time of the caller's thread, does not count;
// cpu-ns/event is the whole process's, the compressor's included). The
// synthetic stream is the harsher one; churn is the churn workload's
// (bench/) with two threads; python is the first million events of a
// python3 run recorded by heaptrack, when it is installed.
func BenchmarkWrite(b *testing.B) {
	for _, c := range streamCases {
		b.Run(c.name, func(b *testing.B) {
			// The collector hands over batches it has just filled: keep
			// the input small enough to stay in cache.
			var defs func(event.Sink) error
			var batches [][]event.Event
			if strings.HasPrefix(c.name, "python") {
				col := &collector{max: 1 << 20}
				heaptrackEvents(b, pythonRaw(b), col, newGapSampler(1))
				defs = col.defs
				for evs := col.events; len(evs) > 0; evs = evs[min(len(evs), 1024):] {
					batches = append(batches, evs[:min(len(evs), 1024)])
				}
			} else {
				g := benchStream(c.name)
				batches = makeBatches(g, 1<<18)
				defs = g.defs
			}
			path := filepath.Join(b.TempDir(), "w.hst")
			w, err := Create(path, testHeader(Sequential, 0), Options{TimeResolution: timeRes(c.res), FlushInterval: -1})
			check(b, err)
			check(b, defs(w))
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			b.ReportAllocs()
			b.ResetTimer()
			cpu, all := threadCPU(), processCPU()
			// Times must go forward from lap to lap through the input.
			var shift int64
			span := batches[len(batches)-1][len(batches[len(batches)-1])-1].Time - batches[0][0].Time + 1
			buf := make([]event.Event, 1024)
			for i, k := 0, 0; i < b.N; k++ {
				if k == len(batches) {
					k, shift = 0, shift+span
				}
				bt := buf[:min(len(batches[k]), b.N-i)]
				copy(bt, batches[k])
				if shift != 0 {
					for j := range bt {
						bt[j].Time += shift
					}
				}
				check(b, w.Events(bt))
				i += len(bt)
			}
			check(b, w.Close())
			cpu, all = threadCPU()-cpu, processCPU()-all
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
			b.ReportMetric(float64(b.N)/cpu.Seconds(), "events/cpu-s")
			b.ReportMetric(float64(all.Nanoseconds())/float64(b.N), "cpu-ns/event")
			b.ReportMetric(float64(fileSize(b, path))/float64(b.N), "bytes/event")
			os.Remove(path)
		})
	}
}

// BenchmarkEncode measures the timeline encoder alone, one b.N = one
// event: the CPU time of addEvents (the Writer's caller pays it) and of
// finish (the compressor, in the Writer's own goroutine), on 1024-event
// batches as a collector passes them, and the compressed size.
func BenchmarkEncode(b *testing.B) {
	type gen interface{ fill([]event.Event) }
	for _, c := range []struct {
		name string
		res  int64
		g    func() gen
	}{
		{"churn/exact", 1, func() gen { return benchStream("churn") }},
		{"churn/default", int64(DefaultTimeResolution), func() gen { return benchStream("churn") }},
		{"synthetic/exact", 1, func() gen { return benchStream("synthetic") }},
		{"synthetic/default", int64(DefaultTimeResolution), func() gen { return benchStream("synthetic") }},
	} {
		b.Run(c.name, func(b *testing.B) {
			// A chunk's worth of events, encoded again and again.
			evs := make([]event.Event, 1<<18)
			c.g().fill(evs)
			enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithAllLitEntropyCompression(true),
				zstd.WithEncoderConcurrency(1), zstd.WithEncoderCRC(false))
			check(b, err)
			defer enc.Close()
			e := newTimelineEncoder(c.res)
			var out, scratch []byte
			var encode, compress time.Duration
			var size, n int
			// Each batch is copied into one buffer first, as the collector
			// fills its batch: the encoder reads events that are in cache.
			buf := make([]event.Event, 1024)
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			b.ResetTimer()
			for done := 0; done < b.N; {
				e.reset()
				for i := 0; i < len(evs) && done < b.N; i += 1024 {
					bt := buf[:copy(buf[:min(1024, b.N-done)], evs[i:])]
					t0 := threadCPU()
					e.addEvents(bt)
					encode += threadCPU() - t0
					done += len(bt)
				}
				t1 := threadCPU()
				out, _ = e.finish(newStreamCoder(enc), out[:0], &scratch)
				compress += threadCPU() - t1
				size, n = size+len(out), n+e.events
			}
			b.ReportMetric(float64(encode.Nanoseconds())/float64(n), "encode-ns/event")
			b.ReportMetric(float64(compress.Nanoseconds())/float64(n), "compress-ns/event")
			b.ReportMetric(float64(size)/float64(n), "bytes/event")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// collector keeps the first max events and every definition before them.
type collector struct {
	event.Sink
	max    int
	procs  []event.Process
	stacks []event.Stack
	events []event.Event
}

func (c *collector) Process(p event.Process) error { c.procs = append(c.procs, p); return nil }
func (c *collector) Stack(s event.Stack) error {
	if len(c.events) < c.max {
		s.Frames = append([]uint64(nil), s.Frames...) // the reader reuses them
		c.stacks = append(c.stacks, s)
	}
	return nil
}
func (c *collector) Events(evs []event.Event) error {
	c.events = append(c.events, evs[:min(len(evs), c.max-len(c.events))]...)
	return nil
}

func (c *collector) defs(s event.Sink) error {
	for _, p := range c.procs {
		if err := s.Process(p); err != nil {
			return err
		}
	}
	for _, st := range c.stacks {
		if err := s.Stack(st); err != nil {
			return err
		}
	}
	return nil
}

// BenchmarkReplay measures the Reader: reading, decompression and
// decoding into a sink that does nothing, one b.N = one event. The
// synthetic stream is the noisier one; churn is the churn workload's with
// two threads; python is the events of a python3
// run recorded by heaptrack (see TestCompactVsHeaptrack), when heaptrack
// is installed.
func BenchmarkReplay(b *testing.B) {
	for _, c := range streamCases {
		b.Run(c.name, func(b *testing.B) {
			path := filepath.Join(b.TempDir(), "r.hst")
			w, err := Create(path, testHeader(Sequential, 0), Options{TimeResolution: timeRes(c.res), FlushInterval: -1})
			check(b, err)
			var n int
			if strings.HasPrefix(c.name, "python") {
				n = heaptrackEvents(b, pythonRaw(b), w, newGapSampler(1))
			} else {
				n = 4 << 20
				g := benchStream(c.name)
				batches := makeBatches(g, n)
				check(b, g.defs(w))
				for _, bt := range batches {
					check(b, w.Events(bt))
				}
			}
			check(b, w.Close())
			r, err := Open(path)
			check(b, err)
			defer r.Close()
			c := &counter{Sink: event.Discard}
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			b.ReportAllocs()
			b.ResetTimer()
			cpu := threadCPU()
			for done := 0; done < b.N; done += n {
				check(b, r.Replay(c, Window{}))
			}
			cpu = threadCPU() - cpu
			b.StopTimer()
			events := (b.N + n - 1) / n * n
			b.ReportMetric(float64(events)/b.Elapsed().Seconds(), "events/s")
			b.ReportMetric(float64(events)/cpu.Seconds(), "events/cpu-s")
		})
	}
}

var python struct {
	once sync.Once
	dir  string
	raw  string
}

// pythonRaw returns heaptrack's raw data of a python3 run, made once per
// test binary.
func pythonRaw(b *testing.B) string {
	python.once.Do(func() {
		dir, err := os.MkdirTemp("", "tracefile-python-")
		check(b, err)
		python.dir = dir
		python.raw, _ = heaptrackRun(b, dir)
	})
	if python.raw == "" {
		b.Skip("no heaptrack data")
	}
	return python.raw
}
