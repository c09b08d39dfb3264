package report

import (
	"bytes"
	"encoding/xml"
	"strings"
	"testing"
	"time"

	"github.com/heapscope/heapscope/analyze"
	"github.com/heapscope/heapscope/event"
)

func TestGate(t *testing.T) {
	r := New(checkedProfile(t), testTrace, frames)
	checks := r.Gate(GateOptions{FailOn: []string{FailAny}})
	got := map[string]Check{}
	for _, c := range checks {
		got[c.Name] = c
	}
	for name, want := range map[string]int64{FailLeaks: 200, FailDefinite: 100, FailPossible: 250} {
		c := got[name]
		if !c.Failed || c.Value != want || !strings.Contains(c.Detail, "make_node") {
			t.Errorf("%s: %+v, want failed at %d with make_node's stack", name, c, want)
		}
	}
	if c := got[FailGrowth]; c.Failed {
		t.Errorf("growth failed on 4 allocations: %+v", c)
	}
	if _, ok := got[FailPeak]; ok {
		t.Error("peak checked without --max-peak")
	}
	if v := Verdict(checks); !strings.HasPrefix(v, "heapscope: FAIL leaks: 200 B lost") {
		t.Errorf("verdict %q", v)
	}
	pass := r.Gate(GateOptions{FailOn: []string{FailLeaks}, MaxLeaked: 200, MaxPeak: 260})
	if Failed(pass) || len(pass) != 2 || Verdict(pass) != "heapscope: PASS (leaks, peak)" {
		t.Errorf("at the limits: %+v", pass)
	}
	if Failed(r.Gate(GateOptions{MaxPeak: 259})) == false {
		t.Error("a peak of 260 B passed --max-peak 259")
	}
	// Without a leak check, leaks are what is live at the end.
	plain := New(testProfile(t), testTrace, frames)
	c := plain.Gate(GateOptions{FailOn: []string{FailLeaks}})[0]
	if !c.Failed || c.Value != 110 || !strings.Contains(c.Summary, "no leak check") {
		t.Errorf("no leak check: %+v", c)
	}

	var buf bytes.Buffer
	must(t, WriteJUnit(&buf, "app", checks, 1500*time.Millisecond, time.Unix(0, 0), Verdict(checks)))
	var doc struct {
		Tests    int `xml:"tests,attr"`
		Failures int `xml:"failures,attr"`
		Suite    []struct {
			Name  string `xml:"name,attr"`
			Cases []struct {
				Name    string `xml:"name,attr"`
				Failure *struct {
					Message string `xml:"message,attr"`
					Text    string `xml:",chardata"`
				} `xml:"failure"`
			} `xml:"testcase"`
		} `xml:"testsuite"`
	}
	if err := xml.Unmarshal(buf.Bytes(), &doc); err != nil {
		t.Fatalf("%v:\n%s", err, buf.String())
	}
	if doc.Tests != 4 || doc.Failures != 3 || len(doc.Suite) != 1 || len(doc.Suite[0].Cases) != 4 {
		t.Fatalf("junit:\n%s", buf.String())
	}
	if f := doc.Suite[0].Cases[0].Failure; f == nil || !strings.Contains(f.Text, "make_node  app.c:10") {
		t.Errorf("the leaks case's failure: %+v", f)
	}
	if doc.Suite[0].Cases[3].Failure != nil {
		t.Error("growth failed in the JUnit file")
	}
}

// TestGrowth: a heap that keeps growing after its warm-up is measured at its
// rate, and a heap that grows only while warming up, or frees at its
// teardown, is not growing.
func TestGrowth(t *testing.T) {
	prof := func(f func(i int) (alloc bool)) *analyze.Profile {
		m := analyze.New(analyze.Options{})
		var evs []event.Event
		for i := 0; i < 1000; i++ {
			tm := int64(1e6 + i*1e6) // 1 ms apart: a second in all
			if f(i) {
				evs = append(evs, event.Event{Time: tm, PID: 1, TID: 1, Kind: event.KindAlloc, Addr: uint64(0x1000 + i*64), Size: 1024})
			} else {
				evs = append(evs, event.Event{Time: tm, PID: 1, TID: 1, Kind: event.KindAlloc, Addr: 0x100000, Size: 1})
				evs = append(evs, event.Event{Time: tm + 1, PID: 1, TID: 1, Kind: event.KindFree, Addr: 0x100000})
			}
		}
		must(t, m.Events(evs))
		return m.Profile()
	}
	steady := New(prof(func(int) bool { return true }), Trace{}, nil).Growth()
	if !steady.Measured || steady.Slope < 0.9e6 || steady.Slope > 1.1e6 || steady.Projected < 0.6e6 || steady.Projected > 0.85e6 {
		t.Errorf("1 KiB a millisecond: %+v (%s)", steady, steady)
	}
	warm := New(prof(func(i int) bool { return i < 200 }), Trace{}, nil).Growth()
	if !warm.Measured || warm.Projected > 1024 || warm.Projected < -1024 {
		t.Errorf("growth during the warm-up only: %+v", warm)
	}
	short := New(&analyze.Profile{}, Trace{}, nil).Growth()
	if short.Measured {
		t.Errorf("an empty trace measured: %+v", short)
	}
}
