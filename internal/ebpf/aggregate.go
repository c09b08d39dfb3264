package ebpf

import (
	"sort"
	"time"

	"github.com/heapscope/heapscope/event"
)

// spillProc is what aggregate mode's tables could not hold of one process:
// the blocks sent through the ring, and what they add to their stacks'
// totals (by the BPF side's stack key).
type spillProc struct {
	live   map[uint64]heapscopeLiveVal // by address
	totals map[uint64]heapscopeTotalVal
}

// spill keeps what the BPF side sent through the ring for want of room in
// its tables (see agg_record): new blocks, and the frees (and reallocs) of
// blocks the tables did not have. Called with out held.
func (t *Tracer) spill(raw []heapscopeEvent) {
	if t.spilled == nil {
		t.spilled = map[uint32]*spillProc{}
	}
	for _, r := range raw {
		if !t.known[r.Pid] || r.Spill == 0 {
			continue
		}
		sp := t.spilled[r.Pid]
		if sp == nil {
			sp = &spillProc{live: map[uint64]heapscopeLiveVal{}, totals: map[uint64]heapscopeTotalVal{}}
			t.spilled[r.Pid] = sp
		}
		if r.Spill&spillOld != 0 {
			old := r.OldAddr
			if event.Kind(r.Kind) == event.KindFree {
				old = r.Addr
			}
			if _, ok := sp.live[old]; ok {
				delete(sp.live, old)
			} else {
				t.spillUnmatched.Add(1)
			}
		}
		if r.Spill&spillNew != 0 && r.Addr != 0 {
			sp.live[r.Addr] = heapscopeLiveVal{Size: r.Size, Time: r.Time, Stack: r.Stack, Wbytes: r.OldSize, Wobjs: uint64(r.Wobjs)}
			tv := sp.totals[r.Stack]
			tv.Allocs += uint64(r.Wobjs)
			tv.AllocBytes += r.OldSize
			sp.totals[r.Stack] = tv
		}
		t.delivered.Add(1)
	}
}

// snapshot sends a Snapshot of each of pids, from the aggregate tables and
// what they could not hold, and returns the live blocks they list.
func (t *Tracer) snapshot(pids []int, final bool) uint64 {
	if len(pids) == 0 {
		return 0
	}
	var listed uint64
	want := map[uint16]uint32{} // pidx to pid
	t.mu.Lock()
	for _, p := range pids {
		// A process being ended has its final snapshot taken by end:
		// another, after its slots are purged, would say less.
		if tr := t.procs[p]; tr != nil && tr.pidx != 0 && (final || !tr.finishing) {
			want[tr.pidx] = uint32(p)
		}
	}
	t.mu.Unlock()
	live := t.readLive(want)
	totals := t.readTotals(want)
	now := monotonic()

	taken := map[uint32]bool{}
	for _, pid := range want {
		taken[pid] = true
	}

	t.out.Lock()
	defer t.out.Unlock()
	for _, p := range pids {
		pid := uint32(p)
		if !taken[pid] {
			continue
		}
		sn := event.Snapshot{PID: pid, Time: now, Final: final}
		// Frees are derived: a block a stack allocated is live or was
		// freed, and it counted its weights (when sampling, what it
		// stands for; else 1 and its size) in its stack's totals. Of a
		// running process the two tables are read at slightly different
		// times; a count that comes out negative (a block allocated
		// between the reads) is taken as 0.
		type sum struct{ n, bytes uint64 }
		liveBy := map[uint64]sum{}
		add := func(addr uint64, v heapscopeLiveVal) {
			sn.Live = append(sn.Live, event.LiveBlock{
				Addr: addr, Size: v.Size, Time: int64(v.Time),
				Stack: t.stackID(pid, v.Stack),
			})
			s := liveBy[v.Stack]
			liveBy[v.Stack] = sum{s.n + v.Wobjs, s.bytes + v.Wbytes}
		}
		for _, b := range live[pid] {
			add(b.addr, b.v)
		}
		tots := totals[pid]
		if sp := t.spilled[pid]; sp != nil {
			for addr, v := range sp.live {
				add(addr, v)
			}
			if tots == nil {
				tots = map[uint64]heapscopeTotalVal{}
			}
			for stack, v := range sp.totals {
				tv := tots[stack]
				tv.Allocs += v.Allocs
				tv.AllocBytes += v.AllocBytes
				tots[stack] = tv
			}
		}
		sort.Slice(sn.Live, func(i, j int) bool { return sn.Live[i].Addr < sn.Live[j].Addr })
		for stack, v := range tots {
			l := liveBy[stack]
			sn.Totals = append(sn.Totals, event.StackTotal{
				Stack:  t.stackID(pid, stack),
				Allocs: v.Allocs, AllocBytes: v.AllocBytes,
				Frees: sub0(v.Allocs, l.n), FreeBytes: sub0(v.AllocBytes, l.bytes),
			})
		}
		sort.Slice(sn.Totals, func(i, j int) bool { return sn.Totals[i].Stack < sn.Totals[j].Stack })
		t.send(t.sink.Snapshot(sn))
		listed += uint64(len(sn.Live))
	}
	t.settleStacks()
	return listed
}

func sub0(a, b uint64) uint64 {
	if b > a {
		return 0
	}
	return a - b
}

// Sizes of struct live_val and struct total_val.
const (
	liveValSize  = 40
	totalValSize = 32
)

