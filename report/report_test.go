package report

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/heapscope/heapscope/analyze"
	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/symbolize"
)

// table resolves addresses from a fixed table, as a symbolizer would for a
// program whose symbols are known: the renderers' tests need exact frames.
type table map[uint64][]symbolize.Frame

func (t table) Frames(pid uint32, addr uint64) []symbolize.Frame {
	if fs, ok := t[addr]; ok {
		out := append([]symbolize.Frame(nil), fs...)
		for i := range out {
			out[i].Address = addr
		}
		return out
	}
	return []symbolize.Frame{{Address: addr}}
}

const (
	libc = "/lib/x86_64-linux-gnu/libc.so.6"
	exe  = "/usr/bin/app"
	pre  = "/tmp/x/libheapscope-preload.so"
)

var frames = table{
	0x7000: {{Function: "__libc_malloc", File: "malloc.c", Line: 3300, Module: libc, Offset: 0x7000}},
	0x7100: {{Function: "tcache_get", File: "malloc.c", Line: 3200, Module: libc, Offset: 0x7100, Inlined: true},
		{Function: "__libc_calloc", File: "malloc.c", Line: 3700, Module: libc, Offset: 0x7100}},
	0x7200: {{Function: "__strdup", File: "strdup.c", Line: 42, Module: libc, Offset: 0x7200}},
	0x9000: {{Function: "malloc", Module: pre, Offset: 0x9000}},
	0x1010: {{Function: "make_node", File: "app.c", Line: 10, Module: exe, Offset: 0x1010, Inlined: true},
		{Function: "build", File: "app.c", Line: 20, Module: exe, Offset: 0x1010}},
	0x1020: {{Function: "main", File: "app.c", Line: 30, Module: exe, Offset: 0x1020}},
	0x1030: {{Function: "copy_name", File: "app.c", Line: 40, Module: exe, Offset: 0x1030}},
	0x1040: {{Function: "temp_buffers", File: "app.c", Line: 50, Module: exe, Offset: 0x1040}},
}

func TestTrimAllocator(t *testing.T) {
	f := func(addrs ...uint64) []symbolize.Frame {
		var out []symbolize.Frame
		for _, a := range addrs {
			out = append(out, frames.Frames(1, a)...)
		}
		return out
	}
	for _, c := range []struct {
		name  string
		in    []symbolize.Frame
		first string
		n     int
	}{
		{"already the caller", f(0x1010, 0x1020), "make_node", 3},
		{"malloc on top", f(0x7000, 0x1010, 0x1020), "make_node", 3},
		{"inlined libc internals above calloc", f(0x7100, 0x1020), "main", 1},
		{"interposer then libc", f(0x9000, 0x7000, 0x1030, 0x1020), "copy_name", 2},
		{"libc caller stays", f(0x7000, 0x7200, 0x1030, 0x1020), "__strdup", 3},
		{"libc caller without malloc frame stays", f(0x7200, 0x1030), "__strdup", 2},
		{"operator new", []symbolize.Frame{{Function: "operator new(unsigned long)", Module: "/usr/lib/libstdc++.so.6"},
			{Function: "std::vector<int>::reserve", Module: "/usr/lib/libstdc++.so.6"}, {Function: "main", Module: exe}}, "std::vector<int>::reserve", 2},
		{"mangled new", []symbolize.Frame{{Function: "_Znwm"}, {Function: "main", Module: exe}}, "main", 1},
		{"rust", []symbolize.Frame{{Function: "malloc", Module: "/usr/lib/x86_64-linux-gnu/libc.so.6"},
			{Function: "alloc::alloc::alloc_zeroed", Module: exe}, {Function: "<alloc::alloc::Global>::alloc_impl", Module: exe},
			{Function: "<alloc::alloc::Global as core::alloc::Allocator>::allocate_zeroed", Module: exe},
			{Function: "alloc::raw_vec::RawVecInner<A>::try_allocate_in", Module: exe}, {Function: "rsmain::build", Module: exe}},
			"alloc::raw_vec::RawVecInner<A>::try_allocate_in", 2},
		{"std::allocator", []symbolize.Frame{{Function: "operator new(unsigned long)", Module: "/usr/lib/libstdc++.so.6"},
			{Function: "std::__new_allocator<int>::allocate(unsigned long, void const*)", Module: exe},
			{Function: "std::allocator_traits<std::allocator<int> >::allocate(std::allocator<int>&, unsigned long)", Module: exe},
			{Function: "std::_Vector_base<int, std::allocator<int> >::_M_allocate(unsigned long)", Module: exe}, {Function: "make(int)", Module: exe}},
			"std::_Vector_base<int, std::allocator<int> >::_M_allocate(unsigned long)", 2},
		{"nothing outside", f(0x7000), "", 0},
	} {
		got := symbolize.TrimAllocator(c.in)
		first := ""
		if len(got) > 0 {
			first = got[0].Function
		}
		if first != c.first || len(got) != c.n {
			t.Errorf("%s: got %d frames starting %q, want %d starting %q", c.name, len(got), first, c.n, c.first)
		}
	}
}

