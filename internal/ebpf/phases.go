package ebpf

import (
	"sync"
	"time"
)

// Phase is one step of starting to trace, and how long it took: New's
// loading of the BPF objects, and for each process attached, reading what
// it maps, placing its probes and loading its unwind tables.
type Phase struct {
	Name string
	PID  int // 0: New's
	// Start is when it began, from New's start; Took how long it took.
	Start, Took time.Duration
}

// maxPhases bounds the phases kept (a session following a fork burst
// attaches thousands of processes).
const maxPhases = 256

type phases struct {
	mu   sync.Mutex
	t0   time.Time
	list []Phase
}

// since records the phase name of pid that began at start and ends now.
func (p *phases) since(name string, pid int, start time.Time) {
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.list) < maxPhases {
		p.list = append(p.list, Phase{Name: name, PID: pid, Start: start.Sub(p.t0), Took: now.Sub(start)})
	}
}

// Phases returns the first phases of starting to trace, in the order they
// ended: what a slow start spent its time on.
func (t *Tracer) Phases() []Phase {
	t.phases.mu.Lock()
	defer t.phases.mu.Unlock()
	return append([]Phase(nil), t.phases.list...)
}
