package export

import (
	"path"
	"slices"

	"github.com/heapscope/heapscope/symbolize"
)

// Resolver turns a return address of a traced process into frames,
// innermost first, never none (the calls inlined at the address first).
// *symbolize.Symbolizer is one, and so is report.Report.Resolver().
type Resolver interface {
	Frames(pid uint32, addr uint64) []symbolize.Frame
}

// Options tune the writers. The zero value writes addresses and mappings
// only, for a backend that symbolizes by build-id.
type Options struct {
	// Resolver, when set, names the frames: functions, files, lines and
	// inlined calls. A frame it cannot name keeps its address and mapping.
	Resolver Resolver
	// Trim, when set, is applied to each stack's resolved frames (e.g.
	// symbolize.TrimAllocator, which drops the allocator's own frames). It
	// returns a suffix of its argument.
	Trim func([]symbolize.Frame) []symbolize.Frame
	// Version is heapscope's version, written as the instrumentation
	// scope's (OTLP) or in a comment (pprof).
	Version string
}

// noStack names the location of allocations that carried no stack.
const noStack = "[no stack]"

// table is an interval's stacks resolved into locations, per process: the
// part both writers share. Its cost is one pass over the interval's stacks
// and their frames.
type table struct {
	procs []procTable
}

type procTable struct {
	p      *Process
	maps   []Mapping // sorted by Start
	locs   []location
	stacks [][]int32 // by index of p.Stacks: indices into locs; nil when the stack is left out
	index  map[locKey]int32
}

// location is an address and the frames inlined at it, innermost first;
// lines is empty when the address could not be named.
type location struct {
	addr    uint64
	mapping int32 // index into procTable.maps; -1: none
	lines   []symbolize.Frame
}

// locKey identifies a location within a process: Trim may cut the frames
// of a stack's first address, so the count of lines is part of the key.
type locKey struct {
	addr  uint64
	lines int
}

func (s *Stack) empty() bool {
	return s.Allocs == 0 && s.AllocBytes == 0 && s.LiveObjects == 0 && s.LiveBytes == 0
}

func newTable(iv *Interval, o *Options) *table {
	t := &table{procs: make([]procTable, len(iv.Processes))}
	var buf []symbolize.Frame
	for i := range iv.Processes {
		p := &iv.Processes[i]
		pt := &t.procs[i]
		pt.p = p
		pt.maps = slices.Clone(p.Mappings)
		slices.SortFunc(pt.maps, func(a, b Mapping) int {
			switch {
			case a.Start < b.Start:
				return -1
			case a.Start > b.Start:
				return 1
			}
			return 0
		})
		pt.index = make(map[locKey]int32)
		pt.stacks = make([][]int32, len(p.Stacks))
		for j := range p.Stacks {
			st := &p.Stacks[j]
			if st.empty() {
				continue
			}
			if o.Resolver == nil {
				pt.stacks[j] = pt.addresses(st.Frames)
				continue
			}
			buf = buf[:0]
			for _, a := range st.Frames {
				buf = append(buf, o.Resolver.Frames(p.PID, a)...)
			}
			frames := buf
			if o.Trim != nil {
				frames = o.Trim(frames)
			}
			pt.stacks[j] = pt.resolved(frames)
		}
	}
	return t
}

// addresses interns one location per address.
func (pt *procTable) addresses(frames []uint64) []int32 {
	if len(frames) == 0 {
		return []int32{pt.noStack()}
	}
	ids := make([]int32, len(frames))
	for i, a := range frames {
		k := locKey{addr: a}
		id, ok := pt.index[k]
		if !ok {
			id = pt.add(location{addr: a, mapping: pt.mapping(a)}, k)
		}
		ids[i] = id
	}
	return ids
}

// resolved groups frames into locations: an address and the frames inlined
// at it.
func (pt *procTable) resolved(frames []symbolize.Frame) []int32 {
	if len(frames) == 0 {
		return []int32{pt.noStack()}
	}
	var ids []int32
	for i := 0; i < len(frames); {
		j := i
		for j < len(frames)-1 && frames[j].Inlined && frames[j+1].Address == frames[i].Address {
			j++
		}
		group := frames[i : j+1]
		a := group[0].Address
		k := locKey{addr: a, lines: len(group)}
		id, ok := pt.index[k]
		if !ok {
			l := location{addr: a, mapping: pt.mapping(a)}
			for _, f := range group {
				if f.Function != "" {
					l.lines = append(l.lines, f)
				}
			}
			id = pt.add(l, k)
		}
		ids = append(ids, id)
		i = j + 1
	}
	return ids
}

func (pt *procTable) noStack() int32 {
	k := locKey{lines: -1}
	if id, ok := pt.index[k]; ok {
		return id
	}
	return pt.add(location{mapping: -1, lines: []symbolize.Frame{{Function: noStack}}}, k)
}

func (pt *procTable) add(l location, k locKey) int32 {
	id := int32(len(pt.locs))
	pt.locs = append(pt.locs, l)
	pt.index[k] = id
	return id
}

// mapping returns the index of the mapping that holds addr, or -1.
func (pt *procTable) mapping(addr uint64) int32 {
	i, _ := slices.BinarySearchFunc(pt.maps, addr, func(m Mapping, a uint64) int {
		if m.Start <= a {
			return -1
		}
		return 1
	})
	i--
	if i < 0 || addr >= pt.maps[i].Limit {
		return -1
	}
	return int32(i)
}

// ExeName is the base name of the process's executable, or of argv[0].
func (p *Process) ExeName() string {
	if p.Exe != "" {
		return path.Base(p.Exe)
	}
	if len(p.Cmdline) > 0 && p.Cmdline[0] != "" {
		return path.Base(p.Cmdline[0])
	}
	return ""
}

// ServiceName is the process's OTLP service.name: Service, or
// "unknown_service:" and the executable's base name.
func (p *Process) ServiceName() string {
	if p.Service != "" {
		return p.Service
	}
	if n := p.ExeName(); n != "" {
		return "unknown_service:" + n
	}
	return "unknown_service"
}