// testProfile runs a real model over a small program's events:
//
//	build (make_node inlined) allocates 3 nodes of 100 bytes from main; one leaks;
//	copy_name strdups 2 names of 10, in process 2 and process 3; one leaks;
//	temp_buffers mallocs and frees 4 buffers of 50 right away.
//
// Process 3 frees its name right after making it: a temporary too.
func testProfile(t *testing.T) *analyze.Profile {
	m := analyze.New(analyze.Options{})
	for _, pid := range []uint32{2, 3} {
		must(t, m.Process(event.Process{PID: pid, Time: 1000, Exe: exe, Cmdline: []string{"app", "-x"}}))
		must(t, m.Module(event.Module{PID: pid, Start: 0x1000, End: 0x2000, Path: exe, BuildID: "abcd"}))
		must(t, m.Module(event.Module{PID: pid, Start: 0x7000, End: 0x8000, Path: libc}))
	}
	// Stacks 1 and 2 differ only inside the allocator: one site.
	must(t, m.Stack(event.Stack{PID: 2, ID: 1, Frames: []uint64{0x7000, 0x1010, 0x1020}}))
	must(t, m.Stack(event.Stack{PID: 2, ID: 2, Frames: []uint64{0x9000, 0x1010, 0x1020}}))
	must(t, m.Stack(event.Stack{PID: 2, ID: 3, Frames: []uint64{0x7000, 0x7200, 0x1030, 0x1020}}))
	must(t, m.Stack(event.Stack{PID: 3, ID: 7, Frames: []uint64{0x7000, 0x7200, 0x1030, 0x1020}}))
	must(t, m.Stack(event.Stack{PID: 2, ID: 4, Frames: []uint64{0x1040, 0x1020}}))
	tm := int64(1000)
	ev := func(pid uint32, k event.Kind, stack event.StackID, addr, size uint64) event.Event {
		tm += 1e6
		return event.Event{Time: tm, PID: pid, TID: pid, Kind: k, Stack: stack, Addr: addr, Size: size}
	}
	evs := []event.Event{
		ev(2, event.KindAlloc, 1, 0xa0, 100),
		ev(2, event.KindAlloc, 2, 0xa1, 100),
		ev(2, event.KindAlloc, 1, 0xa2, 100),
		ev(2, event.KindAlloc, 3, 0xb0, 10),
		ev(3, event.KindAlloc, 7, 0xb0, 10),
		ev(2, event.KindFree, 0, 0xa0, 0),
		ev(2, event.KindFree, 0, 0xa1, 0),
		ev(3, event.KindFree, 0, 0xb0, 0),
	}
	for i := 0; i < 4; i++ {
		evs = append(evs, ev(2, event.KindAlloc, 4, 0xc0, 50), ev(2, event.KindFree, 0, 0xc0, 0))
	}
	evs = append(evs, ev(2, event.KindFree, 0, 0xdead, 0))
	must(t, m.Events(evs))
	must(t, m.Exit(event.Exit{PID: 2, Time: tm + 1e6, Status: 0}))
	must(t, m.Exit(event.Exit{PID: 3, Time: tm + 1e6, Status: -1}))
	must(t, m.Stats(event.Stats{Time: tm, Delivered: uint64(len(evs)), Lost: [event.NumLostReasons]uint64{event.LostRingFull: 5}, StacksLost: 2}))
	return m.Profile()
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

var testTrace = Trace{File: "app.hst", Session: "s1", Provider: "preload", Start: 1000,
	WallStart: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), Warnings: []string{"file cut at byte 9"}}

