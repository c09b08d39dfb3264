package totals

import (
	"sort"

	"github.com/heapscope/heapscope/event"
)

// Process is a traced process and its threads.
type Process struct {
	PID     uint32
	PPID    uint32
	Exe     string
	Cmdline []string // argv
	Threads []uint32 // the threads that allocated or freed; none for a process counted by snapshots
	Ended   bool
}

// Row is one stack's totals in one process, or in one thread when a View
// is of one.
type Row struct {
	PID        uint32
	TID        uint32
	Frames     []uint64 // return addresses, innermost first
	LiveBytes  uint64
	LiveBlocks uint64
	Allocs     uint64 // allocation and reallocation calls that returned a block
	AllocBytes uint64
	Frees      uint64
	Temporary  uint64
	// Growth is the change in LiveBytes since the client's previous
	// Rows (0 on its first): over the elapsed time Rows returns.
	Growth int64
	// What of LiveBytes a heap scan found lost (definitely and
	// indirectly), possibly lost and still reachable: 0 in a process no
	// scan classified (View.Scanned).
	LostBytes, PossibleBytes, ReachableBytes uint64
}

// Order is the order of the rows Rows returns.
type Order int

// The orders Rows offers, largest first.
const (
	ByLive      Order = iota // live bytes
	ByGrowth                 // growth since the client's previous Rows
	ByCalls                  // allocation and reallocation calls
	ByTemporary              // temporaries
)

// View is what one query takes of the totals: a copy, made under the
// lock that guards the totals (it is cheap: the totals' sites, not their
// blocks), so that the rows are made and sorted outside it.
type View struct {
	// Time is how far the totals go: the time of the latest event or
	// snapshot counted.
	Time      int64
	Unmatched uint64 // frees of blocks never seen allocated
	Processes []Process
	// Modules are the module records from the index the query gave on;
	// NModules counts them all.
	Modules  []event.Module
	NModules int
	// Aggregate: some process is counted by snapshots (eBPF aggregate
	// mode): no temporaries, no threads.
	Aggregate bool
	// Scanned: a heap scan classified the blocks of some process of the
	// view: rows have lost, possibly lost and still reachable bytes.
	Scanned bool

	tid    uint32
	sites  []site   // those of the process and thread asked
	idx    []int    // each one's index in the totals
	live   []uint64 // every site's live bytes, by index
	frames map[[2]uint64][]uint64
}

// View copies the sites of process pid (0: every process) and thread tid
// of it (0: every thread), and the module records from the modules'th on.
func (a *Totals) View(pid, tid uint32, modules int) *View {
	v := &View{Time: a.lastTime, Unmatched: a.unmatched, Processes: a.processes(), NModules: len(a.modules), tid: tid}
	if modules >= 0 && modules < len(a.modules) {
		v.Modules = append([]event.Module(nil), a.modules[modules:]...)
	}
	v.sites = make([]site, 0, len(a.sites))
	v.idx = make([]int, 0, len(a.sites))
	// Every site's live bytes, for the client's next growth whatever it
	// shows next.
	v.live = make([]uint64, len(a.sites))
	all := append([]site(nil), a.sites...)
	a.held(func(si int32, size uint64) {
		all[si].liveBytes += size
		all[si].liveBlocks++
	})
	for i := range all {
		st := &all[i]
		v.live[i] = st.liveBytes
		if pid != 0 && st.pid != pid || tid != 0 && st.tid != tid {
			continue
		}
		v.sites = append(v.sites, *st)
		v.idx = append(v.idx, i)
	}
	for _, p := range a.procList {
		if p.snap {
			v.Aggregate = true
		}
		if p.scanned && (pid == 0 || p.pid == pid) {
			v.Scanned = true
		}
	}
	v.frames = map[[2]uint64][]uint64{}
	for _, st := range v.sites {
		k := [2]uint64{uint64(st.pid), uint64(st.stack)}
		if _, ok := v.frames[k]; !ok {
			if p := a.procs[st.pid]; p != nil {
				v.frames[k] = p.frames[st.stack]
			}
		}
	}
	return v
}

// Client is what one client saw at its previous Rows: the growth of the
// next is measured from it.
type Client struct {
	time int64
	live []uint64 // by site index
}

