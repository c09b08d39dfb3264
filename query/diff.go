package query

import (
	"sort"
	"strconv"
	"strings"

	"github.com/heapscope/heapscope/symbolize"
)

// SiteKey identifies a site across traces: its frames as symbolized (the
// function, file, line and module of each, or the module and offset of a
// frame without a function), never its addresses, which differ from run to
// run. A frame with neither function nor module has only its address, and
// so matches nothing in another run.
func SiteKey(frames []symbolize.Frame) string {
	var b strings.Builder
	for _, f := range frames {
		k := keyOf(f)
		b.WriteString(k.function)
		b.WriteByte(0)
		b.WriteString(k.file)
		b.WriteByte(0)
		b.WriteString(strconv.Itoa(k.line))
		b.WriteByte(0)
		b.WriteString(k.module)
		b.WriteByte(0)
		b.WriteString(strconv.FormatUint(k.offset, 16))
		b.WriteByte(0)
		b.WriteString(strconv.FormatUint(k.address, 16))
		if k.inlined {
			b.WriteByte('i')
		}
		b.WriteByte(1)
	}
	return b.String()
}

// DiffRow is a site's cost in a trace and in a base trace.
type DiffRow struct {
	Frames []symbolize.Frame
	Value  uint64 // in this trace
	Base   uint64 // in the base trace
	Delta  int64  // Value - Base
}

// Diff matches the sites of res (of x) and of baseRes (of base) by their
// symbolized frames and returns each site's cost c in both, by the size of
// the difference, largest first; sites equal in both are left out. Modules
// are matched by path, so both traces must be of the same build for the
// frames to agree.
func Diff(x *Index, res *Result, base *Index, baseRes *Result, c Cost) []DiffRow {
	rows := map[string]*DiffRow{}
	var order []string
	add := func(ix *Index, r *Result, isBase bool) {
		for _, s := range ix.sites {
			v := c.Of(&r.Sites[s.ID])
			if v == 0 {
				continue
			}
			k := SiteKey(s.Frames)
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
