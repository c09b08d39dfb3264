package report

import (
	"testing"

	"github.com/heapscope/heapscope/analyze"
	"github.com/heapscope/heapscope/event"
)

// TestSampledText: a sampled stream says how many allocations it recorded;
// a sampled aggregate trace, which holds sums, how many calls the kernel's
// tables took in, not "0 allocations recorded".
func TestSampledText(t *testing.T) {
	stream := &analyze.Profile{SampleRate: 4096, Summary: analyze.Summary{Sampled: 3}}
	if got, want := sampledText(stream), "3 allocations recorded"; got != want {
		t.Errorf("stream: %q, want %q", got, want)
	}
	agg := &analyze.Profile{SampleRate: 4096, Aggregate: true, HasStats: true, Stats: event.Stats{Delivered: 12797}}
	if got, want := sampledText(agg), "12,797 calls of sampled blocks accounted in the kernel's tables"; got != want {
		t.Errorf("aggregate: %q, want %q", got, want)
	}
}
