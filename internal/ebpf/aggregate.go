package ebpf

import (
	"sort"

	"github.com/heapscope/heapscope/event"
)

// snapshot sends a Snapshot of each of pids, from the aggregate tables.
func (t *Tracer) snapshot(pids []int, final bool) {
	if len(pids) == 0 {
		return
	}
	want := map[uint16]uint32{} // pidx to pid
	t.mu.Lock()
	for _, p := range pids {
		if tr := t.procs[p]; tr != nil && tr.pidx != 0 {
			want[tr.pidx] = uint32(p)
		}
	}
	t.mu.Unlock()
	live := t.readLive(want)
	totals := t.readTotals(want)
	now := monotonic()

	t.out.Lock()
	defer t.out.Unlock()
	for _, p := range pids {
		pid := uint32(p)
		sn := event.Snapshot{PID: pid, Time: now, Final: final}
		// Frees are derived: a block a stack allocated is live or was
		// freed, and it counted its weights (when sampling, what it
		// stands for; else 1 and its size) in its stack's totals. Of a
		// running process the two tables are read at slightly different
		// times; a count that comes out negative (a block allocated
		// between the reads) is taken as 0.
		type sum struct{ n, bytes uint64 }
		liveBy := map[uint64]sum{}
		for addr, v := range live[pid] {
			sn.Live = append(sn.Live, event.LiveBlock{
				Addr: addr, Size: v.Size, Time: int64(v.Time),
				Stack: t.stackID(pid, v.Stack),
			})
			s := liveBy[v.Stack]
			liveBy[v.Stack] = sum{s.n + v.Wobjs, s.bytes + v.Wbytes}
		}
		sort.Slice(sn.Live, func(i, j int) bool { return sn.Live[i].Addr < sn.Live[j].Addr })
		for stack, v := range totals[pid] {
			l := liveBy[stack]
			sn.Totals = append(sn.Totals, event.StackTotal{
				Stack:  t.stackID(pid, stack),
				Allocs: v.Allocs, AllocBytes: v.AllocBytes,
				Frees: sub0(v.Allocs, l.n), FreeBytes: sub0(v.AllocBytes, l.bytes),
			})
		}
		sort.Slice(sn.Totals, func(i, j int) bool { return sn.Totals[i].Stack < sn.Totals[j].Stack })
		t.send(t.sink.Snapshot(sn))
	}
	t.settleStacks()
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

// readLive reads the live blocks of the processes in want (pidx to pid),
// by pid and address.
func (t *Tracer) readLive(want map[uint16]uint32) map[uint32]map[uint64]heapscopeLiveVal {
	out := map[uint32]map[uint64]heapscopeLiveVal{}
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
		m := out[pid]
		if m == nil {
			m = map[uint64]heapscopeLiveVal{}
			out[pid] = m
		}
		// An address is in the table once, unless it was caught
		// being claimed again after a free: the newer block is live.
		addr := k & addrMask
		if old, dup := m[addr]; !dup || old.Time < lv.Time {
			m[addr] = lv
		}
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

// purge frees a process's slots in the aggregate tables, once it is no
// longer traced.
func (t *Tracer) purge(pidx uint16) {
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