func siteStarting(t *testing.T, r *Report, fn string) *Site {
	t.Helper()
	for _, s := range r.Sites {
		if st := s.Stack(); len(st) > 0 && st[0].Function == fn {
			return s
		}
	}
	t.Fatalf("no site starts with %s", fn)
	return nil
}

func TestMergeSites(t *testing.T) {
	r := New(testProfile(t), testTrace, frames)
	if len(r.Sites) != 3 {
		t.Fatalf("%d sites, want 3", len(r.Sites))
	}
	b := siteStarting(t, r, "make_node")
	if b.Allocations != 3 || b.Bytes != 300 || b.LiveBytes != 100 || b.LiveBlocks != 1 || b.PeakBytes != 300 || len(b.Stack()) != 3 {
		t.Errorf("build site %+v", b)
	}
	c := siteStarting(t, r, "__strdup")
	if !reflect.DeepEqual(c.PIDs, []uint32{2, 3}) || c.Allocations != 2 || c.LiveBytes != 10 || c.Frees != 1 {
		t.Errorf("strdup site %+v", c)
	}
	tmp := siteStarting(t, r, "temp_buffers")
	if tmp.Temporary != 4 || tmp.Allocations != 4 || tmp.PeakBytes != 0 {
		t.Errorf("temp site %+v", tmp)
	}
}

