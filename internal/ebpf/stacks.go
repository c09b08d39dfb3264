package ebpf

import (
	"sort"

	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/internal/proc"
)

// stackKey identifies a stack as the BPF side reports it: the stack map's
// id, and the caller that replaces its first frame when the walk missed it.
// Ids of the stack map are shared by all processes; event.StackID is
// scoped by process, so the key holds the pid.
type stackKey struct {
	pid    uint32
	id     int32
	caller uint64
	flags  uint8
}

// Event flags (bpf/heapscope.h).
const (
	efEntryLike = 1 // the probed instruction is push %rbp or endbr64
	efSPMoved   = 2 // ... and the stack pointer moved before it
)

// Aggregate mode packs the flags into the caller's top byte.
func splitCaller(c uint64) (uint64, uint8) { return c &^ (0xff << 56), uint8(c >> 56) }

// stackID returns the event.StackID of a BPF stack, sending its Stack record
// (and any Module its frames need) the first time. Called with out held.
func (t *Tracer) stackID(pid uint32, id int32, caller uint64, flags uint8) event.StackID {
	if id < 0 {
		return 0
	}
	k := stackKey{pid, id, caller, flags}
	if sid, ok := t.stacks[k]; ok {
		return sid
	}
	var buf [maxFrames]uint64
	if err := t.objs.stacks.Lookup(uint32(id), &buf); err != nil {
		// Entries are never deleted, so this does not happen; if it
		// does, the event goes without its stack, counted.
		t.userLost.Add(1)
		return 0
	}
	n := 0
	for n < len(buf) && buf[n] != 0 {
		n++
	}
	frames := fixFrames(buf[:n], caller, flags)
	t.covered(pid, frames)
	t.nextStack[pid]++
	sid := t.nextStack[pid]
	t.stacks[k] = sid
	t.send(t.sink.Stack(event.Stack{PID: pid, ID: sid, Frames: frames}))
	return sid
}

// fixFrames turns a stack taken at a probe inside an allocator function
// into one that starts in its caller. The frame-pointer walk from there
// sees the allocator's own instruction first and then skips the caller (the
// allocator set up no frame): the caller, read from the top of the stack by
// the BPF side, replaces the first frame. Linux 6.11+ adds that word itself
// when the probed instruction looks like a function entry (push %rbp,
// endbr64); that frame is dropped.
func fixFrames(raw []uint64, caller uint64, flags uint8) []uint64 {
	if caller == 0 {
		return append([]uint64(nil), raw...)
	}
	frames := []uint64{caller}
	if len(raw) == 0 {
		return frames
	}
	rest := raw[1:]
	if flags&efEntryLike != 0 && len(rest) > 0 {
		switch {
		case flags&efSPMoved == 0 && rest[0] == caller:
			rest = rest[1:]
		case flags&efSPMoved != 0 && kernelAddsEntryFrame:
			rest = rest[1:]
		}
	}
	return append(frames, rest...)
}

// moduleSet is what has been sent of a process's executable mappings.
type moduleSet struct {
	mods []event.Module // sorted by Start
}

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
		mods, err := proc.Modules(int(pid), monotonic())
		if err == nil {
			t.sendModules(ms, mods)
		}
		return
	}
}
