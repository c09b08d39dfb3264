package query

import (
	"os"
	"testing"
)

// BenchmarkBuild indexes the trace named by $HEAPSCOPE_BENCH_TRACE (e.g. the
// python3 trace of bench/reportbench), and BenchmarkWindow answers a window
// of its middle third, as a click does.
func BenchmarkBuild(b *testing.B) {
	path := os.Getenv("HEAPSCOPE_BENCH_TRACE")
	if path == "" {
		b.Skip("set HEAPSCOPE_BENCH_TRACE to a trace file")
	}
	for i := 0; i < b.N; i++ {
		if _, err := Build(path, Options{}); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkWindow(b *testing.B) {
	x := benchIndex(b)
	d := x.End() - x.Start()
	f := Filter{From: x.Start() + d/3, To: x.Start() + 2*d/3}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		x.Flame(x.Window(f), CostBytes, false, 0.001, 5000)
	}
}

// BenchmarkClick is what the server computes for a click in the page: a
// new window's classes (the window), its flame graph and its timeline.
func BenchmarkClick(b *testing.B) {
	x := benchIndex(b)
	d := x.End() - x.Start()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		// Windows of a third of the trace, from its start to its end.
		from := x.Start() + int64(i%7)*d/10
		f := Filter{From: from, To: from + d/3}
		x.Flame(x.Window(f), CostBytes, false, 0.001, 5000)
		x.Timeline(x.Span(f), 1400)
	}
}

// benchIndex builds the index of the trace named by $HEAPSCOPE_BENCH_TRACE,
// or skips the benchmark without one.
func benchIndex(b *testing.B) *Index {
	b.Helper()
	path := os.Getenv("HEAPSCOPE_BENCH_TRACE")
	if path == "" {
		b.Skip("set HEAPSCOPE_BENCH_TRACE to a trace file")
	}
	x, err := Build(path, Options{})
	if err != nil {
		b.Fatal(err)
	}
	return x
}
