package report

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/google/pprof/profile"

	"github.com/heapscope/heapscope/analyze"
	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/symbolize"
)

// Counts are the numbers a diff compares, of one site or of a whole trace.
// Leaks are counted as the report counts them: those a suppression rule
// matched are left out, and are SuppressedBytes and SuppressedBlocks.
type Counts struct {
	LeakedBytes      uint64 `json:"leaked_bytes"`
	LeakedBlocks     uint64 `json:"leaked_blocks"`
	SuppressedBytes  uint64 `json:"suppressed_bytes"`
	SuppressedBlocks uint64 `json:"suppressed_blocks"`
	PeakBytes        uint64 `json:"peak_bytes"`
	Bytes            uint64 `json:"bytes_allocated"`
	Calls            uint64 `json:"calls"` // allocations and reallocations
	Temporary        uint64 `json:"temporary"`
	// What a leak check classified (0 in a trace without one): lost is
	// definitely plus indirectly lost. As the leaks, the suppressed are
	// left out.
	LostBytes      uint64 `json:"lost_bytes"`
	LostBlocks     uint64 `json:"lost_blocks"`
	PossibleBytes  uint64 `json:"possibly_lost_bytes"`
	ReachableBytes uint64 `json:"still_reachable_bytes"`
}

// countsOf returns the counts a diff compares of c, a site's (whose
// LiveBytes are its leaks and Classes their classes, the suppressed ones
// apart).
func countsOf(c *analyze.Counters, supBytes, supBlocks uint64) Counts {
	l := c.Lost()
	return Counts{LeakedBytes: c.LiveBytes, LeakedBlocks: c.LiveBlocks, SuppressedBytes: supBytes, SuppressedBlocks: supBlocks,
		PeakBytes: c.PeakBytes, Bytes: c.Bytes, Calls: c.Calls(), Temporary: c.Temporary,
		LostBytes: l.Bytes, LostBlocks: l.Blocks, PossibleBytes: c.Classes[event.ClassPossible].Bytes, ReachableBytes: c.Classes[event.ClassReachable].Bytes}
}

// Delta is New minus Base, field by field.
type Delta struct {
	LeakedBytes  int64 `json:"leaked_bytes"`
	LeakedBlocks int64 `json:"leaked_blocks"`
	PeakBytes    int64 `json:"peak_bytes"`
	Bytes        int64 `json:"bytes_allocated"`
	Calls        int64 `json:"calls"`
	Temporary    int64 `json:"temporary"`

	LostBytes      int64 `json:"lost_bytes"`
	LostBlocks     int64 `json:"lost_blocks"`
	PossibleBytes  int64 `json:"possibly_lost_bytes"`
	ReachableBytes int64 `json:"still_reachable_bytes"`
}

func delta(base, new Counts) Delta {
	d := func(a, b uint64) int64 { return int64(b) - int64(a) }
	return Delta{d(base.LeakedBytes, new.LeakedBytes), d(base.LeakedBlocks, new.LeakedBlocks), d(base.PeakBytes, new.PeakBytes),
		d(base.Bytes, new.Bytes), d(base.Calls, new.Calls), d(base.Temporary, new.Temporary),
		d(base.LostBytes, new.LostBytes), d(base.LostBlocks, new.LostBlocks), d(base.PossibleBytes, new.PossibleBytes),
		d(base.ReachableBytes, new.ReachableBytes)}
}

func (d Delta) zero() bool { return d == Delta{} }

// of returns the change in m.
func (d Delta) of(m Metric) int64 {
	switch m {
	case AllocSpace:
		return d.Bytes
	case AllocObjects:
		return d.Calls
	case InuseSpace:
		return d.LeakedBytes
	case InuseObjects:
		return d.LeakedBlocks
	case Temporary:
		return d.Temporary
	case PeakSpace:
		return d.PeakBytes
	case LostSpace:
		return d.LostBytes
	case LostObjects:
		return d.LostBlocks
	case PossibleSpace:
		return d.PossibleBytes
	case ReachableSpace:
		return d.ReachableBytes
	}
	return 0
}

// SiteDiff is one stack's counts in the two traces. A stack missing from
// one trace has zero counts there.
type SiteDiff struct {
	Base, New Counts
	Delta     Delta
	site      *Site // in the new trace where it is there
	key       string
	base, new analyze.Counters // the sums Base and New are made from
	// and the suppressed leaks' bytes and blocks: base, new
	sup [2][2]uint64
}

