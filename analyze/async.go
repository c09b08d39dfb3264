package analyze

import (
	"fmt"
	"sync"

	"github.com/heapscope/heapscope/event"
)

// Async is an event.Sink that passes records on to another sink from a
// goroutine of its own, in order, so that the producer (a trace reader
// decoding chunks) and the consumer (the Model) run on two cores. Event
// batches are copied, since a producer may reuse them; the copies are
// recycled. Close must be called when the records end.
type Async struct {
	to   event.Sink
	ch   chan asyncRec
	pool chan []event.Event
	done chan struct{}

	mu  sync.Mutex
	err error
}

type asyncRec struct {
	evs   []event.Event
	other any // every other record, boxed: they are rare
}

// asyncDepth is how many records may wait: with 1024-event batches, a few
// megabytes at most.
const asyncDepth = 64

// NewAsync starts passing records on to s.
func NewAsync(s event.Sink) *Async {
	a := &Async{
		to:   s,
		ch:   make(chan asyncRec, asyncDepth),
		pool: make(chan []event.Event, asyncDepth+2),
		done: make(chan struct{}),
	}
	go a.run()
	return a
}

func (a *Async) run() {
	defer close(a.done)
	for r := range a.ch {
		if a.failed() != nil {
			continue // drain, so that the producer never blocks
		}
		var err error
		if r.evs != nil {
			err = a.to.Events(r.evs)
			select {
			case a.pool <- r.evs[:0]:
			default:
			}
		} else {
			switch x := r.other.(type) {
			case event.Process:
				err = a.to.Process(x)
			case event.Exit:
				err = a.to.Exit(x)
			case event.Module:
				err = a.to.Module(x)
			case event.Stack:
				err = a.to.Stack(x)
			case event.Snapshot:
				err = a.to.Snapshot(x)
			case event.Stats:
				err = a.to.Stats(x)
			default:
				err = fmt.Errorf("analyze: unknown record %T", x)
			}
		}
		if err != nil {
			a.mu.Lock()
			a.err = err
			a.mu.Unlock()
		}
	}
}

func (a *Async) failed() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.err
}

func (a *Async) send(r asyncRec) error {
	if err := a.failed(); err != nil {
		return err
	}
	a.ch <- r
	return nil
}

// Events queues a copy of evs.
func (a *Async) Events(evs []event.Event) error {
	if len(evs) == 0 {
		return nil
	}
	var buf []event.Event
	select {
	case buf = <-a.pool:
	default:
	}
	return a.send(asyncRec{evs: append(buf, evs...)})
}

// Process queues p.
func (a *Async) Process(p event.Process) error { return a.send(asyncRec{other: p}) }

// Exit queues e.
func (a *Async) Exit(e event.Exit) error { return a.send(asyncRec{other: e}) }

// Module queues m.
func (a *Async) Module(m event.Module) error { return a.send(asyncRec{other: m}) }

// Stack queues a copy of s.
func (a *Async) Stack(s event.Stack) error {
	s.Frames = append([]uint64(nil), s.Frames...)
	return a.send(asyncRec{other: s})
}

// Snapshot queues a copy of s.
func (a *Async) Snapshot(s event.Snapshot) error {
	s.Live = append([]event.LiveBlock(nil), s.Live...)
	s.Totals = append([]event.StackTotal(nil), s.Totals...)
	return a.send(asyncRec{other: s})
}

// Stats queues s.
func (a *Async) Stats(s event.Stats) error { return a.send(asyncRec{other: s}) }

// Close waits until the sink has consumed every record queued and returns
// its first error. No record may be sent after Close.
func (a *Async) Close() error {
	close(a.ch)
	<-a.done
	return a.failed()
}
