package export_test

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"
	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/heapscope/heapscope/export"
	"github.com/heapscope/heapscope/export/internal/exporttest"
	"github.com/heapscope/heapscope/internal/collector"
	"github.com/heapscope/heapscope/internal/testutil"
)

func TestMain(m *testing.M) { testutil.Main(m) }

// checkKnown compares per-function totals with report_known's.
func checkKnown(t *testing.T, got map[string]map[string]int64) {
	t.Helper()
	exporttest.Check(t, got)
	for _, typ := range []string{"inuse_objects", "inuse_space"} {
		for fn, v := range got[typ] {
			if _, ok := exporttest.Known[typ][fn]; !ok && v != 0 {
				t.Logf("also live at the end: %s %s %d", typ, fn, v)
			}
		}
	}
}

func TestOTLPKnown(t *testing.T) {
	iv, o, bin := exporttest.Interval(t)
	if len(iv.Processes) != 1 {
		t.Fatalf("%d processes", len(iv.Processes))
	}
	b, err := export.MarshalOTLP(iv, o)
	if err != nil {
		t.Fatal(err)
	}
	// Read back through pdata's own decoder, as a collector does.
	ps, err := (&pprofile.ProtoUnmarshaler{}).UnmarshalProfiles(b)
	if err != nil {
		t.Fatal(err)
	}
	if ps.ResourceProfiles().Len() != 1 {
		t.Fatalf("%d resources", ps.ResourceProfiles().Len())
	}
	totals, err := collector.Totals(ps)
	if err != nil {
		t.Fatal(err)
	}
	pid := int64(iv.Processes[0].PID)
	checkKnown(t, totals[pid])
	CheckResource(t, ps.ResourceProfiles().At(0).Resource().Attributes().AsRaw(), pid, bin)

	sp := ps.ResourceProfiles().At(0).ScopeProfiles().At(0)
	if sp.Scope().Name() != export.ScopeName || sp.Scope().Version() != "test" {
		t.Errorf("scope %q %q", sp.Scope().Name(), sp.Scope().Version())
	}
	if sp.Profiles().Len() != 4 {
		t.Fatalf("%d profiles", sp.Profiles().Len())
	}
	d := ps.Dictionary()
	for i := 0; i < 4; i++ {
		prof := sp.Profiles().At(i)
		attrs, err := pprofile.FromAttributeIndices(d.AttributeTable(), prof, d)
		if err != nil {
			t.Fatal(err)
		}
		raw := attrs.AsRaw()
		if raw[export.AttrEstimated] != false || raw[export.AttrLostEvents] != int64(0) {
			t.Errorf("profile %d attributes %v", i, raw)
		}
		if _, ok := raw[export.AttrSampleRate]; ok {
			t.Errorf("an exact trace with a sample rate: %v", raw)
		}
		if !prof.Time().AsTime().Equal(iv.Start) || prof.DurationNano() != uint64(iv.Duration()) {
			t.Errorf("profile %d time %v +%d, interval %v +%v", i, prof.Time().AsTime(), prof.DurationNano(), iv.Start, iv.Duration())
		}
	}
	// Every mapping with a build-id carries it, and the executable's is
	// the file's.
	found := false
	for i := 1; i < d.MappingTable().Len(); i++ {
		m := d.MappingTable().At(i)
		attrs, err := pprofile.FromAttributeIndices(d.AttributeTable(), m, d)
		if err != nil {
			t.Fatal(err)
		}
		if d.StringTable().At(int(m.FilenameStrindex())) == bin {
			found = attrs.AsRaw()["process.executable.build_id.gnu"] != nil
		}
	}
	if !found {
		t.Errorf("no mapping of %s with a build-id", bin)
	}
}

// CheckResource checks a process's resource attributes.
func CheckResource(t *testing.T, raw map[string]any, pid int64, bin string) {
	t.Helper()
	want := map[string]any{
		"process.pid":             pid,
		"process.executable.name": filepath.Base(bin),
		"process.executable.path": bin,
		"process.command_line":    bin + " 50",
		"process.command_args":    []any{bin, "50"},
		"host.name":               "testhost",
		"host.arch":               "amd64",
		"os.type":                 "linux",
		"service.name":            "unknown_service:" + filepath.Base(bin),
	}
	for k, v := range want {
		if !reflect.DeepEqual(raw[k], v) {
			t.Errorf("resource attribute %s = %#v, want %#v", k, raw[k], v)
		}
	}
	if id, _ := raw["process.executable.build_id.gnu"].(string); len(id) != 40 {
		t.Errorf("process.executable.build_id.gnu %v, want gcc's 20-byte SHA-1 in hex", raw["process.executable.build_id.gnu"])
	}
	if ppid, ok := raw["process.parent_pid"].(int64); !ok || ppid != int64(os.Getpid()) {
		t.Errorf("process.parent_pid %v, want %d", raw["process.parent_pid"], os.Getpid())
	}
}

