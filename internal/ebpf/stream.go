package ebpf

import (
	"encoding/binary"
	"errors"
	"os"
	"runtime"
	"sync"
	"time"

	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"

	"github.com/heapscope/heapscope/event"
)

// eventSize is sizeof(struct event).
const eventSize = 64

// maxBatch bounds the events handed to the sink in one call.
const maxBatch = 4096

// The ring's consumer is two goroutines: read takes records out of the
// ring as fast as they come and queues them in this process's memory;
// forward hands them to the sink in order. The sink may stall (a chunk of
// the trace compressed and written, a garbage collection: 30 to 120 ms
// were measured for one batch of 4096 events); the ring does not have to
// hold what arrives meanwhile, the queue does, up to maxQueued events.
// Past that read waits, the ring fills, and the BPF side counts what it
// cannot queue (event.LostRingFull).

// maxQueued bounds the events queued between read and forward: 64 MiB.
const maxQueued = 1 << 20

// readerNice is the scheduling priority of the ring reader's thread.
const readerNice = -10

// item is one entry of the queue: a batch of events, a library record, or
// (neither) the end of a Flush.
type item struct {
	events []heapscopeEvent
	lib    *heapscopeLib
}

// queue is the FIFO between read and forward.
type queue struct {
	mu     sync.Mutex
	cond   sync.Cond
	items  []item
	events int // events in items
	closed bool
	free   [][]heapscopeEvent // batches handed back, for reuse
}

func newQueue() *queue {
	q := &queue{}
	q.cond.L = &q.mu
	return q
}

// push appends it, waiting while the queue is full.
func (q *queue) push(it item) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for q.events >= maxQueued && !q.closed {
		q.cond.Wait()
	}
	q.items = append(q.items, it)
	q.events += len(it.events)
	q.cond.Broadcast()
}

// pop takes the first item, waiting for one; false once the queue is
// closed and empty.
func (q *queue) pop() (item, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.items) == 0 && !q.closed {
		q.cond.Wait()
	}
	if len(q.items) == 0 {
		return item{}, false
	}
	it := q.items[0]
	q.items[0] = item{}
	q.items = q.items[1:]
	q.events -= len(it.events)
	q.cond.Broadcast()
	return it, true
}

// batch returns an empty batch, reused if one was handed back.
func (q *queue) batch() []heapscopeEvent {
	q.mu.Lock()
	defer q.mu.Unlock()
	if n := len(q.free); n > 0 {
		b := q.free[n-1]
		q.free = q.free[:n-1]
		return b[:0]
	}
	return make([]heapscopeEvent, 0, maxBatch)
}

func (q *queue) recycle(b []heapscopeEvent) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.free) < 64 && cap(b) == maxBatch {
		q.free = append(q.free, b)
	}
}

func (q *queue) close() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.closed = true
	q.cond.Broadcast()
}

// read is the ring buffer's reader. The BPF side wakes it only when a
// quarter of the ring is queued; otherwise the deadline, FlushInterval
// away, bounds how long an event waits. Only this goroutine touches the
// reader's deadline: ringbuf.Reader.SetDeadline from another goroutine
// would block on the reader's lock for as long as a read waits. Flush and
// Close interrupt it instead. Notes of forks and execs are handled at
// once (their followers deliver what came before through drain).
func (t *Tracer) read() {
	q := t.queue
	defer q.close()
	// The reader does little, but must do it before the ring fills: on a
	// busy machine its thread runs ahead of other work (a nice of -10; as
	// root, and best effort). The thread is this goroutine's alone, and
	// ends with it (it is never unlocked): no other goroutine runs at
	// that priority.
	runtime.LockOSThread()
	unix.Setpriority(unix.PRIO_PROCESS, unix.Gettid(), readerNice)
	var rec ringbuf.Record
	pending := q.batch()
	var note heapscopeNote
	// The deadline is set after each batch: an event waits at most
	// FlushInterval after the last one. (Setting it for each record
	// costs a clock read per event.)
	every := t.cfg.FlushInterval
	if every == 0 { // aggregate mode's snapshots only at Flush: what it spills still comes
		every = DefaultFlushInterval
	}
	deadline := func() { t.rd.SetDeadline(time.Now().Add(every)) }
	queue := func() {
		if len(pending) > 0 {
			q.push(item{events: pending})
			pending = q.batch()
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
			} else if lib := new(heapscopeLib); decodeLib(rec.RawSample, lib) {
				// Events after it may need its modules: keep the
				// order.
				queue()
				q.push(item{lib: lib})
			} else if decodeNote(rec.RawSample, &note) {
				t.note(note)
			}
			if rec.Remaining == 0 || len(pending) >= maxBatch {
				queue()
			}
		case errors.Is(err, os.ErrDeadlineExceeded):
			queue()
		case errors.Is(err, ringbuf.ErrFlushed):
			queue()
			q.push(item{}) // the end of the flush
		case errors.Is(err, ringbuf.ErrClosed):
			queue()
			return
		default:
			queue()
			t.out.Lock()
			t.readerErr = err
			t.out.Unlock()
			return
		}
	}
}

// forward hands what read queued to the sink, in order, until read has
// ended and the queue is empty.
func (t *Tracer) forward() {
	defer close(t.readerDone)
	// As the reader's, this thread runs ahead of other work: when it falls
	// behind for longer than the queue holds, the ring fills.
	runtime.LockOSThread()
	unix.Setpriority(unix.PRIO_PROCESS, unix.Gettid(), readerNice)
	q := t.queue
	for {
		it, ok := q.pop()
		switch {
		case !ok:
			return
		case it.events != nil:
			t.deliver(it.events)
			q.recycle(it.events)
		case it.lib != nil:
			t.library(it.lib)
		default:
			t.flushed <- struct{}{}
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
		Spill:   b[59],
		Wobjs:   le.Uint32(b[60:]),
	}, true
}

// deliver sends raw events to the sink, preceded by the Stack (and Module)
// records they need. Events of processes no longer traced are dropped.
func (t *Tracer) deliver(raw []heapscopeEvent) {
	t.out.Lock()
	defer t.out.Unlock()
	if t.cfg.Mode == event.Aggregate {
		t.spill(raw)
		return
	}
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
	t.settleStacks()
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
