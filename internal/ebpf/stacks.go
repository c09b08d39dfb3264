package ebpf

import (
	"sort"
	"time"

	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/internal/proc"
)

// stackKey identifies a stack as the BPF side reports it: the hash of its
// frames, the key of the stacks map, shared by all processes. event.StackID
// is scoped by process, so the key holds the pid.
type stackKey struct {
	pid  uint32
	hash uint64
}

// stackID returns the event.StackID of a BPF stack, sending its Stack record
// (and any Module its frames need) the first time. Called with out held.
func (t *Tracer) stackID(pid uint32, hash uint64) event.StackID {
	if hash == 0 {
		return 0
	}
	k := stackKey{pid, hash}
	if k == t.lastStack {
		return t.lastStackID // a loop allocates from one stack many times
	}
	if sid, ok := t.stacks[k]; ok {
		t.lastStack, t.lastStackID = k, sid
		return sid
	}
	var st heapscopeStack
	if err := t.objs.stacks.Lookup(hash, &st); err != nil {
		// Its frames are deleted only once read (and the key scoped by
		// process), so this does not happen; if it does, the event goes
		// without its stack, counted.
		t.userLost.Add(1)
		return 0
	}
	t.stacksRead = append(t.stacksRead, hash)
	n := 0
	for n < len(st.Ip) && st.Ip[n] != 0 {
		n++
	}
	frames := append([]uint64(nil), st.Ip[:n]...)
	t.covered(pid, frames)
	t.nextStack[pid]++
	sid := t.nextStack[pid]
	t.stacks[k] = sid
	t.send(t.sink.Stack(event.Stack{PID: pid, ID: sid, Frames: frames}))
	return sid
}

// settleStacks tells the BPF side which stacks this process has read since
// the last call: their keys go in the known map, and their frames out of
// the stack map, which then holds only stacks in flight. A key the known
// map has no room for keeps its frames. Called with out held.
func (t *Tracer) settleStacks() {
	if len(t.stacksRead) == 0 {
		return
	}
	keys := t.stacksRead
	vals := make([]uint8, len(keys))
	n, err := t.objs.known.BatchUpdate(keys, vals, nil)
	if err != nil && n == 0 {
		// Batch operations need Linux 5.6; one at a time, then.
		for n < len(keys) && t.objs.known.Put(keys[n], uint8(0)) == nil {
			n++
		}
	}
	if n > 0 {
		if _, err := t.objs.stacks.BatchDelete(keys[:n], nil); err != nil {
			for _, k := range keys[:n] {
				t.objs.stacks.Delete(k)
			}
		}
	}
	t.stacksRead = t.stacksRead[:0]
}

// moduleSet is what has been sent of a process's executable mappings.
type moduleSet struct {
	mods []event.Module // sorted by Start
	read int64          // when the process's maps were last read
}

// rereadMaps is how often at most covered reads a process's maps again.
// Frames outside every file mapping are common (a frame-pointer walk
// through code built without them yields heap and stack addresses), and
// each read costs a /proc walk and build-id reads: reading on every such
// stack stalled the consumer of a python3 run until the ring overflowed.
// Libraries loaded with dlopen are reported by the loader probe anyway.
const rereadMaps = 100 * time.Millisecond

func (ms *moduleSet) find(addr uint64) bool {
	i := sort.Search(len(ms.mods), func(i int) bool { return ms.mods[i].End > addr })
	return i < len(ms.mods) && ms.mods[i].Start <= addr
}

// sendModules sends the modules of mods not sent before. Called with out
// held.
func (t *Tracer) sendModules(ms *moduleSet, mods []event.Module) {
	for _, m := range mods {
		dup := false
		for _, o := range ms.mods {
			// The same mapping may come from the maps and from the
			// loader, under two names of one file.
			if o.Start == m.Start && o.End == m.End && o.Offset == m.Offset {
				dup = true
				break
			}
		}
		if dup {
			continue
		}
		t.send(t.sink.Module(m))
		ms.mods = append(ms.mods, m)
	}
	sort.Slice(ms.mods, func(i, j int) bool { return ms.mods[i].Start < ms.mods[j].Start })
}

// covered makes sure a Module has been sent for every frame that lies in a
// file mapping: a frame outside the known ones (a library mapped after
// attach) makes it read the process's maps again. Called with out held.
func (t *Tracer) covered(pid uint32, frames []uint64) {
	ms := t.modules[pid]
	if ms == nil {
		return
	}
	for _, f := range frames {
		// A return address may be one past the end of its mapping when
		// the call is the mapping's last instruction.
		if f == 0 || ms.find(f-1) {
			continue
		}
		now := monotonic()
		if now-ms.read < int64(rereadMaps) {
			return
		}
		ms.read = now
		// Away from this goroutine: the files are the process's.
		if mods, ok := t.readModules(pid, ms, func() ([]event.Module, error) { return proc.Modules(int(pid), now) }); ok {
			t.sendModules(ms, mods)
		}
		return
	}
}