// TestPprofKnown reads the pprof profile back with google/pprof's parser.
func TestPprofKnown(t *testing.T) {
	iv, o, bin := exporttest.Interval(t)
	var buf bytes.Buffer
	if err := export.WritePprof(&buf, iv, 0, o); err != nil {
		t.Fatal(err)
	}
	p, err := profile.Parse(&buf)
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, st := range p.SampleType {
		types = append(types, st.Type+"/"+st.Unit)
	}
	if strings.Join(types, " ") != "alloc_objects/count alloc_space/bytes inuse_objects/count inuse_space/bytes" {
		t.Errorf("sample types %v", types)
	}
	if p.Period != 1 || p.PeriodType.Type != "space" || p.TimeNanos != iv.Start.UnixNano() || p.DurationNanos != int64(iv.Duration()) {
		t.Errorf("period %d %v, time %d +%d", p.Period, p.PeriodType, p.TimeNanos, p.DurationNanos)
	}
	got := map[string]map[string]int64{}
	for _, s := range p.Sample {
		fn := ""
		for _, l := range s.Location {
			if len(l.Line) > 0 {
				fn = l.Line[0].Function.Name
				break
			}
		}
		for i, st := range p.SampleType {
			if got[st.Type] == nil {
				got[st.Type] = map[string]int64{}
			}
			got[st.Type][fn] += s.Value[i]
		}
	}
	checkKnown(t, got)
	exe := false
	for _, m := range p.Mapping {
		if m.File == bin && m.BuildID != "" {
			exe = true
		}
	}
	if !exe {
		t.Errorf("no mapping of %s with a build-id in %v", bin, p.Mapping)
	}
	if !strings.Contains(strings.Join(p.Comments, "\n"), "lost events: 0") {
		t.Errorf("comments %q", p.Comments)
	}
}

// TestAddressesOnly: without a resolver, every frame is a location with an
// address in its mapping and no lines, for a backend that symbolizes by
// build-id; the totals are the same.
func TestAddressesOnly(t *testing.T) {
	iv, _, _ := exporttest.Interval(t)
	ps, err := export.OTLP(iv, export.Options{})
	if err != nil {
		t.Fatal(err)
	}
	d := ps.Dictionary()
	if d.FunctionTable().Len() != 1 { // only the empty function 0
		t.Errorf("%d functions without a resolver", d.FunctionTable().Len())
	}
	unmapped := 0
	for i := 1; i < d.LocationTable().Len(); i++ {
		if d.LocationTable().At(i).MappingIndex() == 0 {
			unmapped++
		}
	}
	if unmapped > 0 {
		t.Errorf("%d of %d locations in no mapping", unmapped, d.LocationTable().Len()-1)
	}
	var sum, want int64
	prof := ps.ResourceProfiles().At(0).ScopeProfiles().At(0).Profiles().At(1) // alloc_space
	for i := 0; i < prof.Samples().Len(); i++ {
		sum += prof.Samples().At(i).Values().At(0)
	}
	for _, st := range iv.Processes[0].Stacks {
		want += int64(st.AllocBytes)
	}
	if sum != want || sum < exporttest.Known["alloc_space"]["peak_site"] {
		t.Errorf("alloc_space %d, want %d", sum, want)
	}
}

// TestEstimatedAndLost: a sampled interval is marked, and lost events are
// attributes, also when they cover more than the interval.
func TestEstimatedAndLost(t *testing.T) {
	start := time.Unix(1700000000, 0)
	iv := &export.Interval{
		Start: start, End: start.Add(10 * time.Second), SampleRate: 524288, Lost: 7, StacksLost: 2,
		LostFrom: start.Add(-time.Minute),
		Processes: []export.Process{{PID: 42, Exe: "/usr/bin/x", Stacks: []export.Stack{
			{Frames: []uint64{0x1000}, Allocs: 3, AllocBytes: 3 << 20, LiveObjects: 1, LiveBytes: 1 << 20},
			{}, // nothing: left out
			{Frames: nil, Allocs: 1, AllocBytes: 10},
		}}},
	}
	ps, err := export.OTLP(iv, export.Options{})
	if err != nil {
		t.Fatal(err)
	}
	d := ps.Dictionary()
	prof := ps.ResourceProfiles().At(0).ScopeProfiles().At(0).Profiles().At(0)
	attrs, err := pprofile.FromAttributeIndices(d.AttributeTable(), prof, d)
	if err != nil {
		t.Fatal(err)
	}
	raw := attrs.AsRaw()
	if raw[export.AttrEstimated] != true || raw[export.AttrSampleRate] != int64(524288) || raw[export.AttrLostEvents] != int64(7) ||
		raw[export.AttrStacksLost] != int64(2) || raw[export.AttrLostFrom] != "2023-11-14T22:12:20Z" {
		t.Errorf("attributes %v", raw)
	}
	if prof.Period() != 524288 || prof.Samples().Len() != 2 {
		t.Errorf("period %d, %d samples", prof.Period(), prof.Samples().Len())
	}
	totals, err := collector.Totals(ps)
	if err != nil {
		t.Fatal(err)
	}
	if totals[42]["alloc_objects"]["[no stack]"] != 1 || totals[42]["alloc_objects"][""] != 3 {
		t.Errorf("totals %v", totals)
	}
	// The inuse profiles hold only the stack that held memory.
	if n := ps.ResourceProfiles().At(0).ScopeProfiles().At(0).Profiles().At(3).Samples().Len(); n != 1 {
		t.Errorf("%d inuse_space samples", n)
	}
	bad := *iv
	bad.End = start.Add(-time.Second)
	if _, err := export.OTLP(&bad, export.Options{}); err == nil {
		t.Error("an interval that ends before it starts was encoded")
	}
}
