package export

import (
	"crypto/rand"
	"fmt"
	"io"
	"strings"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"
)

// CollectorRelease is the OpenTelemetry Collector release whose pdata
// (go.opentelemetry.io/collector/pdata v1.71.0, pdata/pprofile v0.165.0)
// encodes the OTLP profiles: the v1development signal, still an alpha
// whose messages change between releases, so one release is pinned.
const CollectorRelease = "v0.165.0"

// The sample types of an interval profile, in the order written.
var sampleTypes = [4]struct{ typ, unit string }{
	{"alloc_objects", "count"},
	{"alloc_space", "bytes"},
	{"inuse_objects", "count"},
	{"inuse_space", "bytes"},
}

// The attributes heapscope adds to every profile.
const (
	// AttrEstimated is true when the values are estimates scaled up from a
	// sampled session (false when every allocation was recorded).
	AttrEstimated = "heapscope.estimated"
	// AttrSampleRate is the sampling rate in bytes, when sampled.
	AttrSampleRate = "heapscope.sample_rate"
	// AttrLostEvents and AttrStacksLost are Interval.Lost and
	// Interval.StacksLost.
	AttrLostEvents = "heapscope.lost_events"
	AttrStacksLost = "heapscope.stacks_lost"
	// AttrLostFrom is set, to the RFC 3339 time Interval.LostFrom, when the
	// lost counts cover more than the interval.
	AttrLostFrom = "heapscope.lost_events.from"
)

// ScopeName is the instrumentation scope of the profiles.
const ScopeName = "heapscope"

// OTLP returns iv as OTLP profiles: one resource per process, four
// profiles each (see the package documentation). Note that pdata's
// marshalers (ProtoMarshaler, JSONMarshaler) rewrite the attribute keys of
// profiles they encode as dictionary references, in place, unless the
// profiles are read-only: call MarkReadOnly on profiles that are read
// after they are encoded.
func OTLP(iv *Interval, o Options) (pprofile.Profiles, error) {
	if err := iv.check(); err != nil {
		return pprofile.Profiles{}, err
	}
	t := newTable(iv, &o)
	w := newOTLPWriter()
	w.interval(iv, t, &o)
	return w.out, nil
}

// MarshalOTLP returns iv as one OTLP ExportProfilesServiceRequest in
// protobuf: the body of a POST to /v1development/profiles.
func MarshalOTLP(iv *Interval, o Options) ([]byte, error) {
	p, err := OTLP(iv, o)
	if err != nil {
		return nil, err
	}
	return (&pprofile.ProtoMarshaler{}).MarshalProfiles(p)
}

// WriteOTLP writes MarshalOTLP's bytes to w.
func WriteOTLP(w io.Writer, iv *Interval, o Options) error {
	b, err := MarshalOTLP(iv, o)
	if err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}

// check rejects what no writer can encode.
func (iv *Interval) check() error {
	if iv.End.Before(iv.Start) {
		return fmt.Errorf("export: interval ends (%s) before it starts (%s)", iv.End, iv.Start)
	}
	for i := range iv.Processes {
		for _, m := range iv.Processes[i].Mappings {
			if m.Limit < m.Start {
				return fmt.Errorf("export: process %d: mapping %s ends (%#x) before it starts (%#x)",
					iv.Processes[i].PID, m.File, m.Limit, m.Start)
			}
		}
	}
	return nil
}

// otlpWriter fills one Profiles message and its dictionary.
type otlpWriter struct {
	out     pprofile.Profiles
	dict    pprofile.ProfilesDictionary
	strs    map[string]int32
	funcs   map[funcKey]int32
	attrs   map[attrKey]int32
	native  int32 // the attribute profile.frame.type=native
	profIDs [4 * 16]byte
}

type funcKey struct{ name, file string }

// attrKey interns the attributes whose values repeat (mappings' build-ids).
type attrKey struct{ key, value string }

func newOTLPWriter() *otlpWriter {
	out := pprofile.NewProfiles()
	d := out.Dictionary()
	w := &otlpWriter{out: out, dict: d, strs: map[string]int32{}, funcs: map[funcKey]int32{}, attrs: map[attrKey]int32{}}
	// Index 0 of every table is the zero value, which references to
	// nothing point at.
	w.str("")
	d.MappingTable().AppendEmpty()
	d.LocationTable().AppendEmpty()
	d.FunctionTable().AppendEmpty()
	d.StackTable().AppendEmpty()
	d.LinkTable().AppendEmpty()
	d.AttributeTable().AppendEmpty()
	w.native = w.strAttr("profile.frame.type", "native")
	return w
}