func TestJSON(t *testing.T) {
	r := New(testProfile(t), testTrace, frames)
	var buf bytes.Buffer
	must(t, r.WriteJSON(&buf, 0))

	// The schema the issue fixes, key by key.
	var doc map[string]any
	must(t, json.Unmarshal(buf.Bytes(), &doc))
	want := map[string][]string{
		"trace":   {"file", "session", "provider", "pids", "duration_ns", "events", "lost_events"},
		"summary": {"allocations", "reallocations", "frees", "bytes_allocated", "peak_bytes", "peak_time_ns", "leaked_bytes", "leaked_blocks", "temporary_allocations", "unmatched_frees"},
	}
	if doc["version"] != float64(1) {
		t.Errorf("version %v", doc["version"])
	}
	for obj, keys := range want {
		m, _ := doc[obj].(map[string]any)
		for _, k := range keys {
			if _, ok := m[k]; !ok {
				t.Errorf("%s has no %q", obj, k)
			}
		}
	}
	lists := map[string][]string{
		"leaks":       {"bytes", "blocks", "stack"},
		"peak":        {"bytes", "blocks", "stack"},
		"allocations": {"allocations", "bytes", "temporary", "stack"},
		"histogram":   {"le", "count"},
		"timeline":    {"t_ns", "live_bytes", "live_blocks"},
	}
	for name, keys := range lists {
		l, _ := doc[name].([]any)
		if len(l) == 0 {
			t.Errorf("%s is empty", name)
			continue
		}
		for _, k := range keys {
			if _, ok := l[0].(map[string]any)[k]; !ok {
				t.Errorf("%s[0] has no %q", name, k)
			}
		}
	}
	frame := doc["leaks"].([]any)[0].(map[string]any)["stack"].([]any)[0].(map[string]any)
	for _, k := range []string{"function", "file", "line", "module", "address"} {
		if _, ok := frame[k]; !ok {
			t.Errorf("frame has no %q", k)
		}
	}

	// The values.
	var d JSON
	must(t, json.Unmarshal(buf.Bytes(), &d))
	s := d.Summary
	if s.Allocations != 9 || s.Reallocations != 0 || s.Frees != 7 || s.BytesAllocated != 520 ||
		s.LeakedBytes != 110 || s.LeakedBlocks != 2 || s.TemporaryAllocations != 5 || s.UnmatchedFrees != 1 {
		t.Errorf("summary %+v", s)
	}
	// Peak: 3 nodes and 2 names = 320 bytes, first reached by the 5th event.
	if s.PeakBytes != 320 || s.PeakTimeNs != 5e6 {
		t.Errorf("peak %d at %d", s.PeakBytes, s.PeakTimeNs)
	}
	if d.Trace.File != "app.hst" || d.Trace.LostEvents != 5 || d.Trace.Events != 17 || !reflect.DeepEqual(d.Trace.PIDs, []uint32{2, 3}) ||
		d.Trace.DurationNs != 18e6 {
		t.Errorf("trace %+v", d.Trace)
	}
	if len(d.Leaks) != 2 || d.Leaks[0].Bytes != 100 || d.Leaks[0].Stack[0].Function != "make_node" ||
		d.Leaks[0].Stack[0].Address != "0x1010" || d.Leaks[0].Stack[0].File != "app.c" || d.Leaks[0].Stack[0].Line != 10 ||
		d.Leaks[0].Stack[0].Module != exe {
		t.Errorf("leaks %+v", d.Leaks)
	}
	if len(d.Peak) != 2 || d.Peak[0].Bytes != 300 || d.Peak[1].Bytes != 20 {
		t.Errorf("peak %+v", d.Peak)
	}
	if len(d.Allocations) != 3 || d.Allocations[0].Stack[0].Function != "make_node" && d.Allocations[0].Allocations != 4 {
		t.Errorf("allocations %+v", d.Allocations)
	}
	if len(d.Histogram) != 8 || d.Histogram[7].Le != 128 || d.Histogram[7].Count != 3 || d.Histogram[6].Count != 4 || d.Histogram[4].Count != 2 {
		t.Errorf("histogram %+v", d.Histogram)
	}
	if d.Stats == nil || d.Stats.Lost["ring_full"] != 5 || d.Stats.StacksLost != 2 {
		t.Errorf("stats %+v", d.Stats)
	}
	if len(d.Warnings) != 1 || len(d.Limitations) != 0 {
		t.Errorf("warnings %q limitations %q", d.Warnings, d.Limitations)
	}

	// --top limits each list.
	buf.Reset()
	must(t, r.WriteJSON(&buf, 1))
	var d1 JSON
	must(t, json.Unmarshal(buf.Bytes(), &d1))
	if len(d1.Leaks) != 1 || len(d1.Peak) != 1 || len(d1.Allocations) != 1 || d1.Allocations[0].Allocations != 4 {
		t.Errorf("top 1: %d leaks, %d peak, %d allocations %+v", len(d1.Leaks), len(d1.Peak), len(d1.Allocations), d1.Allocations)
	}
}

func TestText(t *testing.T) {
	r := New(testProfile(t), testTrace, frames)
	var buf bytes.Buffer
	must(t, r.WriteText(&buf, TextOptions{Top: 2}))
	out := buf.String()
	for _, want := range []string{
		"heapscope report of app.hst (session \"s1\", provider preload",
		"process 2: app -x (exit status 0)\n    8 calls, 510 B allocated, 110 B leaked in 2 blocks, 310 B live at the peak\n",
		"process 3: app -x (ended, status unknown: not heapscope's child)",
		"allocation calls       9",
		"peak heap              320 B in 5 blocks at 5.000ms",
		"leaked                 110 B in 2 blocks",
		"temporary              5 (55.6% of allocation calls)",
		"unmatched frees        1",
		"lost events            5 (5 ring_full) of 22",
		"stacks lost            2",
		"LEAKS (still live at the end): 2 sites",
		"100 B leaked in 1 block from pid 2:\n      make_node  app.c:10  in app  (inlined)\n      build  app.c:20  in app\n      main  app.c:30  in app\n",
		"10 B leaked in 1 block from pids 2, 3:\n      __strdup  strdup.c:42  in libc.so.6\n",
		"PEAK CONSUMERS (live at the peak, 320 B at 5.000ms): 2 sites",
		"300 B (93.8%) in 3 blocks at the peak from",
		"MOST ALLOCATION CALLS: top 2 of 3 sites",
		"4 calls, 200 B allocated, 4 temporary from",
		"MOST TEMPORARY ALLOCATIONS (freed by the next heap call of the thread that made them): 2 sites",
		"4 temporary of 4 allocations (100.0%) from",
		"ALLOCATION SIZES",
		"WARNINGS\n  file cut at byte 9",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("text lacks %q", want)
		}
	}
	if strings.Contains(out, "__libc_malloc") || strings.Contains(out, "libheapscope") {
		t.Errorf("allocator frames left in:\n%s", out)
	}
	if t.Failed() {
		t.Logf("text:\n%s", out)
	}
}

