package report

import (
	"fmt"

	"github.com/heapscope/heapscope/analyze"
)

// sampledText says how much a sampled profile's estimates rest on: the
// allocations recorded, or of an aggregate trace (whose snapshots hold
// sums, not samples) the calls the kernel's tables took in.
func sampledText(p *analyze.Profile) string {
	if p.Aggregate && p.Summary.Sampled == 0 && p.HasStats {
		return fmt.Sprintf("%s of sampled blocks accounted in the kernel's tables",
			plural(p.Stats.Delivered, "call"))
	}
	return plural(p.Summary.Sampled, "allocation") + " recorded"
}
