package ebpf

import (
	"errors"
	"sort"

	"github.com/cilium/ebpf"

	"github.com/heapscope/heapscope/event"
)

// snapshot sends a Snapshot of each of pids, from the aggregate maps.
func (t *Tracer) snapshot(pids []int, final bool) {
	if len(pids) == 0 {
		return
	}
	want := map[uint32]bool{}
	for _, p := range pids {
		want[uint32(p)] = true
	}
	live := t.readLive(want)
	totals := t.readTotals(want)
	now := monotonic()

	t.out.Lock()
	defer t.out.Unlock()
	for _, p := range pids {
		pid := uint32(p)
		sn := event.Snapshot{PID: pid, Time: now, Final: final}
		// Frees are derived: a block a stack allocated is live or was
		// freed. Of a running process the two maps are read at
		// slightly different times; a count that comes out negative
		// (a block allocated between the reads) is taken as 0.
		type sum struct{ n, bytes uint64 }
		liveBy := map[uint64]sum{}
		for _, e := range live[pid] {
			sn.Live = append(sn.Live, event.LiveBlock{
				Addr: e.k.Addr, Size: e.v.Size, Time: int64(e.v.Time),
				Stack: t.stackID(pid, e.v.Stack),
			})
			s := liveBy[e.v.Stack]
			liveBy[e.v.Stack] = sum{s.n + 1, s.bytes + e.v.Size}
		}
		sort.Slice(sn.Live, func(i, j int) bool { return sn.Live[i].Addr < sn.Live[j].Addr })
		for _, e := range totals[pid] {
			l := liveBy[e.k.Stack]
			sn.Totals = append(sn.Totals, event.StackTotal{
				Stack:  t.stackID(pid, e.k.Stack),
				Allocs: e.v.Allocs, AllocBytes: e.v.AllocBytes,
				Frees: sub0(e.v.Allocs, l.n), FreeBytes: sub0(e.v.AllocBytes, l.bytes),
			})
		}
		sort.Slice(sn.Totals, func(i, j int) bool { return sn.Totals[i].Stack < sn.Totals[j].Stack })
		t.send(t.sink.Snapshot(sn))
	}
}

func sub0(a, b uint64) uint64 {
	if b > a {
		return 0
	}
	return a - b
}

type liveEntry struct {
	k heapscopeLiveKey
	v heapscopeLiveVal
}

type totalEntry struct {
	k heapscopeTotalKey
	v heapscopeTotalVal
}

// readLive reads the live blocks of the processes in want. It reads the
// hash map bucket by bucket (batch lookup), which unlike key-by-key
// iteration does not start over when the program deletes the key it is at.
func (t *Tracer) readLive(want map[uint32]bool) map[uint32][]liveEntry {
	out := map[uint32][]liveEntry{}
	seen := map[liveEntry]bool{}
	add := func(k heapscopeLiveKey, v heapscopeLiveVal) {
		if !want[k.Tgid] {
			return
		}
		e := liveEntry{k, v}
		if !seen[e] {
			seen[e] = true
			out[k.Tgid] = append(out[k.Tgid], e)
		}
	}
	const chunk = 4096
	keys := make([]heapscopeLiveKey, chunk)
	vals := make([]heapscopeLiveVal, chunk)
	var cursor ebpf.MapBatchCursor
	for {
		n, err := t.objs.live.BatchLookup(&cursor, keys, vals, nil)
		for i := 0; i < n; i++ {
			add(keys[i], vals[i])
		}
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return out
		}
		if err != nil {
			break // batch lookups unsupported: iterate instead
		}
	}
	var k heapscopeLiveKey
	var v heapscopeLiveVal
	it := t.objs.live.Iterate()
	for it.Next(&k, &v) {
		add(k, v)
	}
	return out
}

// readTotals reads and sums over CPUs the per-stack totals of the
// processes in want.
func (t *Tracer) readTotals(want map[uint32]bool) map[uint32][]totalEntry {
	out := map[uint32][]totalEntry{}
	var k heapscopeTotalKey
	var perCPU []heapscopeTotalVal
	it := t.objs.totals.Iterate()
	for it.Next(&k, &perCPU) {
		if !want[k.Tgid] {
			continue
		}
		var sum heapscopeTotalVal
		for _, v := range perCPU {
			sum.Allocs += v.Allocs
			sum.AllocBytes += v.AllocBytes
		}
		out[k.Tgid] = append(out[k.Tgid], totalEntry{k, sum})
	}
	return out
}

// purge removes a process's entries from the aggregate maps, once it is
// no longer traced.
func (t *Tracer) purge(pid uint32) {
	var lk heapscopeLiveKey
	var lv heapscopeLiveVal
	var dead []heapscopeLiveKey
	it := t.objs.live.Iterate()
	for it.Next(&lk, &lv) {
		if lk.Tgid == pid {
			dead = append(dead, lk)
		}
	}
	for _, k := range dead {
		t.objs.live.Delete(k)
	}
	var tk heapscopeTotalKey
	var tv []heapscopeTotalVal
	var deadT []heapscopeTotalKey
	it = t.objs.totals.Iterate()
	for it.Next(&tk, &tv) {
		if tk.Tgid == pid {
			deadT = append(deadT, tk)
		}
	}
	for _, k := range deadT {
		t.objs.totals.Delete(k)
	}
}