func TestCollapsed(t *testing.T) {
	r := New(testProfile(t), testTrace, frames)
	for m, want := range map[Metric]string{
		AllocSpace:   "main;build;make_node 300\nmain;copy_name;__strdup 20\nmain;temp_buffers 200\n",
		AllocObjects: "main;build;make_node 3\nmain;copy_name;__strdup 2\nmain;temp_buffers 4\n",
		InuseSpace:   "main;build;make_node 100\nmain;copy_name;__strdup 10\n",
		InuseObjects: "main;build;make_node 1\nmain;copy_name;__strdup 1\n",
		Temporary:    "main;copy_name;__strdup 1\nmain;temp_buffers 4\n",
		PeakSpace:    "main;build;make_node 300\nmain;copy_name;__strdup 20\n",
	} {
		var buf bytes.Buffer
		must(t, r.WriteCollapsed(&buf, m))
		if buf.String() != want {
			t.Errorf("%v:\n%s\nwant\n%s", m, buf.String(), want)
		}
		if p, err := ParseMetric(m.String()); err != nil || p != m {
			t.Errorf("ParseMetric(%q) = %v, %v", m, p, err)
		}
	}
	if _, err := ParseMetric("cpu"); err == nil {
		t.Error("ParseMetric accepted cpu")
	}
}

func TestPprof(t *testing.T) {
	r := New(testProfile(t), testTrace, frames)
	var buf bytes.Buffer
	must(t, r.WritePprof(&buf))
	p, err := profile.Parse(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	must(t, p.CheckValid())
	var types []string
	for _, st := range p.SampleType {
		types = append(types, st.Type+"/"+st.Unit)
	}
	if want := "alloc_objects/count alloc_space/bytes inuse_objects/count inuse_space/bytes"; strings.Join(types, " ") != want {
		t.Errorf("sample types %v", types)
	}
	var tot [4]int64
	for _, s := range p.Sample {
		for i, v := range s.Value {
			tot[i] += v
		}
		if len(s.NumLabel["pid"]) != 1 {
			t.Errorf("sample without pid label")
		}
	}
	if tot != [4]int64{9, 520, 2, 110} {
		t.Errorf("totals %v", tot)
	}
	// Per pid: one sample per stack, the two allocator variants included.
	if len(p.Sample) != 5 {
		t.Errorf("%d samples, want 5", len(p.Sample))
	}
	// make_node inlined into build: one location, two lines, innermost first.
	found := false
	for _, l := range p.Location {
		if l.Address == 0x1010 {
			found = true
			if len(l.Line) != 2 || l.Line[0].Function.Name != "make_node" || l.Line[1].Function.Name != "build" ||
				l.Line[0].Line != 10 || l.Mapping == nil || l.Mapping.File != exe || l.Mapping.BuildID != "abcd" {
				t.Errorf("location %v", l)
			}
		}
		for _, ln := range l.Line {
			if strings.Contains(ln.Function.Name, "malloc") {
				t.Errorf("allocator frame %s kept", ln.Function.Name)
			}
		}
	}
	if !found {
		t.Error("no location at 0x1010")
	}
	if p.TimeNanos != testTrace.WallStart.UnixNano() {
		t.Errorf("time %d", p.TimeNanos)
	}

	// go tool pprof opens it.
	file := filepath.Join(t.TempDir(), "heap.pb.gz")
	must(t, os.WriteFile(file, buf.Bytes(), 0o644))
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to check that go tool pprof opens the profile: %v", err)
	}
	for _, idx := range []string{"alloc_space", "inuse_space"} {
		out, err := exec.Command(goTool, "tool", "pprof", "-top", "-sample_index="+idx, file).CombinedOutput()
		if err != nil {
			t.Fatalf("go tool pprof: %v\n%s", err, out)
		}
		want := map[string]string{"alloc_space": "temp_buffers", "inuse_space": "make_node"}[idx]
		if !strings.Contains(string(out), want) {
			t.Errorf("pprof -top -sample_index=%s:\n%s", idx, out)
		}
	}
}

