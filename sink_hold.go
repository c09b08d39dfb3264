package heapscope

import (
	"errors"

	"github.com/heapscope/heapscope/event"
)

// maxHeldEvents bounds the events a held writer keeps in memory (64 bytes
// each): past it the census is given up and the events go to the file.
const maxHeldEvents = 1 << 20

// heldWriter stands in for the trace file's writer while a census is taken:
// it keeps the records the provider delivers, in order, so that the
// census's note can be written among them at the instant of its stop,
// after the events before the stop and before those after it, however late
// the census is finished. Hooks and top's totals are not held: only what
// the file is to hold in order. Its methods are called with the sink's
// lock held.
type heldWriter struct {
	s      *sessionSink
	w      traceWriter // the writer held for
	recs   []heldRec
	events int
	// gone is set when the hold ended without the census: too many
	// events, or the session closed.
	gone bool
}

// heldRec is one record held: events, or another record.
type heldRec struct {
	evs []event.Event
	f   func(traceWriter) error
}

func (r heldRec) write(w traceWriter) error {
	if r.f != nil {
		return r.f(w)
	}
	return w.Events(r.evs)
}

// hold starts holding the records bound for the trace file; nil when the
// session writes none or is closed. One census holds at a time
// (Session.censusMu).
func (s *sessionSink) hold() *heldWriter {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.w == nil || s.closed {
		return nil
	}
	h := &heldWriter{s: s, w: s.w}
	s.w = h
	return h
}

// mark is where the records held so far end: where a note taken now goes.
func (h *heldWriter) mark() int {
	h.s.mu.Lock()
	defer h.s.mu.Unlock()
	return len(h.recs)
}

// release writes the records held, with notes at mark, and lets records go
// to the file again. It reports false when the hold had ended already (the
// notes are then not written).
func (h *heldWriter) release(mark int, notes []event.Note) (bool, error) {
	h.s.mu.Lock()
	defer h.s.mu.Unlock()
	if h.gone {
		return false, nil
	}
	var errs []error
	for i, r := range h.recs {
		if i == mark {
			errs = append(errs, writeNotes(h.w, notes))
		}
		errs = append(errs, r.write(h.w))
	}
	if mark >= len(h.recs) {
		errs = append(errs, writeNotes(h.w, notes))
	}
	h.end()
	if h.s.agg != nil {
		// Top's totals, on meanwhile, take the census's blocks too: a
		// leak check of the process then knows every block (leaks.go).
		for _, n := range notes {
			h.s.agg.Note(n)
		}
	}
	if h.s.live != nil {
		// Hooks are installed: the blocks the census found are live, so
		// that their frees from now on are not unmatched (those that came
		// while the census was finished were).
		for _, n := range notes {
			if c, ok := n.(event.Census); ok {
				for _, b := range c.Blocks {
					h.s.live[liveKey{c.PID, b.Addr}] = struct{}{}
				}
			}
		}
	}
	return true, errors.Join(errs...)
}

func writeNotes(w traceWriter, notes []event.Note) error {
	var errs []error
	for _, n := range notes {
		errs = append(errs, w.Note(n))
	}
	return errors.Join(errs...)
}

// drop ends the hold without notes: what was held goes to the file.
func (h *heldWriter) drop() error {
	h.s.mu.Lock()
	defer h.s.mu.Unlock()
	return h.dropLocked()
}

func (h *heldWriter) dropLocked() error {
	if h.gone {
		return nil
	}
	var errs []error
	for _, r := range h.recs {
		errs = append(errs, r.write(h.w))
	}
	h.end()
	h.gone = true
	return errors.Join(errs...)
}

// end puts the writer back.
func (h *heldWriter) end() {
	h.recs = nil
	if h.s.w == h {
		h.s.w = h.w
	}
}

func (h *heldWriter) keep(r func(traceWriter) error) error {
	if h.gone {
		return r(h.w)
	}
	h.recs = append(h.recs, heldRec{f: r})
	return nil
}

// lastFrees returns, of the threads tids of process pid, the address each
// one's last event held before mark freed, for those whose last event is a
// free.
func (h *heldWriter) lastFrees(mark int, pid uint32, tids []int) map[uint64]bool {
	h.s.mu.Lock()
	defer h.s.mu.Unlock()
	want := map[uint32]bool{}
	for _, t := range tids {
		want[uint32(t)] = true
	}
	out := map[uint64]bool{}
	for i := min(mark, len(h.recs)) - 1; i >= 0 && len(want) > 0; i-- {
		evs := h.recs[i].evs
		for j := len(evs) - 1; j >= 0; j-- {
			e := &evs[j]
			if e.PID != pid || !want[e.TID] {
				continue
			}
			delete(want, e.TID)
			if e.Kind == event.KindFree && e.Addr != 0 {
				out[e.Addr] = true
			}
		}
	}
	return out
}

func (h *heldWriter) Process(p event.Process) error {
	p.Cmdline = append([]string(nil), p.Cmdline...)
	return h.keep(func(w traceWriter) error { return w.Process(p) })
}

func (h *heldWriter) Exit(e event.Exit) error {
	return h.keep(func(w traceWriter) error { return w.Exit(e) })
}

func (h *heldWriter) Module(m event.Module) error {
	return h.keep(func(w traceWriter) error { return w.Module(m) })
}

func (h *heldWriter) Stack(st event.Stack) error {
	st.Frames = append([]uint64(nil), st.Frames...)
	return h.keep(func(w traceWriter) error { return w.Stack(st) })
}

func (h *heldWriter) Events(evs []event.Event) error {
	if h.events+len(evs) > maxHeldEvents {
		// The process runs on while its census is finished and named;
		// more than this is not kept in memory for it.
		err := h.dropLocked()
		return errors.Join(err, h.w.Events(evs))
	}
	h.events += len(evs)
	if h.gone {
		return h.w.Events(evs)
	}
	h.recs = append(h.recs, heldRec{evs: append([]event.Event(nil), evs...)}) // the provider reuses its slice
	return nil
}

func (h *heldWriter) Snapshot(sn event.Snapshot) error {
	sn.Live = append([]event.LiveBlock(nil), sn.Live...)
	sn.Totals = append([]event.StackTotal(nil), sn.Totals...)
	return h.keep(func(w traceWriter) error { return w.Snapshot(sn) })
}

func (h *heldWriter) Stats(st event.Stats) error {
	return h.keep(func(w traceWriter) error { return w.Stats(st) })
}

func (h *heldWriter) Note(n event.Note) error {
	return h.keep(func(w traceWriter) error { return w.Note(n) })
}

// Flush writes out what the file has, not what is held: that waits for
// the census.
func (h *heldWriter) Flush() error { return h.w.Flush() }

// Close ends the hold (the session stops before the census is done) and
// closes the file.
func (h *heldWriter) Close() error {
	err := h.dropLocked()
	return errors.Join(err, h.w.Close())
}

func (h *heldWriter) Written() int64                       { return h.w.Written() }
func (h *heldWriter) FileStats(st event.Stats) event.Stats { return h.w.FileStats(st) }
func (h *heldWriter) Files() []string                      { return h.w.Files() }
func (h *heldWriter) Commit() error                        { return h.w.Commit() }
