package heapscope

import (
	"os/exec"
	"sync"

	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/internal/ebpf"
	"github.com/heapscope/heapscope/internal/launch"
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
	hold       bool // a launched program starts stopped, for a leak check at its exit
	exitedOnce sync.Once
	statusIn   chan struct{}
	doneCh     chan struct{}
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
	return &ebpfBackend{t: t, statusIn: make(chan struct{}), doneCh: make(chan struct{}), hold: s.props.checksAtExit()}, nil
}

func (b *ebpfBackend) attach(pid int) error { return b.t.Attach(pid) }
func (b *ebpfBackend) detach(pid int) error { return b.t.Detach(pid) }
func (b *ebpfBackend) pids() []int          { return b.t.PIDs() }
func (b *ebpfBackend) flush() error         { return b.t.Flush() }
func (b *ebpfBackend) flushPeriodic() error { return b.t.FlushPeriodic() }
func (b *ebpfBackend) stats() event.Stats   { return b.t.Stats() }
func (b *ebpfBackend) close() error         { return b.t.Close() }

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
		start = launch.StartStopped // for a leak check's watch to seize (see Session.watchExit)
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
