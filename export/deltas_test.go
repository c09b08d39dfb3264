package export

import (
	"testing"
	"time"
)

func TestDeltas(t *testing.T) {
	t0 := time.Unix(1000, 0)
	d := NewDeltas(t0)
	cum := func(end int, lost uint64, stacks ...Stack) *Interval {
		return &Interval{End: t0.Add(time.Duration(end) * time.Second), Lost: lost,
			Processes: []Process{{PID: 7, Exe: "/bin/x", Stacks: stacks}}}
	}
	iv := d.Next(cum(10, 2, Stack{ID: 1, Allocs: 5, AllocBytes: 500, LiveObjects: 1, LiveBytes: 100},
		Stack{ID: 2, Allocs: 3, AllocBytes: 30}))
	if !iv.Start.Equal(t0) || !iv.End.Equal(t0.Add(10*time.Second)) || iv.Lost != 2 || !iv.LostFrom.Equal(t0) {
		t.Errorf("first interval %v %v lost %d from %v", iv.Start, iv.End, iv.Lost, iv.LostFrom)
	}
	if s := iv.Processes[0].Stacks; len(s) != 2 || s[0].Allocs != 5 || s[1].AllocBytes != 30 {
		t.Errorf("first stacks %+v", s)
	}
	// Stack 1 allocates 2 more and keeps its block; stack 2 does nothing
	// and holds nothing (left out); stack 3 is new.
	iv = d.Next(cum(20, 2, Stack{ID: 1, Allocs: 7, AllocBytes: 700, LiveObjects: 1, LiveBytes: 100},
		Stack{ID: 2, Allocs: 3, AllocBytes: 30}, Stack{ID: 3, Allocs: 1, AllocBytes: 8, LiveObjects: 1, LiveBytes: 8}))
	if !iv.Start.Equal(t0.Add(10*time.Second)) || iv.Lost != 0 {
		t.Errorf("second interval starts %v, lost %d", iv.Start, iv.Lost)
	}
	s := iv.Processes[0].Stacks
	if len(s) != 2 || s[0].ID != 1 || s[0].Allocs != 2 || s[0].AllocBytes != 200 || s[0].LiveBytes != 100 || s[1].ID != 3 || s[1].Allocs != 1 {
		t.Errorf("second stacks %+v", s)
	}
	// The counting restarted (totals rebuilt): the new counts stand.
	iv = d.Next(cum(30, 5, Stack{ID: 1, Allocs: 1, AllocBytes: 100}))
	if s := iv.Processes[0].Stacks; len(s) != 1 || s[0].Allocs != 1 || s[0].AllocBytes != 100 || iv.Lost != 3 {
		t.Errorf("after a restart: %+v lost %d", s, iv.Lost)
	}
}
