package heapscope

import (
	"errors"
	"sync"
	"sync/atomic"

	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/internal/totals"
)

type liveKey struct {
	pid  uint32
	addr uint64
}

type stackKey struct {
	pid uint32
	id  event.StackID
}

// sessionSink is where the provider's records go: to the trace file, to
// the hooks, and to top's totals while a client asks. The provider calls it from one goroutine; the flush timer and
// Stop call it from others, hence the lock.
type sessionSink struct {
	mu     sync.Mutex
	w      traceWriter
	closed bool // after close, records are refused

	hooks atomic.Pointer[Hooks]
	warns atomic.Pointer[func(event.Warning)] // Hooks.OnWarning, apart: it costs events nothing
	// While hooks are installed the sink keeps the live addresses (to tell
	// unmatched frees) and the stacks (to hand hooks their frames). Both
	// cost time per event, so they exist only then.
	live      map[liveKey]struct{}
	stacks    map[stackKey][]uint64
	unmatched atomic.Uint64
	written   atomic.Int64  // bytes in the trace file(s), read without the lock
	sampling  bool          // the session samples: count what it recorded
	sampled   atomic.Uint64 // allocations and reallocations recorded, when sampling
	call      Call
	agg       *totals.Totals  // per-stack totals, while a Top client asks (top.go), or for the whole session
	keepAgg   bool            // agg is kept for the whole session (Properties.Export): top never drops it
	running   map[uint32]bool // processes with a record and no exit: their memory is sampled (memory.go)
	images    map[uint32]int  // Process records by PID: more than one, it executed new programs (leaks.go)
	// heldExits keeps the Exit records of the processes a leak check is
	// checking until its verdict is written (holdExits).
	heldExits map[uint32][]event.Exit
}

// holdExits keeps the Exit records of process pid from the file and the
// totals until releaseExits: a leak check lets the process go once its
// memory is read, and one that then ends at once had its Exit written
// before the verdict, whose blocks the reader (and the totals) had then
// taken out of the heap: the check classified none of them.
func (s *sessionSink) holdExits(pid uint32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.heldExits == nil {
		s.heldExits = map[uint32][]event.Exit{}
	}
	if _, ok := s.heldExits[pid]; !ok {
		s.heldExits[pid] = nil
	}
}

// releaseExits writes the Exit records of pid that holdExits kept.
func (s *sessionSink) releaseExits(pid uint32) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.releaseExitsLocked(pid)
}

func (s *sessionSink) releaseExitsLocked(pid uint32) error {
	held := s.heldExits[pid]
	delete(s.heldExits, pid)
	var errs []error
	for _, e := range held {
		errs = append(errs, s.exitLocked(e))
	}
	return errors.Join(errs...)
}

func (s *sessionSink) setHooks(h Hooks) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if h.OnWarning != nil {
		s.warns.Store(&h.OnWarning)
	} else {
		s.warns.Store(nil)
	}
	if h.OnAlloc == nil && h.OnRealloc == nil && h.OnFree == nil {
		s.hooks.Store(nil)
		s.live, s.stacks = nil, nil
		return
	}
	if s.live == nil {
		s.live = map[liveKey]struct{}{}
		s.stacks = map[stackKey][]uint64{}
	}
	s.hooks.Store(&h)
}

// fill adds what only the sink knows to st.
func (s *sessionSink) fill(st *event.Stats) {
	st.Unmatched += s.unmatched.Load()
	st.Bytes = uint64(s.written.Load())
}

// fileStats counts st as the trace file does (tracefile.Writer.FileStats):
// what the file could not keep is lost, not delivered.
func (s *sessionSink) fileStats(st event.Stats) event.Stats {
	s.mu.Lock()
	w := s.w
	s.mu.Unlock()
	if w == nil {
		return st
	}
	return w.FileStats(st)
}

func (s *sessionSink) Process(p event.Process) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.started(p.PID)
	if s.images == nil {
		s.images = map[uint32]int{}
	}
	s.images[p.PID]++
	if s.agg != nil {
		s.agg.Process(p)
	}
	if s.w != nil && !s.closed {
		return s.w.Process(p)
	}
	return nil
}

func (s *sessionSink) Exit(e event.Exit) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if held, ok := s.heldExits[e.PID]; ok {
		s.heldExits[e.PID] = append(held, e)
		return nil
	}
	return s.exitLocked(e)
}

