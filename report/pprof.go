package report

import (
	"fmt"
	"io"
	"sort"

	"github.com/google/pprof/profile"

	"github.com/heapscope/heapscope/analyze"
	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/symbolize"
)

// Pprof returns the report as a pprof profile with the sample types of Go's
// heap profiles: alloc_objects/count, alloc_space/bytes, inuse_objects/count
// and inuse_space/bytes, where "in use" means live at the end of the trace
// (or window): the leaks. Each stack of each process is one sample, labelled
// with its pid, with the allocator's frames dropped. Inlined frames are
// Lines of one Location, innermost first; Mappings come from the trace's
// module records. Frames that could not be symbolized get a function named
// after their module and offset, so that viewers show them as such. A
// sampled trace's values are estimates, already scaled up, and its Period is
// the sampling rate, as in a Go heap profile.
func (r *Report) Pprof() (*profile.Profile, error) {
	b := newPprofBuilder(r.Profile.Modules)
	p := b.p
	p.SampleType = []*profile.ValueType{
		{Type: "alloc_objects", Unit: "count"},
		{Type: "alloc_space", Unit: "bytes"},
		{Type: "inuse_objects", Unit: "count"},
		{Type: "inuse_space", Unit: "bytes"},
	}
	p.PeriodType = &profile.ValueType{Type: "space", Unit: "bytes"}
	p.Period = 1
	if r.Profile.Estimated() {
		// As Go's runtime writes a sampled heap profile: values already
		// scaled up, the period the mean bytes between samples.
		p.Period = r.Profile.SampleRate
	}
	if !r.Trace.WallStart.IsZero() {
		p.TimeNanos = r.Trace.WallStart.UnixNano()
	}
	p.DurationNanos = int64(r.Duration())
	p.Comments = r.pprofComments()

	var frames []symbolize.Frame
	// A sample per stack of a process; the stacks of one process with the
	// same frames (which the model stores once: a trace can have a million
	// stack IDs of one call path) are one sample.
	type sampleKey struct {
		pid   uint32
		first *uint64
		n     int
	}
	// A leak-checked stack's live blocks are split by class: one sample per
	// class, labelled class=definitely_lost and so on; the allocations and
	// the blocks no scan classified stay in the first.
	type merged struct {
		sm  *profile.Sample
		cls [event.NumClasses]*profile.Sample
	}
	for _, s := range r.Sites {
		same := map[sampleKey]*merged{}
		for _, st := range s.members {
			objs := st.Allocations + st.Reallocations - min(st.Failed, st.Allocations+st.Reallocations)
			liveBlocks, liveBytes := st.LiveBlocks, st.LiveBytes
			if s.SuppressedBy != nil {
				// Suppressed: not in use as far as leaks go.
				liveBlocks, liveBytes = 0, 0
			}
			if objs == 0 && liveBlocks == 0 {
				continue
			}
			classed := s.SuppressedBy == nil && st.Scanned().Blocks > 0
			if classed {
				u := st.Unscanned()
				liveBlocks, liveBytes = u.Blocks, u.Bytes
			}
			v := []int64{int64(objs), int64(st.Bytes), int64(liveBlocks), int64(liveBytes)}
			var k sampleKey
			var m *merged
			if len(st.Frames) > 0 {
				k = sampleKey{st.PID, &st.Frames[0], len(st.Frames)}
				m = same[k]
			}
			if m == nil {
				frames = r.frames(st, frames[:0])
				m = &merged{sm: &profile.Sample{Location: b.locations(st.PID, frames), Value: make([]int64, len(v)),
					NumLabel: map[string][]int64{"pid": {int64(st.PID)}}}}
				p.Sample = append(p.Sample, m.sm)
				if k.first != nil {
					same[k] = m
				}
			}
			for i := range v {
				m.sm.Value[i] += v[i]
			}
			if !classed {
				continue
			}
			for c, a := range st.Classes {
				if a.Blocks == 0 {
					continue
				}
				cs := m.cls[c]
				if cs == nil {
					cs = &profile.Sample{Location: m.sm.Location, Value: make([]int64, len(v)),
						Label:    map[string][]string{"class": {classKeys[c]}},
						NumLabel: map[string][]int64{"pid": {int64(st.PID)}}}
					m.cls[c] = cs
					p.Sample = append(p.Sample, cs)
				}
				cs.Value[2] += int64(a.Blocks)
				cs.Value[3] += int64(a.Bytes)
			}
		}
	}
	return checked(p, "pprof profile")
}