// liveBlock is a block of the live table.
type liveBlock struct {
	addr uint64
	v    heapscopeLiveVal
}

// readLive reads the live blocks of the processes in want (pidx to pid),
// by pid.
func (t *Tracer) readLive(want map[uint16]uint32) map[uint32][]liveBlock {
	out := map[uint32][]liveBlock{}
	tb := t.live
	v := make([]byte, liveValSize)
	for i := 0; i < tb.n; i++ {
		k := tb.read(i, v)
		if k == 0 {
			continue
		}
		pid, ok := want[uint16(k>>pidxShift&maxPidx)]
		if !ok {
			continue
		}
		lv := heapscopeLiveVal{Size: u64(v, 0), Time: u64(v, 8), Stack: u64(v, 16), Wbytes: u64(v, 24), Wobjs: u64(v, 32)}
		out[pid] = append(out[pid], liveBlock{k & addrMask, lv})
	}
	for pid, bs := range out {
		// An address is in the table once, unless it was caught
		// being claimed again after a free: the newer block is live.
		sort.Slice(bs, func(i, j int) bool {
			if bs[i].addr != bs[j].addr {
				return bs[i].addr < bs[j].addr
			}
			return bs[i].v.Time > bs[j].v.Time
		})
		n := 0
		for i, b := range bs {
			if i == 0 || b.addr != bs[n-1].addr {
				bs[n] = b
				n++
			}
		}
		out[pid] = bs[:n]
	}
	return out
}

// readTotals reads the per-stack totals of the processes in want, by pid
// and stack, summing the slots that two threads added at once.
func (t *Tracer) readTotals(want map[uint16]uint32) map[uint32]map[uint64]heapscopeTotalVal {
	out := map[uint32]map[uint64]heapscopeTotalVal{}
	tb := t.totals
	v := make([]byte, totalValSize)
	for i := 0; i < tb.n; i++ {
		if tb.read(i, v) == 0 {
			continue
		}
		tv := heapscopeTotalVal{Allocs: u64(v, 0), AllocBytes: u64(v, 8), Stack: u64(v, 16), Pidx: uint32(u64(v, 24))}
		pid, ok := want[uint16(tv.Pidx)]
		if !ok {
			continue
		}
		m := out[pid]
		if m == nil {
			m = map[uint64]heapscopeTotalVal{}
			out[pid] = m
		}
		sum := m[tv.Stack]
		sum.Allocs += tv.Allocs
		sum.AllocBytes += tv.AllocBytes
		m[tv.Stack] = sum
	}
	return out
}

// purge frees a process's slots in the aggregate tables, and what they
// could not hold, once it is no longer traced.
func (t *Tracer) purge(pid int, pidx uint16) {
	t.objs.spilling.Put(uint32(pidx), uint8(0))
	t.out.Lock()
	delete(t.spilled, uint32(pid))
	t.out.Unlock()
	for i := 0; i < t.live.n; i++ {
		if k := t.live.key(i); k != 0 && k&keyBusy == 0 && uint16(k>>pidxShift&maxPidx) == pidx {
			t.live.release(i, k)
		}
	}
	v := make([]byte, totalValSize)
	for i := 0; i < t.totals.n; i++ {
		if k := t.totals.read(i, v); k != 0 && uint16(u64(v, 24)) == pidx {
			t.totals.release(i, k)
		}
	}
}

// harvestEvery is how often aggregate mode reads the stacks that have come
// since, when some have.
const harvestEvery = 250 * time.Millisecond

// harvest, in aggregate mode, reads every harvestEvery the stacks the
// tables' totals (and what they could not hold) name that this process has
// not read, and lets the BPF side forget their frames (settleStacks): the
// stack map then holds the stacks that came in a quarter of a second, not
// all those between two snapshots.
func (t *Tracer) harvest() {
	defer t.wg.Done()
	tk := time.NewTicker(harvestEvery)
	defer tk.Stop()
	var last uint64
	again := false // once more after the count stops: a stack is counted before its call is in the tables
	for {
		select {
		case <-t.closing:
			return
		case <-tk.C:
		}
		t.life.RLock()
		if !t.gone {
			if c := t.counters()[ctrStacksStored]; c != last || again {
				again = c != last
				last = c
				t.drain() // what was spilled, with its stacks
				t.harvestStacks()
			}
		}
		t.life.RUnlock()
	}
}

// harvestStacks reads the stacks named in the tables' totals and in what
// they could not hold. Called with life held.
func (t *Tracer) harvestStacks() {
	want := map[uint16]uint32{}
	t.mu.Lock()
	for pid, p := range t.procs {
		if p.pidx != 0 {
			want[p.pidx] = uint32(pid)
		}
	}
	t.mu.Unlock()
	type key struct {
		pid   uint32
		stack uint64
	}
	var found []key
	v := make([]byte, totalValSize)
	for i := 0; i < t.totals.n; i++ {
		if t.totals.read(i, v) == 0 {
			continue
		}
		if pid, ok := want[uint16(u64(v, 24))]; ok {
			found = append(found, key{pid, u64(v, 16)})
		}
	}
	t.out.Lock()
	defer t.out.Unlock()
	for _, k := range found {
		if t.known[k.pid] {
			t.stackID(k.pid, k.stack)
		}
	}
	for pid, sp := range t.spilled {
		for stack := range sp.totals {
			t.stackID(pid, stack)
		}
	}
	t.settleStacks()
}
