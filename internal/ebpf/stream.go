package ebpf

import (
	"encoding/binary"
	"errors"
	"os"
	"time"

	"github.com/cilium/ebpf/ringbuf"

	"github.com/heapscope/heapscope/event"
)

// eventSize is sizeof(struct event).
const eventSize = 64

// maxBatch bounds the events handed to the sink in one call.
const maxBatch = 4096

// read is the ring buffer's consumer. The BPF side wakes it only when a
// quarter of the ring is queued; otherwise the deadline, FlushInterval
// away, bounds how long an event waits. Only this goroutine touches the
// reader's deadline: ringbuf.Reader.SetDeadline from another goroutine
// would block on the reader's lock for as long as a read waits. Flush and
// Close interrupt it instead.
func (t *Tracer) read() {
	defer close(t.readerDone)
	var rec ringbuf.Record
	var pending []heapscopeEvent
	var lib heapscopeLib
	var note heapscopeNote
	// The deadline is set after each delivery: an event waits at most
	// FlushInterval after the last one. (Setting it for each record
	// costs a clock read per event.)
	deadline := func() {
		if t.cfg.Mode == event.Stream {
			t.rd.SetDeadline(time.Now().Add(t.cfg.FlushInterval))
		} // else only library records, which wake the reader
	}
	deliver := func() {
		if len(pending) > 0 {
			t.deliver(pending)
			pending = pending[:0]
		}
		deadline()
	}
	deadline()
	for {
		err := t.rd.ReadInto(&rec)
		switch {
		case err == nil:
			if e, ok := decodeEvent(rec.RawSample); ok {
				pending = append(pending, e)
			} else if decodeLib(rec.RawSample, &lib) {
				// Events after it may need its modules: keep the
				// order.
				deliver()
				t.library(&lib)
			} else if decodeNote(rec.RawSample, &note) {
				// What the process did before is delivered
				// before its follower ends the image.
				deliver()
				t.note(note)
			}
			if rec.Remaining == 0 || len(pending) >= maxBatch {
				deliver()
			}
		case errors.Is(err, os.ErrDeadlineExceeded):
			deliver()
		case errors.Is(err, ringbuf.ErrFlushed):
			deliver()
			t.flushed <- struct{}{}
		case errors.Is(err, ringbuf.ErrClosed):
			deliver()
			return
		default:
			deliver()
			t.out.Lock()
			t.readerErr = err
			t.out.Unlock()
			return
		}
	}
}

// drain delivers everything the ring holds now.
func (t *Tracer) drain() {
	t.flushMu.Lock()
	defer t.flushMu.Unlock()
	if err := t.rd.Flush(); err != nil {
		return // closed
	}
	select {
	case <-t.flushed:
	case <-t.readerDone:
	}
}

func decodeEvent(b []byte) (heapscopeEvent, bool) {
	if len(b) != eventSize {
		return heapscopeEvent{}, false
	}
	le := binary.LittleEndian
	return heapscopeEvent{
		Time:    le.Uint64(b[0:]),
		Addr:    le.Uint64(b[8:]),
		Size:    le.Uint64(b[16:]),
		OldAddr: le.Uint64(b[24:]),
		OldSize: le.Uint64(b[32:]),
		Stack:   le.Uint64(b[40:]),
		Pid:     le.Uint32(b[48:]),
		Tid:     le.Uint32(b[52:]),
		Kind:    b[56],
		Func:    b[57],
		Heap:    b[58],
	}, true
}

// deliver sends raw events to the sink, preceded by the Stack (and Module)
// records they need. Events of processes no longer traced are dropped.
func (t *Tracer) deliver(raw []heapscopeEvent) {
	t.out.Lock()
	defer t.out.Unlock()
	batch := t.batch[:0]
	for _, r := range raw {
		if !t.known[r.Pid] {
			continue
		}
		batch = append(batch, event.Event{
			Time:    int64(r.Time),
			PID:     r.Pid,
			TID:     r.Tid,
			Kind:    event.Kind(r.Kind),
			Func:    event.Func(r.Func),
			Heap:    event.Heap(r.Heap),
			Stack:   t.stackID(r.Pid, r.Stack),
			Addr:    r.Addr,
			Size:    r.Size,
			OldAddr: r.OldAddr,
			OldSize: r.OldSize,
		})
	}
	if len(batch) > 0 {
		t.send(t.sink.Events(batch))
		t.delivered.Add(uint64(len(batch)))
	}
	t.batch = batch
}

// libSize is sizeof(struct lib).
const libSize = 16 + 256

func decodeLib(b []byte, l *heapscopeLib) bool {
	if len(b) != libSize {
		return false
	}
	le := binary.LittleEndian
	l.Base = le.Uint64(b[0:])
	l.Pid = le.Uint32(b[8:])
	l.Index = le.Uint32(b[12:])
	for i := range l.Name {
		l.Name[i] = int8(b[16+i])
	}
	return true
}
