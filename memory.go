package heapscope

import (
	"golang.org/x/sys/unix"

	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/internal/proc"
)

// The session samples the resident memory of each traced process at every
// flush (and at its stop), into the trace as event.Memory notes, so that a
// report can set RSS beside the heap it traced: the difference is the
// allocator's overhead and free space, stacks, code and other mappings.

// started notes that pid is running. s.mu held.
func (s *sessionSink) started(pid uint32) {
	if s.running == nil {
		s.running = make(map[uint32]bool)
	}
	s.running[pid] = true
}

// sampleMemory writes a memory sample of every running process. A process
// that has gone (its exit not delivered yet) is skipped.
func (s *sessionSink) sampleMemory() {
	s.mu.Lock()
	pids := make([]uint32, 0, len(s.running))
	for pid := range s.running {
		pids = append(pids, pid)
	}
	s.mu.Unlock()
	for _, pid := range pids {
		m, err := proc.ReadMemory(int(pid))
		if err != nil || m.RSS == 0 { // gone, or a zombie
			continue
		}
		m.Time = monotonicNow()
		s.Note(m) // an error of the file is the writer's, returned by its next call
	}
}

func monotonicNow() int64 {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts) != nil {
		return 0
	}
	return ts.Nano()
}

var _ event.Sink = (*sessionSink)(nil)