// checked returns p, or an error when p is not a valid profile.
func checked(p *profile.Profile, what string) (*profile.Profile, error) {
	if err := p.CheckValid(); err != nil {
		return nil, fmt.Errorf("building %s: %w", what, err)
	}
	return p, nil
}

// WritePprof writes the pprof profile, gzipped, as pprof tools read it.
func (r *Report) WritePprof(w io.Writer) error { return writePprof(w, r) }

// writePprof writes x's profile, gzipped.
func writePprof(w io.Writer, x interface {
	Pprof() (*profile.Profile, error)
}) error {
	p, err := x.Pprof()
	if err != nil {
		return err
	}
	return p.Write(w)
}

func (r *Report) pprofComments() []string {
	pr := r.Profile
	s := pr.Summary
	lb, lk := r.Leaked()
	c := []string{
		fmt.Sprintf("heapscope: %s", r.Trace.File),
		fmt.Sprintf("peak %d bytes in %d blocks at %s", pr.Peak.Bytes, pr.Peak.Blocks, fmtDur(r.rel(pr.Peak.Time))),
		fmt.Sprintf("leaked %d bytes in %d blocks", lb, lk),
		fmt.Sprintf("%d allocations, %d reallocations, %d frees, %d temporary, %d unmatched frees",
			s.Allocations, s.Reallocations, s.Frees, s.Temporary, s.UnmatchedFrees),
	}
	if e := estimatedNote(pr); e != "" {
		c = append(c, fmt.Sprintf("values %s, from %s", e, sampledText(pr)))
	}
	if sb, sk, n := r.SuppressedTotal(); n > 0 {
		c = append(c, fmt.Sprintf("suppressed %d bytes in %d blocks by %d rules (not in inuse_*)", sb, sk, n))
	}
	if r.LeakChecked() {
		l := r.Lost()
		c = append(c, fmt.Sprintf("%s: lost %d bytes in %d blocks; inuse_* samples carry a label class=definitely_lost, indirectly_lost, possibly_lost, still_reachable or unclassified (none: not scanned)",
			r.ScanText(), l.Bytes, l.Blocks))
	}
	if pr.HasStats {
		c = append(c, "lost events: "+lostText(&pr.Stats))
	}
	return append(c, pr.Missing.Describe()...)
}

// pprofBuilder interns mappings, functions and locations.
type pprofBuilder struct {
	p     *profile.Profile
	mods  map[uint32][]event.Module // by pid, sorted by start
	maps  map[mapKey]*profile.Mapping
	funcs map[funcKey]*profile.Function
	locs  map[locKey]*profile.Location
}

type mapKey struct {
	pid   uint32
	start uint64
}

type funcKey struct{ name, file string }

type locKey struct {
	pid   uint32
	addr  uint64
	lines int
	first string
}

func newPprofBuilder(mods []event.Module) *pprofBuilder {
	b := &pprofBuilder{
		p:     &profile.Profile{},
		mods:  map[uint32][]event.Module{},
		maps:  map[mapKey]*profile.Mapping{},
		funcs: map[funcKey]*profile.Function{},
		locs:  map[locKey]*profile.Location{},
	}
	for _, m := range mods {
		b.mods[m.PID] = append(b.mods[m.PID], m)
	}
	for _, ms := range b.mods {
		sort.SliceStable(ms, func(i, j int) bool { return ms[i].Start < ms[j].Start })
	}
	return b
}

func (b *pprofBuilder) mapping(pid uint32, addr uint64) *profile.Mapping {
	ms := b.mods[pid]
	i := sort.Search(len(ms), func(i int) bool { return ms[i].Start > addr }) - 1
	if i < 0 || addr >= ms[i].End {
		return nil
	}
	m := ms[i]
	k := mapKey{pid, m.Start}
	if pm := b.maps[k]; pm != nil {
		return pm
	}
	pm := &profile.Mapping{
		ID:              uint64(len(b.p.Mapping) + 1),
		Start:           m.Start,
		Limit:           m.End,
		Offset:          m.Offset,
		File:            m.Path,
		BuildID:         m.BuildID,
		HasFunctions:    true,
		HasFilenames:    true,
		HasLineNumbers:  true,
		HasInlineFrames: true,
	}
	b.maps[k] = pm
	b.p.Mapping = append(b.p.Mapping, pm)
	return pm
}

