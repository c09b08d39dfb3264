// Package exporttest records the report_known workload for the tests of
// export and export/push: its whole trace as an interval, and the totals
// each sample type must hold for it.
package exporttest

import (
	"path/filepath"
	"testing"

	"github.com/heapscope/heapscope/export"
	"github.com/heapscope/heapscope/internal/testutil"
	"github.com/heapscope/heapscope/internal/tracetest"
	"github.com/heapscope/heapscope/report"
	"github.com/heapscope/heapscope/symbolize"
)

// Known are report_known's totals per call site (see its source), for 50
// rounds: what each sample type must hold for the function that called the
// allocator.
var Known = map[string]map[string]int64{
	"alloc_objects": {"leak_site": 3, "calloc_site": 1, "peak_site": 10, "temp_site": 50, "realloc_site": 1, "grow_site": 1, "aligned_site": 2},
	"alloc_space":   {"leak_site": 3000, "calloc_site": 1024, "peak_site": 100000, "temp_site": 3200, "realloc_site": 100, "grow_site": 5000, "aligned_site": 4352},
	"inuse_objects": {"leak_site": 3, "calloc_site": 1},
	"inuse_space":   {"leak_site": 3000, "calloc_site": 1024},
}

// Interval records report_known under the preload provider and returns its
// interval (the whole trace), the options that symbolize it and the
// program's path.
func Interval(tb testing.TB) (*export.Interval, export.Options, string) {
	tb.Helper()
	bin := testutil.MustBuild(tb, "report_known", testutil.Options{})
	path := filepath.Join(tb.TempDir(), "known.hst")
	tracetest.Record(tb, path, bin, "50")
	rep, err := report.Load(path, report.LoadOptions{})
	if err != nil {
		tb.Fatal(err)
	}
	iv := export.FromProfile(rep.Profile, export.Clock{MonoStart: rep.Trace.Start, WallStart: rep.Trace.WallStart},
		export.Host{Name: "testhost", Arch: "amd64"})
	return iv, export.Options{Resolver: rep.Resolver(), Trim: symbolize.TrimAllocator, Version: "test"}, bin
}

// Check compares per-function totals, by sample type, with Known.
func Check(tb testing.TB, got map[string]map[string]int64) {
	tb.Helper()
	for typ, fns := range Known {
		for fn, want := range fns {
			if got[typ][fn] != want {
				tb.Errorf("%s of %s: %d, want %d", typ, fn, got[typ][fn], want)
			}
		}
	}
}