// Stack returns the stack, innermost first, from the new trace where it is
// there.
func (s *SiteDiff) Stack() []symbolize.Frame { return s.site.Stack() }

// Diff compares two reports stack by stack. Stacks are matched by their
// symbolized frames (function, file and line; module and offset for a frame
// without a function), never by address: two runs of a program, whose
// addresses differ with ASLR, or two builds of it, line up.
type Diff struct {
	Base, New *Report
	// Totals of each trace: leaks, the peak and the allocation counts of
	// the whole trace (PeakBytes is the trace's peak, not a sum of sites').
	BaseTotals, NewTotals Counts
	Sites                 []*SiteDiff // every stack of either trace, in no order
}

// NewDiff compares base with new.
func NewDiff(base, new *Report) *Diff {
	d := &Diff{Base: base, New: new, BaseTotals: totals(base), NewTotals: totals(new)}
	// Frames get numbers shared by the two reports; a stack's key is its
	// numbers' bytes.
	global := map[symbolize.FrameKey]uint32{}
	byKey := map[string]*SiteDiff{}
	var kb []byte
	add := func(r *Report, isNew bool) {
		ids := make([]uint32, len(r.table.frames))
		for i := range ids {
			k := r.table.frames[i].DiffKey()
			g, ok := global[k]
			if !ok {
				g = uint32(len(global))
				global[k] = g
			}
			ids[i] = g
		}
		for _, s := range r.Sites {
			kb = kb[:0]
			for _, id := range s.ids {
				g := ids[id]
				kb = append(kb, byte(g), byte(g>>8), byte(g>>16), byte(g>>24))
			}
			sd := byKey[string(kb)]
			if sd == nil {
				sd = &SiteDiff{site: s, key: string(kb)}
				byKey[sd.key] = sd
				d.Sites = append(d.Sites, sd)
			}
			side := 0
			if isNew {
				sd.new.Add(&s.Counters)
				side = 1
			} else {
				sd.base.Add(&s.Counters)
			}
			sd.sup[side][0] += s.SuppressedBytes
			sd.sup[side][1] += s.SuppressedBlocks
		}
	}
	// The new trace first, so that shared stacks show its frames.
	add(new, true)
	add(base, false)
	for _, sd := range d.Sites {
		sd.Base, sd.New = countsOf(&sd.base, sd.sup[0][0], sd.sup[0][1]), countsOf(&sd.new, sd.sup[1][0], sd.sup[1][1])
		sd.Delta = delta(sd.Base, sd.New)
	}
	return d
}

// totals are the counts of the whole trace: its leaks and their classes
// are the report's (Report.Leaked, Report.Classes), the suppressed ones
// apart.
func totals(r *Report) Counts {
	sb, sk, _ := r.SuppressedTotal()
	c := countsOf(&r.Profile.Summary.Counters, sb, sk)
	c.LeakedBytes, c.LeakedBlocks = r.Leaked()
	cls, l := r.Classes(), r.Lost()
	c.LostBytes, c.LostBlocks = l.Bytes, l.Blocks
	c.PossibleBytes, c.ReachableBytes = cls[event.ClassPossible].Bytes, cls[event.ClassReachable].Bytes
	c.PeakBytes = r.Profile.Peak.Bytes // the trace's peak, not the sum of its stacks'
	return c
}

// TotalDelta is the change of the traces' totals.
func (d *Diff) TotalDelta() Delta { return delta(d.BaseTotals, d.NewTotals) }

func abs(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}

// Sorted returns the sites whose counts changed, the largest change first:
// by the change in by when by is not nil, else by the largest of the
// changes in leaked, peak and allocated bytes, then in calls and
// temporaries. At most top sites when top > 0.
func (d *Diff) Sorted(by *Metric, top int) []*SiteDiff {
	var out []*SiteDiff
	for _, s := range d.Sites {
		if !s.Delta.zero() && (by == nil || s.Delta.of(*by) != 0) {
			out = append(out, s)
		}
	}
	primary := func(s *SiteDiff) int64 {
		if by != nil {
			return abs(s.Delta.of(*by))
		}
		return max(abs(s.Delta.LeakedBytes), abs(s.Delta.PeakBytes), abs(s.Delta.Bytes))
	}
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if pa, pb := primary(a), primary(b); pa != pb {
			return pa > pb
		}
		if ca, cb := abs(a.Delta.Calls)+abs(a.Delta.Temporary), abs(b.Delta.Calls)+abs(b.Delta.Temporary); ca != cb {
			return ca > cb
		}
		return a.key < b.key
	})
	if top > 0 && len(out) > top {
		out = out[:top]
	}
	return out
}

