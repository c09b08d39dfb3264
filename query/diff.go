package query

import (
	"sort"

	"github.com/heapscope/heapscope/symbolize"
)

// DiffRow is a site's cost in a trace and in a base trace.
type DiffRow struct {
	Frames []symbolize.Frame
	Value  uint64 // in this trace
	Base   uint64 // in the base trace
	Delta  int64  // Value - Base
}

// Diff matches the sites of res (of x) and of baseRes (of base) by their
// symbolized frames, as heapscope diff does (symbolize.DiffSiteKey), and
// returns each site's cost c in both, by the size of the difference,
// largest first; sites equal in both are left out. For a leak cost the
// suppressed sites are left out, as in every view (see SiteCost;
// Index.Total says how much they hold).
func Diff(x *Index, res *Result, base *Index, baseRes *Result, c Cost) []DiffRow {
	rows := map[string]*DiffRow{}
	var order []string
	add := func(ix *Index, r *Result, isBase bool) {
		for _, s := range ix.sites {
			v, sup := ix.SiteCost(r, c, s.ID)
			if v == 0 || sup {
				continue
			}
			k := symbolize.DiffSiteKey(s.Frames)
			d := rows[k]
			if d == nil {
				d = &DiffRow{Frames: s.Frames}
				rows[k] = d
				order = append(order, k)
			}
			if isBase {
				d.Base += v
			} else {
				d.Value += v
			}
		}
	}
	add(x, res, false)
	add(base, baseRes, true)
	out := make([]DiffRow, 0, len(order))
	for _, k := range order {
		d := rows[k]
		d.Delta = int64(d.Value) - int64(d.Base)
		if d.Delta != 0 {
			out = append(out, *d)
		}
	}
	abs := func(v int64) int64 {
		if v < 0 {
			return -v
		}
		return v
	}
	sort.SliceStable(out, func(i, j int) bool { return abs(out[i].Delta) > abs(out[j].Delta) })
	return out
}
