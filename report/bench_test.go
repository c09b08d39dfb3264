package report

import (
	"io"
	"os"
	"testing"
)

// BenchmarkLoad reads the trace named by $HEAPSCOPE_BENCH_TRACE into a
// report and renders it as text, as `heapscope report` does: decoding, the
// model, symbolization and rendering together. bench/reportbench -keep DIR
// leaves traces of real programs to give it; run it with -cpuprofile and
// -memprofile to see where a report's time and memory go.
func BenchmarkLoad(b *testing.B) {
	path := os.Getenv("HEAPSCOPE_BENCH_TRACE")
	if path == "" {
		b.Skip("HEAPSCOPE_BENCH_TRACE names no trace")
	}
	b.ReportAllocs()
	var events uint64
	for b.Loop() {
		rep, err := Load(path, LoadOptions{})
		if err != nil {
			b.Fatal(err)
		}
		if err := rep.WriteText(io.Discard, TextOptions{}); err != nil {
			b.Fatal(err)
		}
		events = rep.Profile.Summary.Events
	}
	b.ReportMetric(float64(events)*float64(b.N)/b.Elapsed().Seconds(), "events/s")
}