// DiffOptions tune the diff's text and JSON.
type DiffOptions struct {
	// Top is how many changed sites are written (text: default 10; JSON:
	// 0 means all).
	Top int
	// By sorts by one metric's change; nil: the largest byte change.
	By *Metric
	// MaxFrames is how many frames of each stack the text prints
	// (default 12).
	MaxFrames int
}

// WriteText writes the diff for people: the totals of both traces and their
// change first, then the sites whose counts changed, the largest change
// first, each with its stack.
func (d *Diff) WriteText(w io.Writer, o DiffOptions) error {
	if o.Top <= 0 {
		o.Top = 10
	}
	if o.MaxFrames <= 0 {
		o.MaxFrames = 12
	}
	bw := bufio.NewWriter(w)
	p := func(format string, args ...any) { fmt.Fprintf(bw, format, args...) }
	p("heapscope diff\n  base: %s\n  new:  %s\n\n", traceDesc(d.Base), traceDesc(d.New))
	p("TOTALS%23s %16s %16s\n", "base", "new", "change")
	row := func(name string, a, b uint64, bytes bool) {
		fa, fb, change := fmtChange(a, b, bytes)
		p("  %-20s %16s %16s %16s\n", name, fa, fb, change)
	}
	bt, nt := d.BaseTotals, d.NewTotals
	row("leaked bytes", bt.LeakedBytes, nt.LeakedBytes, true)
	row("leaked blocks", bt.LeakedBlocks, nt.LeakedBlocks, false)
	if bt.SuppressedBlocks+nt.SuppressedBlocks > 0 {
		row("suppressed bytes", bt.SuppressedBytes, nt.SuppressedBytes, true)
	}
	row("peak bytes", bt.PeakBytes, nt.PeakBytes, true)
	row("bytes allocated", bt.Bytes, nt.Bytes, true)
	row("allocation calls", bt.Calls, nt.Calls, false)
	row("temporaries", bt.Temporary, nt.Temporary, false)
	if d.Base.LeakChecked() || d.New.LeakChecked() {
		row("lost bytes", bt.LostBytes, nt.LostBytes, true)
		row("lost blocks", bt.LostBlocks, nt.LostBlocks, false)
		row("possibly lost bytes", bt.PossibleBytes, nt.PossibleBytes, true)
		row("reachable bytes", bt.ReachableBytes, nt.ReachableBytes, true)
		for _, r := range []*Report{d.Base, d.New} {
			if !r.LeakChecked() {
				p("  note: %s holds no leak check: its lost and reachable counts are 0, its leaks only live at the end\n", r.Trace.File)
			}
		}
	}
	for _, r := range []*Report{d.Base, d.New} {
		if r.Profile.HasStats && r.Profile.Stats.TotalLost() > 0 {
			p("  lost events in %s: %s: its numbers are low by what was lost\n", r.Trace.File, lostText(&r.Profile.Stats))
		}
		if n := estimatedNote(r.Profile); n != "" {
			p("  note: %s: its counts are %s\n", r.Trace.File, n)
		}
		if text := suppressedText(r); text != "" {
			p("  note: %s: %s\n", r.Trace.File, text)
		}
		// An aggregate trace lacks some counts: their changes mean nothing.
		for _, l := range r.Profile.Missing.Describe() {
			p("  note: %s: %s\n", r.Trace.File, l)
		}
	}
	p("\n")
	all := d.Sorted(o.By, 0)
	unchanged := len(d.Sites) - len(all)
	title := "SITES BY LARGEST CHANGE"
	if o.By != nil {
		title = "SITES BY CHANGE IN " + strings.ToUpper(o.By.String())
	}
	p("%s", title)
	if len(all) > o.Top {
		p(": top %d of %d changed sites (%d unchanged)\n", o.Top, len(all), unchanged)
		all = all[:o.Top]
	} else {
		p(": %s changed (%d unchanged)\n", plural(uint64(len(all)), "site"), unchanged)
	}
	for _, s := range all {
		p("  %s\n", siteChange(s))
		st := s.Stack()
		if len(st) == 0 {
			p("      [no stack recorded]\n")
		}
		for i := range st {
			if i == o.MaxFrames {
				p("      … %d more frames\n", len(st)-i)
				break
			}
			p("      %s\n", frameText(&st[i], false))
		}
	}
	for _, r := range []*Report{d.Base, d.New} {
		for _, w := range r.Trace.Warnings {
			p("warning: %s: %s\n", r.Trace.File, w)
		}
	}
	return bw.Flush()
}