func TestNoResolver(t *testing.T) {
	// Without a symbolizer, frames are module+offset from the module records.
	r := New(testProfile(t), Trace{}, nil)
	var names []string
	for _, s := range r.Sites {
		if st := s.Stack(); len(st) > 0 {
			names = append(names, st[0].Name())
		}
	}
	sort.Strings(names)
	// Nothing is trimmed: without names, allocator frames are not known;
	// 0x9000 is in no module.
	want := []string{"0x9000", "app+0x40", "libc.so.6+0x0", "libc.so.6+0x0"}
	if !reflect.DeepEqual(names, want) {
		t.Errorf("names %q, want %q", names, want)
	}
	var buf bytes.Buffer
	must(t, r.WriteText(&buf, TextOptions{}))
	must(t, r.WritePprof(&buf))
}

func TestAggregateSaysWhatItLacks(t *testing.T) {
	m := analyze.New(analyze.Options{})
	must(t, m.Stack(event.Stack{PID: 4, ID: 1, Frames: []uint64{0x1010, 0x1020}}))
	must(t, m.Snapshot(event.Snapshot{PID: 4, Time: 2e9, Final: true,
		Live:   []event.LiveBlock{{Addr: 0x10, Size: 64, Stack: 1, Time: 1e9}},
		Totals: []event.StackTotal{{Stack: 1, Allocs: 5, AllocBytes: 320, Frees: 4, FreeBytes: 256}}}))
	r := New(m.Profile(), Trace{File: "agg.hst", Start: 1e9}, frames)

	var buf bytes.Buffer
	must(t, r.WriteText(&buf, TextOptions{}))
	out := buf.String()
	for _, want := range []string{
		"This trace holds snapshots (aggregate mode), not every event, so this report has:",
		"no peak instant",
		"peak heap              at least 64 B in 1 block at 1.000s (largest at a snapshot)",
		"temporary              unknown (aggregate trace)",
		"ALLOCATION SIZES: not recorded in an aggregate trace",
		"64 B leaked in 1 block from:\n      make_node",
		"5 calls, 320 B allocated, temporary unknown from:",
		"reallocations        unknown",
		"failed               unknown",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("text lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "MOST TEMPORARY") {
		t.Errorf("aggregate text has a temporaries section:\n%s", out)
	}

	buf.Reset()
	must(t, r.WriteJSON(&buf, 0))
	var d JSON
	must(t, json.Unmarshal(buf.Bytes(), &d))
	if !d.Trace.Aggregate || len(d.Limitations) == 0 || len(d.Histogram) != 0 || d.Summary.LeakedBytes != 64 ||
		d.Summary.Allocations != 5 || d.Summary.Frees != 4 || len(d.Leaks) != 1 {
		t.Errorf("aggregate JSON %+v", d)
	}
	if err := r.WriteCollapsed(&buf, Temporary); err == nil {
		t.Error("collapsed temporaries of an aggregate trace: no error")
	}
	for _, f := range []string{"summary.temporary_allocations", "allocations[].temporary", "allocations[].reallocations", "summary.failed_allocations"} {
		if !strings.Contains(strings.Join(d.Unknown, " "), f) {
			t.Errorf("JSON unknown %q lacks %s", d.Unknown, f)
		}
	}
}

func TestShortName(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"main", "main"},
		{"std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> >::_M_mutate(unsigned long, unsigned long, char const*, unsigned long)",
			"std::__cxx11::basic_string<…>::_M_mutate(unsigned long, unsigned long, char const*, unsigned long)"},
		{"void std::vector<int, std::allocator<int> >::_M_realloc_insert<int const&>(__gnu_cxx::__normal_iterator<int*, std::vector<int, std::allocator<int> > >, int const&)",
			"void std::vector<…>::_M_realloc_insert<…>(__gnu_cxx::__normal_iterator<…>, int const&)"},
		{"bool operator< <Foo>(Foo const&, Foo const&)", "bool operator< <…>(Foo const&, Foo const&)"},
		{"std::ostream::operator<<(int)", "std::ostream::operator<<(int)"},
		{"Ptr<Node>::operator->() const", "Ptr<…>::operator->() const"},
		{"operator>>=(A&, int)", "operator>>=(A&, int)"},
		{"broken<name", "broken<name"},
	} {
		if got := ShortName(c.in); got != c.want {
			t.Errorf("ShortName(%q)\n = %q\nwant %q", c.in, got, c.want)
		}
	}
}

