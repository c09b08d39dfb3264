package query

import (
	"github.com/heapscope/heapscope/event"
)

// async passes events and stacks to a builder on a goroutine of its own, in
// order, so that decoding the trace and the heap model (on the reader's
// goroutine) overlap with indexing. The reader reuses its batches: async
// copies them into buffers of its own, recycled through a pool.
type async struct {
	b    *builder
	ch   chan asyncRec
	pool chan []event.Event
	buf  []event.Event
	done chan struct{}
}

type asyncRec struct {
	evs    []event.Event
	stack  *event.Stack
	exit   *event.Exit
	census *event.Census
}

// asyncBatch is how many events a buffer holds: a hand-over costs the
// builder's goroutine a wake-up, worth a few hundred events.
const asyncBatch = 8192

func newAsync(b *builder) *async {
	a := &async{b: b, ch: make(chan asyncRec, 8), pool: make(chan []event.Event, 10), done: make(chan struct{})}
	go func() {
		defer close(a.done)
		background()
		for r := range a.ch {
			if r.stack != nil {
				b.Stack(*r.stack)
				continue
			}
			if r.exit != nil {
				b.Exit(*r.exit)
				continue
			}
			if r.census != nil {
				b.Note(*r.census)
				continue
			}
			b.Events(r.evs)
			select {
			case a.pool <- r.evs[:0]:
			default:
			}
		}
	}()
	return a
}

var _ event.Sink = (*async)(nil)

func (a *async) Process(event.Process) error   { return nil }
func (a *async) Module(event.Module) error     { return nil }
func (a *async) Snapshot(event.Snapshot) error { return nil }
func (a *async) Stats(event.Stats) error       { return nil }

// Note passes a census (census.go), in its place among the events.
func (a *async) Note(n event.Note) error {
	if c, ok := n.(event.Census); ok {
		a.flush()
		a.ch <- asyncRec{census: &c}
	}
	return nil
}

func (a *async) Stack(st event.Stack) error {
	a.flush()
	st.Frames = append([]uint64(nil), st.Frames...)
	a.ch <- asyncRec{stack: &st}
	return nil
}

// Exit passes an exit in its place among the events: it ends the
// process's live blocks.
func (a *async) Exit(x event.Exit) error {
	a.flush()
	a.ch <- asyncRec{exit: &x}
	return nil
}

func (a *async) Events(evs []event.Event) error {
	for len(evs) > 0 {
		if a.buf == nil {
			select {
			case a.buf = <-a.pool:
			default:
				a.buf = make([]event.Event, 0, asyncBatch)
			}
		}
		n := min(len(evs), cap(a.buf)-len(a.buf))
		a.buf = append(a.buf, evs[:n]...)
		evs = evs[n:]
		if len(a.buf) == cap(a.buf) {
			a.flush()
		}
	}
	return nil
}

func (a *async) flush() {
	if len(a.buf) > 0 {
		a.ch <- asyncRec{evs: a.buf}
		a.buf = nil
	}
}

// wait hands over what is left and waits until the builder has it all.
func (a *async) wait() {
	a.flush()
	close(a.ch)
	<-a.done
}