func (b *pprofBuilder) function(f symbolize.Frame) *profile.Function {
	name := f.Name()
	k := funcKey{name, f.File}
	if pf := b.funcs[k]; pf != nil {
		return pf
	}
	pf := &profile.Function{ID: uint64(len(b.p.Function) + 1), Name: name, SystemName: name, Filename: f.File}
	b.funcs[k] = pf
	b.p.Function = append(b.p.Function, pf)
	return pf
}

// locations groups frames into Locations: an address and the frames inlined
// at it, innermost first. A stack without frames gets one location named
// "[no stack]".
func (b *pprofBuilder) locations(pid uint32, frames []symbolize.Frame) []*profile.Location {
	if len(frames) == 0 {
		return []*profile.Location{b.location(locKey{first: "[no stack]"}, nil, []symbolize.Frame{{Function: "[no stack]"}})}
	}
	var out []*profile.Location
	for i := 0; i < len(frames); {
		j := i
		for j < len(frames)-1 && frames[j].Inlined && frames[j+1].Address == frames[i].Address {
			j++
		}
		group := frames[i : j+1]
		k := locKey{pid, frames[i].Address, len(group), frames[i].Name()}
		out = append(out, b.location(k, b.mapping(pid, frames[i].Address), group))
		i = j + 1
	}
	return out
}

func (b *pprofBuilder) location(k locKey, m *profile.Mapping, group []symbolize.Frame) *profile.Location {
	if l := b.locs[k]; l != nil {
		return l
	}
	l := &profile.Location{ID: uint64(len(b.p.Location) + 1), Mapping: m, Address: k.addr}
	for _, f := range group {
		l.Line = append(l.Line, profile.Line{Function: b.function(f), Line: int64(f.Line)})
	}
	b.locs[k] = l
	b.p.Location = append(b.p.Location, l)
	return l
}

// Metric is a value of a site that collapsed stacks can weigh by.
type Metric uint8

// The metrics.
const (
	AllocSpace     Metric = iota // bytes allocated
	AllocObjects                 // allocation calls
	InuseSpace                   // bytes live at the end (leaked)
	InuseObjects                 // blocks live at the end
	Temporary                    // temporary allocations
	PeakSpace                    // bytes live at the peak
	LostSpace                    // bytes a leak check found definitely or indirectly lost
	LostObjects                  // blocks a leak check found definitely or indirectly lost
	PossibleSpace                // bytes a leak check found possibly lost
	ReachableSpace               // bytes a leak check found still reachable
)

var metricNames = []string{"alloc_space", "alloc_objects", "inuse_space", "inuse_objects", "temporary", "peak_space",
	"lost_space", "lost_objects", "possible_space", "reachable_space"}

func (m Metric) String() string {
	if int(m) < len(metricNames) {
		return metricNames[m]
	}
	return fmt.Sprintf("metric(%d)", uint8(m))
}

// ParseMetric returns the metric named s ("alloc_space", "alloc_objects",
// "inuse_space", "inuse_objects", "temporary", "peak_space", and those of
// a leak check: "lost_space", "lost_objects", "possible_space",
// "reachable_space").
func ParseMetric(s string) (Metric, error) {
	for i, n := range metricNames {
		if n == s {
			return Metric(i), nil
		}
	}
	return 0, fmt.Errorf("unknown metric %q (want one of %v)", s, metricNames)
}

func (m Metric) of(s *analyze.Counters) uint64 {
	switch m {
	case AllocSpace:
		return s.Bytes
	case AllocObjects:
		return s.Calls()
	case InuseSpace:
		return s.LiveBytes
	case InuseObjects:
		return s.LiveBlocks
	case Temporary:
		return s.Temporary
	case PeakSpace:
		return s.PeakBytes
	case LostSpace:
		return s.Lost().Bytes
	case LostObjects:
		return s.Lost().Blocks
	case PossibleSpace:
		return s.Classes[event.ClassPossible].Bytes
	case ReachableSpace:
		return s.Classes[event.ClassReachable].Bytes
	}
	return 0
}

// Missing reports whether the profile lacks the data for m.
func (m Metric) missing(p *analyze.Profile) bool {
	return m == Temporary && p.Missing.Has(analyze.NoTemporaries) || m.classes() && len(p.Verdicts) == 0
}

// classes reports whether m needs a leak check.
func (m Metric) classes() bool { return m >= LostSpace && m <= ReachableSpace }