// Rows returns the view's rows by stack per process (threads summed,
// unless the view is of one thread), the first n in order o, their sum,
// and the time the growth is measured over: since the client's previous
// Rows, 0 on its first and when that came sooner than minElapsed ns of the
// totals' time (the session delivered a few events since); the growth is
// then measured from the previous one's time at the next.
func (v *View) Rows(c *Client, o Order, n int, minElapsed int64) (rows []Row, sum Row, elapsed int64) {
	// A growth is measured between the times of the latest events of two
	// answers: before the first event there is no time to measure from
	// (the wall clock would count what a provider delivers late, as
	// eBPF's first events after an attach, as made since).
	now := v.Time
	advance := c.time == 0 || now-c.time >= max(minElapsed, 1)
	if c.time != 0 && advance {
		elapsed = now - c.time
	}
	prev := c.live
	if advance {
		c.live = v.live
	}
	type rowKey struct {
		pid, tid uint32
		stack    event.StackID
	}
	// The sum is of the heap: the blocks of exited processes, leaks in
	// their rows, are not in its live bytes and blocks; its lost, possibly
	// lost and reachable bytes are the rows', theirs included (a program
	// checked at its exit keeps what it lost).
	var gone Row
	byKey := map[rowKey]*Row{}
	var list []*Row
	for i := range v.sites {
		st := &v.sites[i]
		k := rowKey{st.pid, st.tid, st.stack}
		if v.tid == 0 {
			k.tid = 0
		}
		row := byKey[k]
		if row == nil {
			row = &Row{PID: st.pid, TID: k.tid, Frames: v.frames[[2]uint64{uint64(st.pid), uint64(st.stack)}]}
			byKey[k] = row
			list = append(list, row)
		}
		row.LiveBytes += st.liveBytes
		row.LiveBlocks += st.liveBlocks
		gone.LiveBytes += st.goneBytes
		gone.LiveBlocks += st.goneBlocks
		row.Allocs += st.allocs
		row.AllocBytes += st.allocBytes
		row.Frees += st.frees
		row.Temporary += st.temporary
		row.LostBytes += st.classes[event.ClassDefinite] + st.classes[event.ClassIndirect]
		row.PossibleBytes += st.classes[event.ClassPossible]
		row.ReachableBytes += st.classes[event.ClassReachable]
		si := v.idx[i]
		if elapsed > 0 {
			old := uint64(0)
			if si < len(prev) {
				old = prev[si]
			}
			row.Growth += int64(st.liveBytes) - int64(old)
		}
	}
	if advance {
		c.time = now
	}
	for _, row := range list {
		sum.LiveBytes += row.LiveBytes
		sum.LiveBlocks += row.LiveBlocks
		sum.Allocs += row.Allocs
		sum.AllocBytes += row.AllocBytes
		sum.Frees += row.Frees
		sum.Temporary += row.Temporary
		sum.Growth += row.Growth
		sum.LostBytes += row.LostBytes
		sum.PossibleBytes += row.PossibleBytes
		sum.ReachableBytes += row.ReachableBytes
	}
	sum.LiveBytes -= gone.LiveBytes
	sum.LiveBlocks -= gone.LiveBlocks
	key := func(t *Row) int64 {
		switch o {
		case ByGrowth:
			return t.Growth
		case ByCalls:
			return int64(t.Allocs)
		case ByTemporary:
			return int64(t.Temporary)
		}
		return int64(t.LiveBytes)
	}
	sort.Slice(list, func(i, j int) bool {
		a, b := key(list[i]), key(list[j])
		if a != b {
			return a > b
		}
		if list[i].LiveBytes != list[j].LiveBytes {
			return list[i].LiveBytes > list[j].LiveBytes
		}
		return list[i].Allocs > list[j].Allocs
	})
	for _, row := range list[:min(n, len(list))] {
		rows = append(rows, *row)
	}
	return rows, sum, elapsed
}

// Stack is one stack's totals in one process, its threads summed: what an
// interval profile is made of (package export).
type Stack struct {
	PID    uint32
	ID     event.StackID
	Frames []uint64 // return addresses, innermost first
	// Allocs and AllocBytes are the allocation and reallocation calls that
	// returned a block, and their bytes, since the totals began; LiveBlocks
	// and LiveBytes what the stack holds now. Estimates in sampled totals.
	Allocs, AllocBytes    uint64
	LiveBlocks, LiveBytes uint64
}

// Stacks returns the view's totals by process and stack, threads summed,
// in no order. Its cost is one pass over the view's sites.
func (v *View) Stacks() []Stack {
	type key struct {
		pid   uint32
		stack event.StackID
	}
	idx := make(map[key]int, len(v.sites))
	out := make([]Stack, 0, len(v.sites))
	for i := range v.sites {
		st := &v.sites[i]
		k := key{st.pid, st.stack}
		j, ok := idx[k]
		if !ok {
			j = len(out)
			idx[k] = j
			out = append(out, Stack{PID: st.pid, ID: st.stack, Frames: v.frames[[2]uint64{uint64(st.pid), uint64(st.stack)}]})
		}
		o := &out[j]
		o.Allocs += st.allocs
		o.AllocBytes += st.allocBytes
		o.LiveBlocks += st.liveBlocks
		o.LiveBytes += st.liveBytes
	}
	return out
}
