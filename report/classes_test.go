package report

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/heapscope/heapscope/analyze"
	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/suppress"
)

// checkedProfile is testProfile's program with a leak check of process 2
// at its exit: of make_node's live block, definitely lost; of copy_name's,
// still reachable.
func checkedProfile(t *testing.T) *analyze.Profile {
	m := analyze.New(analyze.Options{})
	must(t, m.Process(event.Process{PID: 2, Time: 1000, Exe: exe}))
	must(t, m.Module(event.Module{PID: 2, Start: 0x1000, End: 0x2000, Path: exe}))
	must(t, m.Module(event.Module{PID: 2, Start: 0x7000, End: 0x8000, Path: libc}))
	must(t, m.Stack(event.Stack{PID: 2, ID: 1, Frames: []uint64{0x7000, 0x1010, 0x1020}}))
	must(t, m.Stack(event.Stack{PID: 2, ID: 3, Frames: []uint64{0x7000, 0x7200, 0x1030, 0x1020}}))
	must(t, m.Stack(event.Stack{PID: 2, ID: 4, Frames: []uint64{0x1040, 0x1020}}))
	must(t, m.Events([]event.Event{
		{Time: 2000, PID: 2, TID: 2, Kind: event.KindAlloc, Stack: 1, Addr: 0xa0, Size: 100},
		{Time: 3000, PID: 2, TID: 2, Kind: event.KindAlloc, Stack: 1, Addr: 0xa1, Size: 100},
		{Time: 4000, PID: 2, TID: 2, Kind: event.KindAlloc, Stack: 3, Addr: 0xb0, Size: 10},
		{Time: 5000, PID: 2, TID: 2, Kind: event.KindAlloc, Stack: 4, Addr: 0xc0, Size: 50},
	}))
	must(t, m.Note(event.Verdict{PID: 2, Time: 6000, Rules: event.RulesMemcheck, Pause: 4e6, Elapsed: 9e6, Complete: true, AtExit: true,
		Blocks: []event.BlockClass{{Addr: 0xa0, Class: event.ClassDefinite}, {Addr: 0xa1, Class: event.ClassIndirect},
			{Addr: 0xb0, Class: event.ClassReachable}, {Addr: 0xc0, Class: event.ClassPossible}}}))
	must(t, m.Exit(event.Exit{PID: 2, Time: 7000}))
	return m.Profile()
}

func TestLeakCheckedText(t *testing.T) {
	r := New(checkedProfile(t), testTrace, frames)
	var b strings.Builder
	must(t, r.WriteText(&b, TextOptions{}))
	out := b.String()
	for _, want := range []string{
		"LEAKS (definitely and indirectly lost: no pointer to them remains; leak check of pid 2 at exit, held 4.000ms, Memcheck's rules): 1 site",
		"200 B lost in 2 blocks (definitely 100 B in 1, indirectly 100 B in 1) from:",
		"POSSIBLY LOST (only pointers into their interior remain",
		"[possibly lost] 50 B in 1 block from:",
		"STILL REACHABLE (a pointer to their start remains: freed by nobody, not lost; 10 B in 1 block): 1 site",
		"leaked                 200 B in 2 blocks: definitely and indirectly lost",
		"live at the end        260 B in 4 blocks",
		"    still reachable      10 B in 1 block",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the report lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "NOT CLASSIFIED") {
		t.Errorf("every block was classified:\n%s", out)
	}

	// Without the verdict: as before, live at the end.
	plain := New(testProfile(t), testTrace, frames)
	b.Reset()
	must(t, plain.WriteText(&b, TextOptions{}))
	if !strings.Contains(b.String(), "LEAKS (still live at the end)") || strings.Contains(b.String(), "STILL REACHABLE") {
		t.Errorf("a trace without a leak check:\n%s", b.String())
	}
}

func TestLeakCheckedJSON(t *testing.T) {
	r := New(checkedProfile(t), testTrace, frames)
	var buf bytes.Buffer
	must(t, r.WriteJSON(&buf, 0))
	var got JSON
	must(t, json.Unmarshal(buf.Bytes(), &got))
	lc := got.LeakCheck
	if lc == nil {
		t.Fatalf("no leak_check:\n%s", buf.String())
	}
	if lc.Lost != (JSONAmount{200, 2}) || lc.DefinitelyLost != (JSONAmount{100, 1}) || lc.StillReachable != (JSONAmount{10, 1}) ||
		lc.PossiblyLost != (JSONAmount{50, 1}) || lc.NotScanned != (JSONAmount{}) || lc.Rules != "memcheck" {
		t.Errorf("leak_check %+v", lc)
	}
	if len(lc.Scans) != 1 || !lc.Scans[0].AtExit || lc.Scans[0].PauseNs != 4e6 || lc.Scans[0].Applied != 4 {
		t.Errorf("scans %+v", lc.Scans)
	}
	if len(got.Leaks) == 0 || got.Leaks[0].Classes == nil || got.Leaks[0].Classes.DefinitelyLost.Blocks != 1 {
		t.Errorf("the first leak is not the lost one: %+v", got.Leaks)
	}
	// The streamed document is the one Document builds.
	want, err := json.Marshal(r.Document(0))
	must(t, err)
	var a, b any
	must(t, json.Unmarshal(want, &a))
	must(t, json.Unmarshal(buf.Bytes(), &b))
	if !reflect.DeepEqual(a, b) {
		t.Errorf("WriteJSON and Document differ:\n%s\n%s", buf.String(), want)
	}
	// Without a verdict: no leak_check, no classes.
	buf.Reset()
	must(t, New(testProfile(t), testTrace, frames).WriteJSON(&buf, 0))
	if bytes.Contains(buf.Bytes(), []byte("leak_check")) || bytes.Contains(buf.Bytes(), []byte(`"classes"`)) {
		t.Errorf("a trace without a leak check has classes:\n%s", buf.String())
	}
}