func (w *otlpWriter) str(s string) int32 {
	if i, ok := w.strs[s]; ok {
		return i
	}
	i := int32(w.dict.StringTable().Len())
	w.dict.StringTable().Append(s)
	w.strs[s] = i
	return i
}

func (w *otlpWriter) strAttr(key, value string) int32 {
	k := attrKey{key, value}
	if i, ok := w.attrs[k]; ok {
		return i
	}
	i := int32(w.dict.AttributeTable().Len())
	a := w.dict.AttributeTable().AppendEmpty()
	a.SetKeyStrindex(w.str(key))
	a.Value().SetStr(value)
	w.attrs[k] = i
	return i
}

// attr adds an attribute that is not shared; unit may be "".
func (w *otlpWriter) attr(key, unit string) (int32, pcommon.Value) {
	i := int32(w.dict.AttributeTable().Len())
	a := w.dict.AttributeTable().AppendEmpty()
	a.SetKeyStrindex(w.str(key))
	if unit != "" {
		a.SetUnitStrindex(w.str(unit))
	}
	return i, a.Value()
}

func (w *otlpWriter) function(name, file string) int32 {
	k := funcKey{name, file}
	if i, ok := w.funcs[k]; ok {
		return i
	}
	ft := w.dict.FunctionTable()
	i := int32(ft.Len())
	f := ft.AppendEmpty()
	f.SetNameStrindex(w.str(name))
	f.SetSystemNameStrindex(f.NameStrindex())
	if file != "" {
		f.SetFilenameStrindex(w.str(file))
	}
	w.funcs[k] = i
	return i
}

// profileAttrs returns the attributes every profile of iv carries.
func (w *otlpWriter) profileAttrs(iv *Interval) []int32 {
	var ids []int32
	i, v := w.attr(AttrEstimated, "")
	v.SetBool(iv.SampleRate > 0)
	ids = append(ids, i)
	if iv.SampleRate > 0 {
		i, v = w.attr(AttrSampleRate, "bytes")
		v.SetInt(iv.SampleRate)
		ids = append(ids, i)
	}
	i, v = w.attr(AttrLostEvents, "count")
	v.SetInt(int64(iv.Lost))
	ids = append(ids, i)
	i, v = w.attr(AttrStacksLost, "count")
	v.SetInt(int64(iv.StacksLost))
	ids = append(ids, i)
	if !iv.LostFrom.IsZero() && !iv.LostFrom.Equal(iv.Start) {
		i, v = w.attr(AttrLostFrom, "")
		v.SetStr(iv.LostFrom.UTC().Format("2006-01-02T15:04:05.999999999Z07:00"))
		ids = append(ids, i)
	}
	return ids
}

func (w *otlpWriter) interval(iv *Interval, t *table, o *Options) {
	attrs := w.profileAttrs(iv)
	start := pcommon.NewTimestampFromTime(iv.Start)
	dur := uint64(max(iv.Duration(), 0))
	period := max(iv.SampleRate, 1)
	for i := range t.procs {
		pt := &t.procs[i]
		rp := w.out.ResourceProfiles().AppendEmpty()
		resourceAttrs(rp.Resource().Attributes(), iv, pt.p)
		sp := rp.ScopeProfiles().AppendEmpty()
		sp.Scope().SetName(ScopeName)
		sp.Scope().SetVersion(o.Version)

		stacks := w.stacks(pt)
		_, _ = rand.Read(w.profIDs[:])
		for k, st := range sampleTypes {
			prof := sp.Profiles().AppendEmpty()
			prof.SetProfileID(pprofile.ProfileID(w.profIDs[16*k : 16*k+16]))
			prof.SampleType().SetTypeStrindex(w.str(st.typ))
			prof.SampleType().SetUnitStrindex(w.str(st.unit))
			prof.PeriodType().SetTypeStrindex(w.str("space"))
			prof.PeriodType().SetUnitStrindex(w.str("bytes"))
			prof.SetPeriod(period)
			prof.SetTime(start)
			prof.SetDurationNano(dur)
			prof.AttributeIndices().FromRaw(attrs)
			samples := prof.Samples()
			samples.EnsureCapacity(len(pt.p.Stacks))
			for j := range pt.p.Stacks {
				v := value(&pt.p.Stacks[j], k)
				if v == 0 || stacks[j] == 0 {
					continue
				}
				s := samples.AppendEmpty()
				s.SetStackIndex(stacks[j])
				s.Values().Append(int64(v))
			}
		}
	}
}

