package heapscope

import (
	"errors"
	"fmt"
	"os/exec"
	"sync"

	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/internal/ebpf"
	"github.com/heapscope/heapscope/internal/errs"
	"github.com/heapscope/heapscope/internal/launch"
	"github.com/heapscope/heapscope/internal/stopped"
)

func ebpfAvailable() error { return ebpf.Available() }

// ebpfSource is the eBPF provider's name of each Source.
var ebpfSource = map[Source]ebpf.Source{"": ebpf.SourceUprobes, SourceUprobes: ebpf.SourceUprobes,
	SourceUSDT: ebpf.SourceUSDT, SourceAuto: ebpf.SourceAuto}

// ebpfBackend drives the eBPF provider.
type ebpfBackend struct {
	t *ebpf.Tracer
	// For a launched program, the session ends once the program's status is
	// known, not merely once the tracer saw it exit.
	launched   bool
	hold       bool // a launched program starts stopped, for the session's watch (Session.watchExit)
	exitedOnce sync.Once
	statusIn   chan struct{}
	doneCh     chan struct{}

	sink    *sessionSink
	wmu     sync.Mutex
	watches map[int]*stopped.Watch // of the processes attached, which hold their children unseen
}

func newEBPF(s *Session) (backend, error) {
	t, err := ebpf.New(ebpf.Config{
		Mode:          s.props.Mode,
		Families:      s.props.Families,
		Stacks:        s.stacks,
		RingSize:      s.props.ringBytes(),
		FlushInterval: s.props.FlushInterval,
		NoFollowFork:  s.props.NoFollowFork,
		UnwindTables:  s.props.Unwind == DWARF || s.props.Unwind == Tables,
		Sample:        int64(s.props.Sample),
		MaxStacks:     s.props.MaxStacks,
		UnwindEntries: int(s.props.UnwindTablesSize / 8),
		Source:        ebpfSource[s.props.Source],
	}, s.sink)
	if err != nil {
		return nil, err
	}
	b := &ebpfBackend{t: t, statusIn: make(chan struct{}), doneCh: make(chan struct{}), sink: s.sink, watches: map[int]*stopped.Watch{}}
	b.hold = s.props.checksAtExit() || b.holdsChildren()
	return b, nil
}

// holdsChildren reports whether the tracer holds the children it follows
// (with a SIGSTOP, until their probes are placed): a watch of package
// stopped then keeps each in a stop its parent cannot see (the BPF side's
// SIGSTOP, a group stop, would show a shell that waits with WUNTRACED its
// command "Stopped").
func (b *ebpfBackend) holdsChildren() bool { return b.t.FollowsChildren() == nil }

// watchOptions are what a watch of a traced process needs for the
// tracer's holds.
func (b *ebpfBackend) watchOptions() stopped.WatchOptions {
	return stopped.WatchOptions{Follow: b.holdsChildren(), Held: b.t.Holding}
}

func (b *ebpfBackend) attach(pid int) error {
	b.watch(pid)
	if err := b.t.Attach(pid); err != nil {
		b.unwatch(pid)
		return err
	}
	return nil
}

func (b *ebpfBackend) detach(pid int) error {
	err := b.t.Detach(pid)
	b.unwatch(pid)
	return err
}

// watch seizes process pid, attached, before the tracer follows its
// children, so that it holds them unseen. A process another debugger traces
// cannot be: its children are held with the SIGSTOP, and the trace says so.
func (b *ebpfBackend) watch(pid int) {
	if !b.holdsChildren() {
		return
	}
	w, err := stopped.Seize(pid, b.watchOptions())
	switch {
	case err == nil:
		b.wmu.Lock()
		b.watches[pid] = w
		b.wmu.Unlock()
	case errors.Is(err, errs.ErrNoSuchProcess):
		// Attach says so.
	default:
		b.sink.Note(childrenStopped(pid, err))
	}
}

// childrenStopped is the warning of a process that no watch could seize
// (another debugger traces it): the children the tracer follows are held
// with the visible SIGSTOP.
func childrenStopped(pid int, err error) event.Warning {
	text := fmt.Sprintf("its children are held with SIGSTOP until traced, which a shell waiting for them sees as \"Stopped\": %v", err)
	return event.Warning{PID: uint32(pid), Time: monotonicNow(), Code: "children-stopped", Text: text}
}

// unwatch ends the watch of process pid, if any.
func (b *ebpfBackend) unwatch(pid int) {
	b.wmu.Lock()
	w := b.watches[pid]
	delete(b.watches, pid)
	b.wmu.Unlock()
	if w != nil {
		w.Close()
	}
}
func (b *ebpfBackend) pids() []int          { return b.t.PIDs() }
func (b *ebpfBackend) flush() error         { return b.t.Flush() }
func (b *ebpfBackend) flushPeriodic() error { return b.t.FlushPeriodic() }
func (b *ebpfBackend) stats() event.Stats   { return b.t.Stats() }

// close ends the tracer, which ends its holds through the watches, then
// the watches.
func (b *ebpfBackend) close() error {
	err := b.t.Close()
	b.wmu.Lock()
	ws := b.watches
	b.watches = map[int]*stopped.Watch{}
	b.wmu.Unlock()
	for _, w := range ws {
		w.Close()
	}
	return err
}

func (b *ebpfBackend) warnings() []string {
	var w []string
	for _, err := range b.t.Warnings() {
		w = append(w, err.Error())
	}
	return w
}

func (b *ebpfBackend) setStacks(k event.KindSet) error {
	return b.t.SetStacks(k)
}

func (b *ebpfBackend) launch(cmd *exec.Cmd) error {
	b.launched = true
	go func() {
		<-b.t.Done()
		<-b.statusIn
		close(b.doneCh)
	}()
	start := launch.StartHeld
	if b.hold {
		start = launch.StartStopped // for the session's watch to seize (see Session.watchExit)
	}
	return start(cmd, func(pid int) error { return b.t.Attach(pid, ebpf.Launched()) })
}

func (b *ebpfBackend) exited(pid, status, sig int) {
	b.t.ReportExit(pid, status, sig)
	b.exitedOnce.Do(func() { close(b.statusIn) })
}

func (b *ebpfBackend) done() <-chan struct{} {
	if b.launched {
		return b.doneCh
	}
	return b.t.Done()
}
