package analyze

import "github.com/heapscope/heapscope/event"

// Verdict describes one heap scan of a process that the trace records (an
// event.Verdict): when it was taken, by whose rules, how long the process
// was stopped for it, and what it could and could not do. The classes it
// gave are in the stacks' Counters.Classes.
type Verdict struct {
	PID   uint32
	Time  int64
	Rules event.Rules
	// Pause is how long the process was stopped for the scan (ns);
	// Elapsed is how long the scan took.
	Pause, Elapsed int64
	// Complete: every root and block the scan needed was read. When not,
	// it left unclassified (event.ClassUnknown) every block whose class
	// the missing memory could have changed.
	Complete bool
	// Partial: the scan did not know every live block of the process
	// (event.Verdict.Partial): a lost block is certain, a still reachable
	// one may be held only by memory already freed.
	Partial bool
	// AtExit: the process was held at its exit.
	AtExit bool
	// Listed is the blocks the scan classified; Applied, those of them the
	// model had live at the scan's time (the others were made before the
	// window, or their events were lost). The latest scan that lists a
	// block gives its class.
	Listed, Applied uint64
}

// verdict gives the blocks v lists their classes: each block keeps the
// class of the latest scan that listed it, until it is freed. A process
// counted by snapshots (aggregate mode) or a sampled trace (whose blocks
// stand for others that were not recorded) takes none.
func (m *Model) verdict(v *event.Verdict) {
	info := Verdict{PID: v.PID, Time: v.Time, Rules: v.Rules, Pause: v.Pause, Elapsed: v.Elapsed,
		Complete: v.Complete, Partial: v.Partial, AtExit: v.AtExit, Listed: uint64(len(v.Blocks))}
	defer func() { m.verdicts = append(m.verdicts, info) }()
	p := m.procs[v.PID]
	if p == nil || m.rate > 0 || m.snaps[v.PID] != nil {
		return
	}
	for _, bc := range v.Blocks {
		if !bc.Class.Valid() {
			continue
		}
		b, ok := m.blocks.lookup(p, bc.Addr)
		if !ok {
			continue
		}
		s := &m.sites[b.site]
		if s.classes == nil {
			s.classes = new([event.NumClasses]Amount)
		}
		if old, ok := b.class(); ok {
			s.classes[old].Bytes -= b.size
			s.classes[old].Blocks--
		}
		s.classes[bc.Class].Bytes += b.size
		s.classes[bc.Class].Blocks++
		m.blocks.put(p, bc.Addr, b.withClass(bc.Class))
		info.Applied++
	}
}