// suppressedText says what the rules took out of r's leaks, and which
// rules: "" when they took nothing.
func suppressedText(r *Report) string {
	if len(r.Suppressed) == 0 {
		return ""
	}
	sb, sk, _ := r.SuppressedTotal()
	var rules []string
	for _, s := range r.Suppressed {
		rules = append(rules, s.Rule.Text)
	}
	return fmt.Sprintf("%s in %s of its leaks suppressed (not counted as leaked) by %s", fmtBytes(sb), plural(sk, "block"), strings.Join(rules, ", "))
}

func traceDesc(r *Report) string {
	s := r.Trace.File
	if r.Trace.Provider != "" {
		s += " (" + r.Trace.Provider + ")"
	}
	return s
}

// siteChange says what changed at a site, byte counts first.
func siteChange(s *SiteDiff) string {
	var parts []string
	add := func(name string, a, b uint64, bytes bool) {
		if a == b {
			return
		}
		fa, fb, change := fmtChange(a, b, bytes)
		parts = append(parts, fmt.Sprintf("%s %s (%s → %s)", name, change, fa, fb))
	}
	add("leaked", s.Base.LeakedBytes, s.New.LeakedBytes, true)
	add("suppressed", s.Base.SuppressedBytes, s.New.SuppressedBytes, true)
	add("lost", s.Base.LostBytes, s.New.LostBytes, true)
	add("possibly lost", s.Base.PossibleBytes, s.New.PossibleBytes, true)
	add("reachable", s.Base.ReachableBytes, s.New.ReachableBytes, true)
	add("peak", s.Base.PeakBytes, s.New.PeakBytes, true)
	add("allocated", s.Base.Bytes, s.New.Bytes, true)
	add("calls", s.Base.Calls, s.New.Calls, false)
	add("temporaries", s.Base.Temporary, s.New.Temporary, false)
	switch {
	case s.Base == Counts{}:
		parts = append(parts, "new site")
	case s.New == Counts{}:
		parts = append(parts, "gone")
	}
	return strings.Join(parts, ", ")
}

// fmtChange formats a, b and the change from a to b ("+1.2 KiB", "-3",
// "0"), as bytes or as counts.
func fmtChange(a, b uint64, bytes bool) (fa, fb, change string) {
	f := fmtCount
	if bytes {
		f = fmtBytes
	}
	switch {
	case b > a:
		change = "+" + f(b-a)
	case b < a:
		change = "-" + f(a-b)
	default:
		change = "0"
	}
	return f(a), f(b), change
}

// DiffJSON is the document Diff.WriteJSON writes.
type DiffJSON struct {
	Version int           `json:"version"`
	Base    DiffJSONTrace `json:"base"`
	New     DiffJSONTrace `json:"new"`
	Change  Delta         `json:"change"`
	// Sites are the stacks whose counts changed, the largest change
	// first; Unchanged counts the others.
	Sites     []DiffJSONSite `json:"sites"`
	Unchanged int            `json:"unchanged"`
}

// DiffJSONTrace is one side of a diff: the trace and its totals.
type DiffJSONTrace struct {
	File       string `json:"file"`
	Provider   string `json:"provider"`
	Totals     Counts `json:"totals"`
	LostEvents uint64 `json:"lost_events"`
	// Limitations say which counts the trace lacks (an aggregate trace).
	Limitations []string `json:"limitations"`
	Warnings    []string `json:"warnings"`
	// Suppressed says what each suppression rule took out of the leaks
	// (Totals.SuppressedBytes), as the report's member of that name.
	Suppressed []JSONSuppressed `json:"suppressed"`
}

// DiffJSONSite is one changed stack.
type DiffJSONSite struct {
	Base   Counts      `json:"base"`
	New    Counts      `json:"new"`
	Change Delta       `json:"change"`
	Name   string      `json:"name"` // the site's name, as the JSON report's
	Stack  []JSONFrame `json:"stack"`
}