// TestLabels: the text and JSON say what temporary means and how heaptrack
// differs, name the possible causes of unmatched frees from what the trace
// knows, and shorten C++ names unless asked for them whole.
func TestLabels(t *testing.T) {
	r := New(testProfile(t), Trace{File: "app.hst", Provider: "preload", Start: 1e9,
		Properties: map[string]string{"enable_flags": "malloc,free"}}, frames)
	causes := strings.Join(r.UnmatchedCauses(), "; ")
	for _, want := range []string{"where the interposer was not called", "the 5 events lost", "allocation functions not traced (only malloc,free were)"} {
		if !strings.Contains(causes, want) {
			t.Errorf("unmatched causes %q lack %q", causes, want)
		}
	}
	// A trace of this version names the families as Properties does.
	rn := New(testProfile(t), Trace{Provider: "preload", Properties: map[string]string{"families": "malloc,free"}}, frames)
	if c := strings.Join(rn.UnmatchedCauses(), "; "); !strings.Contains(c, "only malloc,free were") {
		t.Errorf("with families: unmatched causes %q", c)
	}
	var buf bytes.Buffer
	must(t, r.WriteText(&buf, TextOptions{}))
	out := buf.String()
	for _, want := range []string{
		"temporary              5 (55.6% of allocation calls): freed by the next heap call of the thread that made them\n",
		"(heaptrack's count: 5, a free right after an allocation of the same stack and size, of any",
		"unmatched frees        1, frees of blocks heapscope did not see made; possible causes:\n",
		"- allocations among the 5 events lost",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("text lacks %q:\n%s", want, out)
		}
	}
	buf.Reset()
	must(t, r.WriteJSON(&buf, 0))
	var d JSON
	must(t, json.Unmarshal(buf.Bytes(), &d))
	if !strings.Contains(d.Definitions["temporary"], "heaptrack") || d.Definitions["unmatched_frees"] == "" ||
		len(d.UnmatchedFreeCauses) != len(r.UnmatchedCauses()) || d.Unknown == nil || len(d.Unknown) != 0 {
		t.Errorf("JSON definitions %q, causes %q, unknown %q", d.Definitions, d.UnmatchedFreeCauses, d.Unknown)
	}
	// A window and an eBPF trace.
	p := testProfile(t)
	p.From = 2000 // as a window from there would
	p.Processes[1].PPID = 2
	r = New(p, Trace{File: "app.hst", Provider: "ebpf"}, frames)
	causes = strings.Join(r.UnmatchedCauses(), "; ")
	if !strings.Contains(causes, "before the window") || !strings.Contains(causes, "attached to a running process") ||
		!strings.Contains(causes, "forked child (pid 3) inherited") {
		t.Errorf("window, ebpf: causes %q", causes)
	}
	// A program run with the eBPF provider: traced from its first
	// instruction, it had no block before tracing.
	r = New(testProfile(t), Trace{File: "app.hst", Provider: "ebpf", Properties: map[string]string{"launched": "true"}}, frames)
	if causes = strings.Join(r.UnmatchedCauses(), "; "); strings.Contains(causes, "attached") || !strings.Contains(causes, "probes were not called") {
		t.Errorf("launched, ebpf: causes %q", causes)
	}
}

