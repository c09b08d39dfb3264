package analyze

import (
	"testing"

	"github.com/heapscope/heapscope/event"
)

// TestFilterExec: a PID that execs runs two programs; --exe takes the
// events of the one named, by time, and the k-th exit of the PID is its
// k-th program's even when written after the next one started.
func TestFilterExec(t *testing.T) {
	for _, c := range []struct {
		sel        Processes
		bytes      uint64
		procs      int
		exitStatus int32
		exited     bool
	}{
		{Processes{Exe: "app"}, 300, 1, 0, true},
		{Processes{Exe: "sh"}, 10, 1, -1, true},
		{Processes{PIDs: []uint32{5}}, 310, 1, 0, true},
		{Processes{PIDs: []uint32{6}}, 4000, 1, 0, false},
		{Processes{}, 4310, 2, 0, true},
	} {
		m := New(Options{})
		f := NewFilter(m, c.sel)
		must := func(err error) {
			if err != nil {
				t.Fatal(err)
			}
		}
		must(f.Process(event.Process{PID: 5, Time: 100, Exe: "/bin/dash", Cmdline: []string{"sh", "shim"}}))
		must(f.Process(event.Process{PID: 6, Time: 105, Exe: "/usr/bin/other"}))
		must(f.Stack(event.Stack{PID: 5, ID: 1, Frames: []uint64{0x10}}))
		must(f.Events([]event.Event{
			{Time: 110, PID: 5, TID: 5, Kind: event.KindAlloc, Stack: 1, Addr: 0x1000, Size: 10},
			{Time: 115, PID: 6, TID: 6, Kind: event.KindAlloc, Stack: 1, Addr: 0x1000, Size: 4000},
		}))
		must(f.Process(event.Process{PID: 5, Time: 200, Exe: "/opt/app", Cmdline: []string{"app"}}))
		must(f.Exit(event.Exit{PID: 5, Time: 205, Status: -1})) // the shell's, written late
		must(f.Events([]event.Event{
			{Time: 210, PID: 5, TID: 5, Kind: event.KindAlloc, Stack: 1, Addr: 0x2000, Size: 100},
			{Time: 220, PID: 5, TID: 5, Kind: event.KindAlloc, Stack: 1, Addr: 0x3000, Size: 200},
		}))
		must(f.Exit(event.Exit{PID: 5, Time: 300, Status: 0}))
		p := m.Profile()
		if p.Summary.Bytes != c.bytes || len(p.Processes) != c.procs {
			t.Errorf("%v: %d bytes in %d processes, want %d in %d", c.sel, p.Summary.Bytes, len(p.Processes), c.bytes, c.procs)
			continue
		}
		if pr := p.Processes[0]; pr.Exited != c.exited || c.exited && pr.Exit.Status != c.exitStatus {
			t.Errorf("%v: process %+v, want exited %v status %d", c.sel, pr, c.exited, c.exitStatus)
		}
	}
}