// Document returns the diff as WriteJSON writes it.
func (d *Diff) Document(o DiffOptions) *DiffJSON {
	side := func(r *Report, t Counts) DiffJSONTrace {
		j := DiffJSONTrace{File: r.Trace.File, Provider: r.Trace.Provider, Totals: t, Warnings: r.Trace.Warnings,
			Limitations: append([]string{}, r.Profile.Missing.Describe()...)}
		if n := estimatedNote(r.Profile); n != "" {
			j.Limitations = append([]string{"counts " + n}, j.Limitations...)
		}
		if r.Profile.HasStats {
			j.LostEvents = r.Profile.Stats.TotalLost()
		}
		if j.Warnings == nil {
			j.Warnings = []string{}
		}
		j.Suppressed = []JSONSuppressed{}
		for _, s := range r.Suppressed {
			j.Suppressed = append(j.Suppressed, JSONSuppressed{Rule: s.Rule.Text, Source: s.Rule.Source,
				Description: s.Rule.Description, Bytes: s.Bytes, Blocks: s.Blocks, Sites: s.Sites})
		}
		return j
	}
	sorted := d.Sorted(o.By, 0)
	doc := &DiffJSON{Version: 1, Base: side(d.Base, d.BaseTotals), New: side(d.New, d.NewTotals),
		Change: d.TotalDelta(), Sites: []DiffJSONSite{}, Unchanged: len(d.Sites) - len(sorted)}
	if o.Top > 0 && len(sorted) > o.Top {
		sorted = sorted[:o.Top]
	}
	for _, s := range sorted {
		doc.Sites = append(doc.Sites, DiffJSONSite{Base: s.Base, New: s.New, Change: s.Delta, Name: s.site.Name(), Stack: jsonStack(s.Stack())})
	}
	return doc
}

// WriteJSON writes the diff as JSON (DiffJSON).
func (d *Diff) WriteJSON(w io.Writer, o DiffOptions) error {
	e := json.NewEncoder(w)
	e.SetIndent("", "  ")
	return e.Encode(d.Document(o))
}

// Pprof returns the difference as a pprof profile with the sample types of
// Report.Pprof: what `go tool pprof -base BASE NEW` shows, the base's
// values subtracted from the new's. Each changed stack is one sample
// holding the change; its locations carry functions, files and lines but no
// addresses, since the two traces' addresses do not correspond.
func (d *Diff) Pprof() (*profile.Profile, error) {
	p := &profile.Profile{
		SampleType: []*profile.ValueType{
			{Type: "alloc_objects", Unit: "count"},
			{Type: "alloc_space", Unit: "bytes"},
			{Type: "inuse_objects", Unit: "count"},
			{Type: "inuse_space", Unit: "bytes"},
		},
		PeriodType: &profile.ValueType{Type: "space", Unit: "bytes"},
		Period:     1,
		Comments:   []string{fmt.Sprintf("heapscope diff: %s minus %s", d.New.Trace.File, d.Base.Trace.File)},
	}
	if !d.New.Trace.WallStart.IsZero() {
		p.TimeNanos = d.New.Trace.WallStart.UnixNano()
	}
	funcs := map[string]*profile.Function{}
	locs := map[string]*profile.Location{}
	function := func(f symbolize.Frame) *profile.Function {
		name := f.Name()
		k := name + "\x00" + f.File
		if pf := funcs[k]; pf != nil {
			return pf
		}
		pf := &profile.Function{ID: uint64(len(p.Function) + 1), Name: name, SystemName: name, Filename: f.File}
		funcs[k] = pf
		p.Function = append(p.Function, pf)
		return pf
	}
	location := func(group []symbolize.Frame) *profile.Location {
		k := symbolize.DiffSiteKey(group)
		if l := locs[k]; l != nil {
			return l
		}
		l := &profile.Location{ID: uint64(len(p.Location) + 1)}
		for _, f := range group {
			l.Line = append(l.Line, profile.Line{Function: function(f), Line: int64(f.Line)})
		}
		locs[k] = l
		p.Location = append(p.Location, l)
		return l
	}
	for _, s := range d.Sorted(nil, 0) {
		dd := s.Delta
		var ls []*profile.Location
		frames := s.Stack()
		if len(frames) == 0 {
			frames = []symbolize.Frame{{Function: "[no stack]"}}
		}
		// Inlined frames share their caller's location, as in Report.Pprof.
		for i := 0; i < len(frames); {
			j := i
			for j < len(frames)-1 && frames[j].Inlined {
				j++
			}
			ls = append(ls, location(frames[i:j+1]))
			i = j + 1
		}
		p.Sample = append(p.Sample, &profile.Sample{
			Location: ls,
			Value:    []int64{dd.Calls, dd.Bytes, dd.LeakedBlocks, dd.LeakedBytes},
		})
	}
	return checked(p, "pprof diff profile")
}

// WritePprof writes the difference as a gzipped pprof profile.
func (d *Diff) WritePprof(w io.Writer) error { return writePprof(w, d) }