// TestJSONStreamMatchesDocument checks that the streamed JSON is the
// document Document builds.
func TestJSONStreamMatchesDocument(t *testing.T) {
	r := New(testProfile(t), testTrace, frames)
	for _, top := range []int{0, 1, 2} {
		var buf bytes.Buffer
		must(t, r.WriteJSON(&buf, top))
		var streamed JSON
		must(t, json.Unmarshal(buf.Bytes(), &streamed))
		a, err := json.Marshal(&streamed)
		must(t, err)
		b, err := json.Marshal(r.Document(top))
		must(t, err)
		if !bytes.Equal(a, b) {
			t.Errorf("top %d: streamed JSON differs from Document:\n%s\n%s", top, a, b)
		}
	}
}

func TestAppendString(t *testing.T) {
	for _, s := range []string{"", "plain", `q"uote`, `back\slash`, "new\nline\ttab\rcr", "\x00\x01\x1f\x7f",
		"ünïcödé ✓ 𝄞", "bad \xff utf8 \xc3", "operator<<(std::ostream&, T const&)"} {
		var got, want string
		if err := json.Unmarshal(appendString(nil, s), &got); err != nil {
			t.Errorf("%q: %v (%s)", s, err, appendString(nil, s))
			continue
		}
		enc, _ := json.Marshal(s)
		must(t, json.Unmarshal(enc, &want))
		if got != want {
			t.Errorf("%q: decoded %q, encoding/json gives %q", s, got, want)
		}
	}
}

func TestTextBrief(t *testing.T) {
	r := New(testProfile(t), testTrace, frames)
	var buf bytes.Buffer
	must(t, r.WriteText(&buf, TextOptions{Brief: true, Top: 1, MaxFrames: 1}))
	out := buf.String()
	for _, want := range []string{
		"SUMMARY",
		"LEAKS (still live at the end): top 1 of 2 sites",
		"100 B leaked in 1 block from pid 2:\n      make_node  app.c:10  in app  (inlined)\n      … 2 more frames",
		"PEAK CONSUMERS (live at the peak, 320 B at 5.000ms): top 1 of 2 sites",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("brief text lacks %q", want)
		}
	}
	for _, not := range []string{"MOST ALLOCATION CALLS", "ALLOCATION SIZES", "build  app.c:20"} {
		if strings.Contains(out, not) {
			t.Errorf("brief text has %q", not)
		}
	}
	if t.Failed() {
		t.Logf("text:\n%s", out)
	}
}

// TestCutNoteDepth: a stack as deep as the depth limit asks for a larger
// --max-frames, unless the limit is already the largest heapscope has.
func TestCutNoteDepth(t *testing.T) {
	deep := func(n int) *Report {
		fr := make([]uint64, n)
		for i := range fr {
			fr[i] = 0x5000 + uint64(i)*16
		}
		p := &analyze.Profile{Stacks: []analyze.Stack{{PID: 1, ID: 1, Frames: fr, Counters: analyze.Counters{Allocations: 1, Bytes: 10}}}}
		return New(p, Trace{}, frames)
	}
	if note := deep(8).CutNote("tables", 8); !strings.Contains(note, "raise --max-frames (up to 127)") {
		t.Errorf("limit 8: %q", note)
	}
	note := deep(127).CutNote("tables", 127)
	if strings.Contains(note, "raise --max-frames") || !strings.Contains(note, "the most heapscope records") {
		t.Errorf("limit 127: %q", note)
	}
}
