package report

import (
	"fmt"
	"strings"

	"github.com/heapscope/heapscope/analyze"
	"github.com/heapscope/heapscope/event"
)

// The conditions a gate checks (GateOptions.FailOn).
const (
	FailLeaks    = "leaks"    // definitely and indirectly lost bytes exceed MaxLeaked
	FailDefinite = "definite" // definitely lost bytes exceed MaxLeaked
	FailPossible = "possible" // definitely, indirectly and possibly lost bytes exceed MaxLeaked
	FailGrowth   = "growth"   // live bytes grow after the warm-up by more than GrowthLimit
	FailPeak     = "peak"     // the peak exceeds MaxPeak (checked whenever MaxPeak is set)
	FailAny      = "any"      // every condition above
)

// GateConditions are the names FailOn takes.
var GateConditions = []string{FailLeaks, FailDefinite, FailPossible, FailGrowth, FailAny}

// GateOptions choose what a gate fails on.
type GateOptions struct {
	// FailOn names the conditions checked: FailLeaks, FailDefinite,
	// FailPossible, FailGrowth or FailAny.
	FailOn []string
	// MaxLeaked is the most bytes the leak conditions allow (0: none).
	MaxLeaked uint64
	// MaxPeak, when not 0, fails the gate when the heap's peak exceeds it.
	MaxPeak uint64
	// GrowthLimit is the most bytes of growth after the warm-up the
	// growth condition allows, projected over the run (see Growth);
	// 0 means DefaultGrowthLimit.
	GrowthLimit uint64
}

// DefaultGrowthLimit is GateOptions.GrowthLimit's default: 1 MiB.
const DefaultGrowthLimit = 1 << 20

// Check is one condition of a gate, checked.
type Check struct {
	Name   string // FailLeaks, FailDefinite, FailPossible, FailGrowth or FailPeak
	Failed bool
	// Value and Limit are the bytes measured and allowed.
	Value, Limit int64
	// Summary says what was found, in one line; Detail, when the check
	// failed, the sites to look at first, with their stacks.
	Summary, Detail string
}

// ParseFailOn parses a --fail-on list: names of GateConditions, separated
// by commas.
func ParseFailOn(s string) ([]string, error) {
	var out []string
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		ok := false
		for _, c := range GateConditions {
			ok = ok || f == c
		}
		if !ok {
			return nil, fmt.Errorf("unknown condition %q (want %s)", f, strings.Join(GateConditions, ", "))
		}
		out = append(out, f)
	}
	return out, nil
}

// Gate checks the report against o: one Check per condition asked, in the
// order leaks, definite, possible, growth, peak. A trace without a leak
// check has no classes: its leak conditions count every block live at the
// end, and their Summary says so.
func (r *Report) Gate(o GateOptions) []Check {
	want := map[string]bool{}
	for _, f := range o.FailOn {
		if f == FailAny {
			for _, c := range []string{FailLeaks, FailDefinite, FailPossible, FailGrowth} {
				want[c] = true
			}
			continue
		}
		want[f] = true
	}
	if o.MaxPeak > 0 {
		want[FailPeak] = true
	}
	if o.GrowthLimit == 0 {
		o.GrowthLimit = DefaultGrowthLimit
	}
	var out []Check
	checked := r.LeakChecked()
	liveBytes, liveBlocks := r.Leaked()
	c := r.Classes()
	leak := func(name, what string, key func(*Site) uint64, ks ...event.Class) {
		var a analyze.Amount
		for _, k := range ks {
			a.Add(c[k])
		}
		// Blocks live at the end that no scan classified could be lost:
		// the gate counts them rather than pass on what it cannot tell.
		u := r.Unscanned()
		a.Add(u)
		ch := Check{Name: name, Value: int64(a.Bytes), Limit: int64(o.MaxLeaked)}
		ch.Summary = fmt.Sprintf("%s %s in %s", fmtBytes(a.Bytes), what, plural(a.Blocks, "block"))
		if u.Blocks > 0 {
			ch.Summary += fmt.Sprintf(" (%s in %s of them not scanned, counted as lost)", fmtBytes(u.Bytes), plural(u.Blocks, "block"))
		}
		if !checked {
			key = byLeaked
			ch.Value = int64(liveBytes)
			ch.Summary = fmt.Sprintf("%s in %s live at the end (the trace holds no leak check: every live block counts)", fmtBytes(liveBytes), plural(liveBlocks, "block"))
		}
		ch.Failed = uint64(ch.Value) > o.MaxLeaked
		ch.Summary += fmt.Sprintf(", %s allowed", fmtBytes(o.MaxLeaked))
		if ch.Failed {
			ch.Detail = r.gateSites(key, func(s *Site) string {
				if !checked {
					return fmt.Sprintf("%s in %s live at the end", fmtBytes(s.LiveBytes), plural(s.LiveBlocks, "block"))
				}
				return fmt.Sprintf("%s %s (%s)", fmtBytes(key(s)), what, amountsText(&s.Classes, ks...))
			})
		}
		out = append(out, ch)
	}
	if want[FailLeaks] {
		leak(FailLeaks, "lost (definitely and indirectly)", byLost, event.ClassDefinite, event.ClassIndirect)
	}
	if want[FailDefinite] {
		leak(FailDefinite, "definitely lost", func(s *Site) uint64 { return s.Classes[event.ClassDefinite].Bytes }, event.ClassDefinite)
	}
	if want[FailPossible] {
		leak(FailPossible, "lost or possibly lost", func(s *Site) uint64 { return lostOf(s) + byPossible(s) },
			event.ClassDefinite, event.ClassIndirect, event.ClassPossible)
	}
	if want[FailGrowth] {
		g := r.Growth()
		ch := Check{Name: FailGrowth, Value: int64(g.Projected), Limit: int64(o.GrowthLimit), Summary: g.String()}
		ch.Failed = g.Measured && g.Projected > float64(o.GrowthLimit)
		ch.Summary += fmt.Sprintf(", %s allowed", fmtBytes(o.GrowthLimit))
		if ch.Failed {
			ch.Detail = r.gateSites(byLeaked, func(s *Site) string {
				return fmt.Sprintf("%s in %s live at the end", fmtBytes(s.LiveBytes), plural(s.LiveBlocks, "block"))
			})
		}
		out = append(out, ch)
	}
	if want[FailPeak] {
		p := r.Profile.Peak
		ch := Check{Name: FailPeak, Value: int64(p.Bytes), Limit: int64(o.MaxPeak), Failed: p.Bytes > o.MaxPeak,
			Summary: fmt.Sprintf("peak %s in %s at %s, %s allowed", fmtBytes(p.Bytes), plural(p.Blocks, "block"), fmtDur(r.rel(p.Time)), fmtBytes(o.MaxPeak))}
		if ch.Failed {
			ch.Detail = r.gateSites(byPeak, func(s *Site) string {
				return fmt.Sprintf("%s in %s at the peak", fmtBytes(s.PeakBytes), plural(s.PeakBlocks, "block"))
			})
		}
		out = append(out, ch)
	}
	return out
}

