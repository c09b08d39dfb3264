package export

import (
	"fmt"
	"io"
	"strings"

	"github.com/google/pprof/profile"
)

// Pprof returns iv as one pprof profile per process, in iv.Processes'
// order, each with the four sample types of a Go heap profile
// (alloc_objects/count, alloc_space/bytes, inuse_objects/count,
// inuse_space/bytes), where alloc_* are the interval's and inuse_* the
// state at its end. The Period is the sampling rate (1 when exact), as in
// a Go heap profile; the comments name the process and say whether the
// values are estimates and how many events were lost.
//
// Unlike a Go heap profile, alloc_* are not cumulative since the process
// started: a Pyroscope /ingest needs the sample-type config that
// PyroscopeSampleTypes returns to know that.
func Pprof(iv *Interval, o Options) ([]*profile.Profile, error) {
	if err := iv.check(); err != nil {
		return nil, err
	}
	t := newTable(iv, &o)
	out := make([]*profile.Profile, len(t.procs))
	for i := range t.procs {
		p, err := pprofProcess(iv, &t.procs[i], &o)
		if err != nil {
			return nil, err
		}
		out[i] = p
	}
	return out, nil
}

// WritePprof writes the profile of process index i of iv (see Pprof),
// gzipped, as pprof tools and Pyroscope read it.
func WritePprof(w io.Writer, iv *Interval, i int, o Options) error {
	if i < 0 || i >= len(iv.Processes) {
		return fmt.Errorf("export: no process %d in an interval of %d", i, len(iv.Processes))
	}
	one := *iv
	one.Processes = iv.Processes[i : i+1]
	ps, err := Pprof(&one, o)
	if err != nil {
		return err
	}
	return ps[0].Write(w)
}

func pprofProcess(iv *Interval, pt *procTable, o *Options) (*profile.Profile, error) {
	p := &profile.Profile{
		PeriodType:        &profile.ValueType{Type: "space", Unit: "bytes"},
		Period:            max(iv.SampleRate, 1),
		TimeNanos:         iv.Start.UnixNano(),
		DurationNanos:     int64(max(iv.Duration(), 0)),
		DefaultSampleType: "inuse_space",
	}
	for _, st := range sampleTypes {
		p.SampleType = append(p.SampleType, &profile.ValueType{Type: st.typ, Unit: st.unit})
	}
	p.Comments = pprofComments(iv, pt.p, o)

	maps := make([]*profile.Mapping, len(pt.maps))
	mapping := func(i int32) *profile.Mapping {
		if i < 0 {
			return nil
		}
		if maps[i] == nil {
			m := &pt.maps[i]
			maps[i] = &profile.Mapping{
				ID: uint64(len(p.Mapping) + 1), Start: m.Start, Limit: m.Limit, Offset: m.Offset,
				File: m.File, BuildID: m.BuildID,
				HasFunctions: o.Resolver != nil, HasFilenames: o.Resolver != nil,
				HasLineNumbers: o.Resolver != nil, HasInlineFrames: o.Resolver != nil,
			}
			p.Mapping = append(p.Mapping, maps[i])
		}
		return maps[i]
	}
	funcs := map[funcKey]*profile.Function{}
	locs := make([]*profile.Location, len(pt.locs))
	for i := range pt.locs {
		l := &pt.locs[i]
		pl := &profile.Location{ID: uint64(i + 1), Address: l.addr, Mapping: mapping(l.mapping)}
		for _, f := range l.lines {
			k := funcKey{f.Function, f.File}
			fn := funcs[k]
			if fn == nil {
				fn = &profile.Function{ID: uint64(len(p.Function) + 1), Name: f.Function, SystemName: f.Function, Filename: f.File}
				funcs[k] = fn
				p.Function = append(p.Function, fn)
			}
			pl.Line = append(pl.Line, profile.Line{Function: fn, Line: int64(f.Line)})
		}
		locs[i] = pl
		p.Location = append(p.Location, pl)
	}
	for j, ids := range pt.stacks {
		if ids == nil {
			continue
		}
		st := &pt.p.Stacks[j]
		s := &profile.Sample{
			Value:    []int64{int64(st.Allocs), int64(st.AllocBytes), int64(st.LiveObjects), int64(st.LiveBytes)},
			Location: make([]*profile.Location, len(ids)),
		}
		for k, id := range ids {
			s.Location[k] = locs[id]
		}
		p.Sample = append(p.Sample, s)
	}
	if err := p.CheckValid(); err != nil {
		return nil, fmt.Errorf("export: building the pprof profile of process %d: %w", pt.p.PID, err)
	}
	return p, nil
}

func pprofComments(iv *Interval, p *Process, o *Options) []string {
	c := []string{"heapscope " + o.Version + ": interval heap profile"}
	c = append(c, fmt.Sprintf("process %d (%s)", p.PID, p.ExeName()))
	if len(p.Cmdline) > 0 {
		c = append(c, "command line: "+strings.Join(p.Cmdline, " "))
	}
	if iv.Host.Name != "" {
		c = append(c, "host: "+iv.Host.Name)
	}
	if iv.SampleRate > 0 {
		c = append(c, fmt.Sprintf("values estimated: sampled every %d bytes on average", iv.SampleRate))
	}
	lost := fmt.Sprintf("lost events: %d, events without their stack: %d", iv.Lost, iv.StacksLost)
	if !iv.LostFrom.IsZero() && !iv.LostFrom.Equal(iv.Start) {
		lost += " (since " + iv.LostFrom.UTC().Format("2006-01-02T15:04:05.999999999Z07:00") + ", not this interval alone)"
	}
	return append(c, lost, "alloc_*: during the interval (not cumulative); inuse_*: live at its end")
}

// SampleTypeConfig is how Pyroscope's /ingest reads one sample type of a
// pprof profile (the multipart field "sample_type_config").
type SampleTypeConfig struct {
	Units       string `json:"units,omitempty"`
	DisplayName string `json:"display-name,omitempty"`
	Aggregation string `json:"aggregation,omitempty"` // "sum" or "average"
	Cumulative  bool   `json:"cumulative"`
	Sampled     bool   `json:"sampled,omitempty"`
}

// PyroscopeSampleTypes is the sample-type config of Pprof's profiles for
// Pyroscope's /ingest?format=pprof: alloc_* sum over time and are not
// cumulative (each profile is its interval's alone, where Pyroscope's
// default for Go heap profiles takes them as cumulative and differences
// them), inuse_* are a state, averaged when profiles are merged.
func PyroscopeSampleTypes() map[string]SampleTypeConfig {
	return map[string]SampleTypeConfig{
		"alloc_objects": {Units: "objects", Aggregation: "sum"},
		"alloc_space":   {Units: "bytes", Aggregation: "sum"},
		"inuse_objects": {Units: "objects", Aggregation: "average"},
		"inuse_space":   {Units: "bytes", Aggregation: "average"},
	}
}