func TestLeakCheckedPprofAndCollapsed(t *testing.T) {
	r := New(checkedProfile(t), testTrace, frames)
	p, err := r.Pprof()
	must(t, err)
	byClass := map[string]int64{}
	var inuse int64
	for _, s := range p.Sample {
		inuse += s.Value[3]
		if c := s.Label["class"]; len(c) == 1 {
			byClass[c[0]] += s.Value[3]
		}
	}
	if inuse != 260 || byClass["definitely_lost"] != 100 || byClass["indirectly_lost"] != 100 || byClass["still_reachable"] != 10 || byClass["possibly_lost"] != 50 {
		t.Errorf("inuse %d, by class %v", inuse, byClass)
	}
	var b strings.Builder
	must(t, r.WriteCollapsed(&b, LostSpace))
	if got := b.String(); got != "main;build;make_node 200\n" {
		t.Errorf("collapsed lost_space: %q", got)
	}
	if err := New(testProfile(t), testTrace, frames).WriteCollapsed(&b, LostSpace); err == nil {
		t.Error("lost_space of a trace without a leak check: no error")
	}
}

func TestLeakCheckedSuppressed(t *testing.T) {
	r := New(checkedProfile(t), testTrace, frames)
	rules, err := suppress.Parse(strings.NewReader("leak:make_node\n"), "t.supp")
	must(t, err)
	r.Suppress(rules, suppress.Options{})
	if l := r.Lost(); l != (analyze.Amount{}) {
		t.Errorf("lost after suppressing make_node: %v", l)
	}
	s := siteStarting(t, r, "make_node")
	if s.SuppressedClasses[event.ClassDefinite].Blocks != 1 || s.Classes != ([event.NumClasses]analyze.Amount{}) {
		t.Errorf("suppressed site: classes %v, suppressed %v", s.Classes, s.SuppressedClasses)
	}
	if c := r.Classes(); c[event.ClassReachable] != (analyze.Amount{Bytes: 10, Blocks: 1}) {
		t.Errorf("classes %v", c)
	}
}

func TestLeakCheckedDiff(t *testing.T) {
	d := NewDiff(New(testProfile(t), testTrace, frames), New(checkedProfile(t), testTrace, frames))
	if d.NewTotals.LostBytes != 200 || d.BaseTotals.LostBytes != 0 || d.TotalDelta().LostBlocks != 2 {
		t.Errorf("totals %+v / %+v", d.BaseTotals, d.NewTotals)
	}
	var b strings.Builder
	must(t, d.WriteText(&b, DiffOptions{}))
	if !strings.Contains(b.String(), "lost bytes") || !strings.Contains(b.String(), "holds no leak check") {
		t.Errorf("diff text:\n%s", b.String())
	}
}

// TestLeakCheckedPprofSameFrames: stacks of one process with the same
// frames are one sample (a trace may hold a million such stack IDs), and
// so are their classes: one class-labelled sample per class.
func TestLeakCheckedPprofSameFrames(t *testing.T) {
	m := analyze.New(analyze.Options{})
	must(t, m.Process(event.Process{PID: 2, Time: 1000, Exe: exe}))
	must(t, m.Module(event.Module{PID: 2, Start: 0x1000, End: 0x2000, Path: exe}))
	var evs []event.Event
	var blocks []event.BlockClass
	for id := event.StackID(1); id <= 50; id++ {
		must(t, m.Stack(event.Stack{PID: 2, ID: id, Frames: []uint64{0x1010, 0x1020}}))
		for k := uint64(0); k < 2; k++ {
			addr := uint64(id)<<8 | k
			evs = append(evs, event.Event{Time: 2000 + int64(len(evs)), PID: 2, TID: 2, Kind: event.KindAlloc, Stack: id, Addr: addr, Size: 10})
			blocks = append(blocks, event.BlockClass{Addr: addr, Class: []event.Class{event.ClassDefinite, event.ClassReachable}[k]})
		}
	}
	must(t, m.Events(evs))
	must(t, m.Note(event.Verdict{PID: 2, Time: 9000, Rules: event.RulesMemcheck, Complete: true, AtExit: true, Blocks: blocks[:99]}))
	must(t, m.Exit(event.Exit{PID: 2, Time: 9500}))
	p, err := New(m.Profile(), testTrace, frames).Pprof()
	must(t, err)
	type got struct {
		samples int
		inuse   int64
	}
	by := map[string]got{}
	for _, s := range p.Sample {
		k := "unlabelled"
		if c := s.Label["class"]; len(c) == 1 {
			k = c[0]
		}
		g := by[k]
		g.samples++
		g.inuse += s.Value[3]
		by[k] = g
	}
	// The last block was not scanned: it stays in the unlabelled sample.
	want := map[string]got{"unlabelled": {1, 10}, "definitely_lost": {1, 500}, "still_reachable": {1, 490}}
	if !reflect.DeepEqual(by, want) {
		t.Errorf("samples by class %v, want %v", by, want)
	}
}
