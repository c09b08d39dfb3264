package heapscope

import (
	"fmt"
	"os/exec"
	"sync"
	"time"

	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/internal/errs"
	"github.com/heapscope/heapscope/internal/launch"
	"github.com/heapscope/heapscope/internal/preload"
)

// preloadBackend drives the preload provider. It can only trace programs it
// launches: it has nothing to attach to a running process with.
type preloadBackend struct {
	c    *preload.Collector
	hold bool // a launched program starts stopped, for a leak check at its exit

	mu     sync.Mutex
	child  int
	doneCh chan struct{}
	once   sync.Once
}

func newPreload(s *Session) (backend, error) {
	size := min(max(s.props.ringBytes(), preload.MinBufferSize), preload.MaxBufferSize)
	c, err := preload.New(preload.Config{
		Families:      s.props.Families,
		Stacks:        s.stacks,
		Unwind:        s.props.Unwind,
		MaxFrames:     s.props.MaxFrames,
		BufferSize:    size,
		OnFull:        s.props.OnFull,
		FlushInterval: s.props.FlushInterval,
		SampleRate:    int64(s.props.Sample),
		SampleSeed:    sampleSeed(),
		EmitUSDT:      s.props.EmitUSDT,
	}, s.sink)
	if err != nil {
		return nil, err
	}
	return &preloadBackend{c: c, doneCh: make(chan struct{}), hold: s.props.checksAtExit()}, nil
}

func (b *preloadBackend) attach(pid int) error {
	return fmt.Errorf("pid %d: the preload provider traces only programs it launches; attach with the ebpf provider: %w", pid, errs.ErrInvalidFlags)
}

func (b *preloadBackend) detach(pid int) error {
	return fmt.Errorf("pid %d: the preload provider cannot stop tracing one process of its session: %w", pid, errs.ErrInvalidFlags)
}

func (b *preloadBackend) launch(cmd *exec.Cmd) error {
	if err := b.c.Prepare(cmd); err != nil {
		return err
	}
	start := cmd.Start
	if b.hold {
		// Held stopped before its first instruction, for a leak check's
		// watch to seize (see Session.watchExit).
		start = func() error { return launch.StartStopped(cmd, func(int) error { return nil }) }
	}
	if err := start(); err != nil {
		return err
	}
	b.mu.Lock()
	b.child = cmd.Process.Pid
	b.mu.Unlock()
	return nil
}

// exited records the launched program's exit. The session goes on while
// traced processes it left behind still run, as heaptrack's does: a
// daemon's parent exits at once and leaves the process worth tracing. A
// process is known once it has connected, at its start, or at its first
// allocation after a fork; descendantGrace covers one started just before
// the exit that has not connected yet.
func (b *preloadBackend) exited(pid, status, sig int) {
	b.c.Exited(pid, status, sig)
	go func() {
		quiet := time.Now()
		for time.Since(quiet) < descendantGrace {
			time.Sleep(descendantPoll)
			if b.c.Live() > 0 {
				quiet = time.Now()
			}
		}
		b.once.Do(func() { close(b.doneCh) })
	}()
}

const (
	descendantGrace = 50 * time.Millisecond
	descendantPoll  = 5 * time.Millisecond
)

func (b *preloadBackend) pids() []int {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.child == 0 {
		return nil
	}
	select {
	case <-b.doneCh:
		return nil
	default:
		return []int{b.child}
	}
}

func (b *preloadBackend) setStacks(k event.KindSet) error {
	return b.c.SetStacks(k)
}

func (b *preloadBackend) flush() error { return b.c.Flush() }
func (b *preloadBackend) flushProcess(pid int) error {
	return b.c.FlushProcess(pid)
}
func (b *preloadBackend) stats() event.Stats    { return b.c.Stats() }
func (b *preloadBackend) close() error          { return b.c.Close() }
func (b *preloadBackend) done() <-chan struct{} { return b.doneCh }