// gateSites lists the top sites by key for a failure's text.
func (r *Report) gateSites(key func(*Site) uint64, head func(*Site) string) string {
	var b strings.Builder
	for _, s := range r.sorted(key, 5) {
		fmt.Fprintf(&b, "%s from:\n", head(s))
		st := s.Stack()
		if len(st) == 0 {
			b.WriteString("    [no stack recorded]\n")
		}
		for i := range st {
			if i == 12 {
				fmt.Fprintf(&b, "    … %d more frames\n", len(st)-i)
				break
			}
			fmt.Fprintf(&b, "    %s\n", frameText(&st[i], false))
		}
	}
	return b.String()
}

// Verdict is the gate's one line: which conditions failed, or that all
// passed.
func Verdict(checks []Check) string {
	var failed, passed []string
	for _, c := range checks {
		if c.Failed {
			failed = append(failed, c.Name+": "+c.Summary)
		} else {
			passed = append(passed, c.Name)
		}
	}
	if len(failed) == 0 {
		return "heapscope: PASS (" + strings.Join(passed, ", ") + ")"
	}
	return "heapscope: FAIL " + strings.Join(failed, "; ")
}

// Failed reports whether a check of checks failed.
func Failed(checks []Check) bool {
	for _, c := range checks {
		if c.Failed {
			return true
		}
	}
	return false
}

// Growth is how live bytes grew after a program's warm-up.
type Growth struct {
	// Measured: the trace had enough of a timeline after the warm-up.
	Measured bool
	// From and To bound the span measured (trace clock, ns): from the end
	// of the warm-up, the first quarter of the time the events cover, to
	// the start of the last twentieth (a program's teardown at exit,
	// which frees what it kept, is not growth).
	From, To int64
	// Slope is the least-squares slope of the live bytes over that span,
	// in bytes per second; Projected is the growth it makes over the
	// time after the warm-up (to the last event).
	Slope, Projected float64
	Points           int
}

func (g Growth) String() string {
	if !g.Measured {
		return "growth not measured: the trace's timeline has too few points after the warm-up"
	}
	sign := "+"
	if g.Projected < 0 {
		sign = "-"
	}
	return fmt.Sprintf("live bytes after the warm-up grow %s%s/s, %s%s over the run", sign, fmtBytes(uint64(abs(int64(g.Slope)))),
		sign, fmtBytes(uint64(abs(int64(g.Projected)))))
}

// Growth measures the growth of the report's live bytes after a warm-up
// (see Growth's fields), from its timeline.
func (r *Report) Growth() Growth {
	p := r.Profile
	first, last := p.FirstEvent, p.LastEvent
	span := last - first
	g := Growth{From: first + span/4, To: last - span/20}
	if span <= 0 {
		return g
	}
	var n, st, sb, stt, stb float64
	for _, pt := range p.Timeline {
		if pt.Time < g.From || pt.Time > g.To {
			continue
		}
		x := float64(pt.Time-g.From) / 1e9
		y := float64(pt.Bytes)
		n++
		st += x
		sb += y
		stt += x * x
		stb += x * y
	}
	g.Points = int(n)
	den := n*stt - st*st
	if n < 4 || den <= 0 {
		return g
	}
	g.Measured = true
	g.Slope = (n*stb - st*sb) / den
	g.Projected = g.Slope * float64(last-g.From) / 1e9
	return g
}