// value is a stack's value of sample type k (see sampleTypes).
func value(s *Stack, k int) uint64 {
	switch k {
	case 0:
		return s.Allocs
	case 1:
		return s.AllocBytes
	case 2:
		return s.LiveObjects
	}
	return s.LiveBytes
}

// stacks writes a process's mappings, locations and stacks into the
// dictionary and returns the stack index of each of its Stacks (0: left out).
func (w *otlpWriter) stacks(pt *procTable) []int32 {
	mt := w.dict.MappingTable()
	mapIDs := make([]int32, len(pt.maps))
	for i := range mapIDs {
		mapIDs[i] = -1
	}
	mapping := func(i int32) int32 {
		if i < 0 {
			return 0
		}
		if mapIDs[i] < 0 {
			m := &pt.maps[i]
			mapIDs[i] = int32(mt.Len())
			pm := mt.AppendEmpty()
			pm.SetMemoryStart(m.Start)
			pm.SetMemoryLimit(m.Limit)
			pm.SetFileOffset(m.Offset)
			pm.SetFilenameStrindex(w.str(m.File))
			if m.BuildID != "" {
				pm.AttributeIndices().Append(w.strAttr("process.executable.build_id.gnu", m.BuildID))
			}
		}
		return mapIDs[i]
	}

	lt := w.dict.LocationTable()
	locIDs := make([]int32, len(pt.locs))
	lt.EnsureCapacity(lt.Len() + len(pt.locs))
	for i := range pt.locs {
		l := &pt.locs[i]
		locIDs[i] = int32(lt.Len())
		pl := lt.AppendEmpty()
		pl.SetAddress(l.addr)
		pl.SetMappingIndex(mapping(l.mapping))
		pl.AttributeIndices().Append(w.native)
		for _, f := range l.lines {
			ln := pl.Lines().AppendEmpty()
			ln.SetFunctionIndex(w.function(f.Function, f.File))
			ln.SetLine(int64(f.Line))
		}
	}

	st := w.dict.StackTable()
	st.EnsureCapacity(st.Len() + len(pt.stacks))
	out := make([]int32, len(pt.stacks))
	for j, ids := range pt.stacks {
		if ids == nil {
			continue
		}
		out[j] = int32(st.Len())
		s := st.AppendEmpty()
		li := s.LocationIndices()
		li.EnsureCapacity(len(ids))
		for _, id := range ids {
			li.Append(locIDs[id])
		}
	}
	return out
}

// resourceAttrs sets the resource attributes of process p, as
// OpenTelemetry's semantic conventions for processes, hosts and services
// name them.
func resourceAttrs(m pcommon.Map, iv *Interval, p *Process) {
	m.PutStr("service.name", p.ServiceName())
	m.PutInt("process.pid", int64(p.PID))
	if p.PPID != 0 {
		m.PutInt("process.parent_pid", int64(p.PPID))
	}
	if n := p.ExeName(); n != "" {
		m.PutStr("process.executable.name", n)
	}
	if p.Exe != "" {
		m.PutStr("process.executable.path", p.Exe)
		for _, mp := range p.Mappings {
			if mp.File == p.Exe && mp.BuildID != "" {
				m.PutStr("process.executable.build_id.gnu", mp.BuildID)
				break
			}
		}
	}
	if len(p.Cmdline) > 0 {
		m.PutStr("process.command_line", strings.Join(p.Cmdline, " "))
		args := m.PutEmptySlice("process.command_args")
		args.EnsureCapacity(len(p.Cmdline))
		for _, a := range p.Cmdline {
			args.AppendEmpty().SetStr(a)
		}
	}
	if iv.Host.Name != "" {
		m.PutStr("host.name", iv.Host.Name)
	}
	if iv.Host.ID != "" {
		m.PutStr("host.id", iv.Host.ID)
	}
	if iv.Host.Arch != "" {
		m.PutStr("host.arch", iv.Host.Arch)
	}
	m.PutStr("os.type", "linux")
}
