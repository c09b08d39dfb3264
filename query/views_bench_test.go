package query

import "testing"

// BenchmarkFilteredTimeline is the timeline of the whole trace with a
// filter that leaves out one function (the heap of the sites kept,
// rebuilt from their rows), as the page asks with a filter set.
func BenchmarkFilteredTimeline(b *testing.B) {
	x := benchIndex(b)
	f := Filter{Match: Match{Exclude: []Term{{FieldFunction, "no_such_function"}}}.String()}
	sp := x.Span(f)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		x.TimelineOf(f, sp, 1400)
	}
}

// BenchmarkConsumed is the consumed chart of the whole trace.
func BenchmarkConsumed(b *testing.B) {
	x := benchIndex(b)
	res := x.Window(Filter{})
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		x.Consumed(res, 10, 1400)
	}
}

// BenchmarkTree is the bottom-up tree of the whole trace.
func BenchmarkTree(b *testing.B) {
	x := benchIndex(b)
	res := x.Window(Filter{})
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		x.Tree(res, CostPeak, true, 0.001, 5000)
	}
}
