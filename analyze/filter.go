package analyze

import (
	"path"
	"sort"
	"strconv"
	"strings"

	"github.com/heapscope/heapscope/event"
)

// Processes selects some of a trace's processes: a process is selected when
// its PID is one of PIDs (every program it ran, across exec) or when the
// program it ran is named Exe (the base name of its executable or of its
// argv[0]; after an exec, only the events of the matching program). The
// zero value selects every process.
type Processes struct {
	PIDs []uint32
	Exe  string
}

// All reports whether p selects every process.
func (p Processes) All() bool { return len(p.PIDs) == 0 && p.Exe == "" }

func (p Processes) String() string {
	var parts []string
	if len(p.PIDs) > 0 {
		var ids []string
		for _, pid := range p.PIDs {
			ids = append(ids, strconv.FormatUint(uint64(pid), 10))
		}
		parts = append(parts, "pid "+strings.Join(ids, ","))
	}
	if p.Exe != "" {
		parts = append(parts, "exe "+p.Exe)
	}
	if len(parts) == 0 {
		return "all processes"
	}
	return strings.Join(parts, " or ")
}

// matchesExe reports whether pr ran the program named exe.
func matchesExe(pr event.Process, exe string) bool {
	if exe == "" {
		return false
	}
	if pr.Exe != "" && path.Base(pr.Exe) == exe {
		return true
	}
	return len(pr.Cmdline) > 0 && path.Base(pr.Cmdline[0]) == exe
}

// Filter is an event.Sink that passes to another only the records of the
// selected processes. Stats records, which describe the whole session, pass
// unchanged. A process's records are told apart from those of the program it
// ran before an exec by time: each Process record starts a program.
//
// Filter needs each Process record before the events of its program, as a
// trace gives them (a first pass over the definitions, then the events, is
// fine too).
type Filter struct {
	next  event.Sink
	sel   Processes
	pids  map[uint32]bool
	progs map[uint32][]program // by PID, by time
	seen  []event.Process      // every Process record, selected or not
	exits map[uint32]int       // exits seen, by PID
	buf   []event.Event
}

type program struct {
	time     int64
	selected bool
}

// NewFilter returns a Filter of next by sel.
func NewFilter(next event.Sink, sel Processes) *Filter {
	f := &Filter{next: next, sel: sel, pids: map[uint32]bool{}, progs: map[uint32][]program{}, exits: map[uint32]int{}}
	for _, pid := range sel.PIDs {
		f.pids[pid] = true
	}
	return f
}

// Seen returns every Process record the filter was given, selected or not.
func (f *Filter) Seen() []event.Process { return f.seen }

// selected reports whether the record of pid at time t is of a selected
// program.
func (f *Filter) selected(pid uint32, t int64) bool {
	if f.sel.All() || f.pids[pid] {
		return true
	}
	ps := f.progs[pid]
	i := sort.Search(len(ps), func(i int) bool { return ps[i].time > t }) - 1
	if i < 0 {
		// Before the first program known: the first one's.
		return len(ps) > 0 && ps[0].selected
	}
	return ps[i].selected
}

// Process implements event.Sink.
func (f *Filter) Process(p event.Process) error {
	// A record with the pid and time of a program seen is that program's
	// (its command line updated, or a definition repeated): not another.
	ps, same := f.progs[p.PID], false
	for _, q := range ps {
		same = same || q.time == p.Time
	}
	if !same {
		f.seen = append(f.seen, p)
		ps = append(ps, program{time: p.Time, selected: matchesExe(p, f.sel.Exe)})
		sort.SliceStable(ps, func(i, j int) bool { return ps[i].time < ps[j].time })
		f.progs[p.PID] = ps
	}
	if !f.selected(p.PID, p.Time) {
		return nil
	}
	return f.next.Process(p)
}

// Exit implements event.Sink. Each program of a PID ends with one Exit
// record, in order (the program an exec replaced ends too), but that record
// may be written after the next program started: the k-th Exit of a PID
// is its k-th program's.
func (f *Filter) Exit(x event.Exit) error {
	k := f.exits[x.PID]
	f.exits[x.PID]++
	if f.sel.All() || f.pids[x.PID] {
		return f.next.Exit(x)
	}
	if ps := f.progs[x.PID]; k < len(ps) && !ps[k].selected || k >= len(ps) && !f.selected(x.PID, x.Time) {
		return nil
	}
	return f.next.Exit(x)
}

// Module implements event.Sink. A module of a process not known yet
// passes: it only helps to name frames.
func (f *Filter) Module(m event.Module) error {
	if len(f.progs[m.PID]) > 0 && !f.selected(m.PID, m.Time) {
		return nil
	}
	return f.next.Module(m)
}

// Stack implements event.Sink. The stacks of a PID pass when one of its
// programs is selected: a stack that no selected event uses is not in the
// profile.
func (f *Filter) Stack(s event.Stack) error {
	if f.sel.All() || f.pids[s.PID] {
		return f.next.Stack(s)
	}
	for _, p := range f.progs[s.PID] {
		if p.selected {
			return f.next.Stack(s)
		}
	}
	return nil
}

// Stats implements event.Sink.
func (f *Filter) Stats(s event.Stats) error { return f.next.Stats(s) }

// Note implements event.Sink: a note passes when its process is selected,
// and a note about the whole session always.
func (f *Filter) Note(n event.Note) error {
	pid, _ := n.Of()
	if pid == 0 || f.sel.All() || f.pids[pid] {
		return f.next.Note(n)
	}
	for _, p := range f.progs[pid] {
		if p.selected {
			return f.next.Note(n)
		}
	}
	return nil
}

// Snapshot implements event.Sink.
func (f *Filter) Snapshot(s event.Snapshot) error {
	if !f.selected(s.PID, s.Time) {
		return nil
	}
	return f.next.Snapshot(s)
}

// Events implements event.Sink.
func (f *Filter) Events(evs []event.Event) error {
	if f.sel.All() {
		return f.next.Events(evs)
	}
	f.buf = f.buf[:0]
	for i := range evs {
		if f.selected(evs[i].PID, evs[i].Time) {
			f.buf = append(f.buf, evs[i])
		}
	}
	if len(f.buf) == 0 {
		return nil
	}
	return f.next.Events(f.buf)
}