func (s *sessionSink) exitLocked(e event.Exit) error {
	delete(s.running, e.PID)
	if s.agg != nil {
		s.agg.Exit(e)
	}
	if s.w != nil && !s.closed {
		return s.w.Exit(e)
	}
	return nil
}

func (s *sessionSink) Module(m event.Module) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.agg != nil {
		s.agg.Module(m)
	}
	if s.w != nil && !s.closed {
		return s.w.Module(m)
	}
	return nil
}

func (s *sessionSink) Stack(st event.Stack) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stacks != nil {
		s.stacks[stackKey{st.PID, st.ID}] = append([]uint64(nil), st.Frames...)
	}
	if s.agg != nil {
		s.agg.Stack(st)
	}
	if s.w != nil && !s.closed {
		return s.w.Stack(st)
	}
	return nil
}

func (s *sessionSink) Events(evs []event.Event) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var err error
	if s.w != nil && !s.closed {
		err = s.w.Events(evs)
		s.written.Store(s.w.Written())
	}
	if s.agg != nil {
		s.agg.Events(evs)
	}
	if h := s.hooks.Load(); h != nil {
		for i := range evs {
			s.deliver(h, &evs[i])
		}
	}
	if s.sampling {
		n := 0
		for i := range evs {
			if k := evs[i].Kind; k == event.KindAlloc || k == event.KindRealloc {
				n++
			}
		}
		s.sampled.Add(uint64(n))
	}
	return err
}

// deliver passes one event to its hook, keeping the live set.
func (s *sessionSink) deliver(h *Hooks, e *event.Event) {
	c := &s.call
	*c = Call{Event: *e}
	if e.Stack != 0 {
		c.Frames = s.stacks[stackKey{e.PID, e.Stack}]
	}
	var hook func(*Call)
	switch e.Kind {
	case event.KindAlloc:
		if e.Addr != 0 {
			s.live[liveKey{e.PID, e.Addr}] = struct{}{}
		}
		hook = h.OnAlloc
	case event.KindRealloc:
		if e.OldAddr != 0 {
			c.Unmatched = !s.forget(e.PID, e.OldAddr)
		}
		if e.Addr != 0 {
			s.live[liveKey{e.PID, e.Addr}] = struct{}{}
		}
		hook = h.OnRealloc
	case event.KindFree:
		if e.Addr != 0 {
			c.Unmatched = !s.forget(e.PID, e.Addr)
		}
		hook = h.OnFree
	case event.KindMmap:
		hook = h.OnAlloc
	case event.KindMunmap:
		hook = h.OnFree
	}
	if c.Unmatched {
		s.unmatched.Add(1)
	}
	if hook != nil {
		hook(c)
	}
}

func (s *sessionSink) forget(pid uint32, addr uint64) bool {
	k := liveKey{pid, addr}
	if _, ok := s.live[k]; !ok {
		return false
	}
	delete(s.live, k)
	return true
}

func (s *sessionSink) Snapshot(sn event.Snapshot) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.agg != nil {
		s.agg.Snapshot(sn)
	}
	if s.w != nil && !s.closed {
		return s.w.Snapshot(sn)
	}
	return nil
}

// Stats records from the provider are completed with what the sink counts.
func (s *sessionSink) Stats(st event.Stats) error {
	if n := s.unmatched.Load(); n > st.Unmatched {
		st.Unmatched = n
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.w != nil && !s.closed {
		return s.w.Stats(st)
	}
	return nil
}

// Note passes a note to the trace file, a warning to Hooks.OnWarning, and
// a verdict to top's totals (a leak check's classes).
func (s *sessionSink) Note(n event.Note) error {
	if w, ok := n.(event.Warning); ok {
		if f := s.warns.Load(); f != nil {
			(*f)(w)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.agg != nil {
		s.agg.Note(n)
	}
	if s.w != nil && !s.closed {
		return s.w.Note(n)
	}
	return nil
}

func (s *sessionSink) flush() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.w != nil && !s.closed {
		defer func() { s.written.Store(s.w.Written()) }()
		return s.w.Flush()
	}
	return nil
}

func (s *sessionSink) close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.w == nil || s.closed {
		return nil
	}
	// A check under way holds Session.Stop back (leakState.mu), so none
	// should be kept here; if one is, its Exit still reaches the file.
	var errList []error
	for pid := range s.heldExits {
		errList = append(errList, s.releaseExitsLocked(pid))
	}
	s.closed = true
	err := errors.Join(append(errList, s.w.Close())...)
	s.written.Store(s.w.Written())
	return err
}
