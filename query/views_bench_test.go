package query

import (
	"syscall"
	"testing"
	"time"
)

// cpuTime is the process's CPU time (user and system): on a machine shared
// with other work it varies less than the wall time ns/op gives.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// cpuPerOp reports the CPU time per op since c0.
func cpuPerOp(b *testing.B, c0 time.Duration) {
	b.ReportMetric(float64(cpuTime()-c0)/float64(b.N)/1e6, "cpu-ms/op")
}

// BenchmarkFilteredTimeline is the timeline of the whole trace with a
// filter that leaves out one function (the heap of the sites kept,
// rebuilt from their rows), as the page asks with a filter set.
func BenchmarkFilteredTimeline(b *testing.B) {
	x := benchIndex(b)
	f := Filter{Match: Match{Exclude: []Term{{FieldFunction, "no_such_function"}}}.String()}
	sp := x.Span(f)
	b.ResetTimer()
	c0 := cpuTime()
	for i := 0; i < b.N; i++ {
		x.TimelineOf(f, sp, 1400)
	}
	cpuPerOp(b, c0)
}

// BenchmarkConsumed is the consumed chart of the whole trace.
func BenchmarkConsumed(b *testing.B) {
	x := benchIndex(b)
	res := x.Window(Filter{})
	b.ResetTimer()
	c0 := cpuTime()
	for i := 0; i < b.N; i++ {
		x.Consumed(res, 10, 1400)
	}
	cpuPerOp(b, c0)
}

// BenchmarkTree is the bottom-up tree of the whole trace.
func BenchmarkTree(b *testing.B) {
	x := benchIndex(b)
	res := x.Window(Filter{})
	x.Tree(res, CostPeak, true, 0.001, 5000) // the trie, made once
	b.ResetTimer()
	c0 := cpuTime()
	for i := 0; i < b.N; i++ {
		x.Tree(res, CostPeak, true, 0.001, 5000)
	}
	cpuPerOp(b, c0)
}
