package heapscope

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"sync"
	"time"

	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/internal/control"
	"github.com/heapscope/heapscope/internal/errs"
	"github.com/heapscope/heapscope/internal/launch"
	"github.com/heapscope/heapscope/internal/proc"
	"github.com/heapscope/heapscope/internal/registry"
)

// backend is what a session drives: one of the providers.
type backend interface {
	// attach starts tracing a running process.
	attach(pid int) error
	// detach stops tracing it.
	detach(pid int) error
	// launch starts cmd traced from its first instruction.
	launch(cmd *exec.Cmd) error
	// exited reports how a launched process ended, once it has.
	exited(pid, status, sig int)
	pids() []int
	setStacks(event.KindSet) error
	flush() error
	stats() event.Stats
	// done is closed when no traced process is left.
	done() <-chan struct{}
	// close stops tracing and delivers everything captured to the sink.
	close() error
}

// traceWriter is the trace file writer as the session uses it.
type traceWriter interface {
	event.Sink
	Flush() error
	Close() error
	Written() int64
	FileStats(event.Stats) event.Stats
	Files() []string
	// Commit gives the file its name once the session has started.
	Commit() error
}

// Session is a running heap-tracing session.
type Session struct {
	name    string
	props   Properties
	started time.Time
	entry   *registry.Entry
	ctl     *control.Server
	b       backend
	sink    *sessionSink
	// launched: the session launches its program (Launch), traced from
	// its first instruction; the trace header says so ("launched")
	launched bool

	mu     sync.Mutex // guards stacks, child and the stop state
	stacks event.KindSet
	child  *exec.Cmd

	stopOnce sync.Once
	stopErr  error
	drained  chan struct{} // closed when every event has reached the file and hooks
	final    Status        // the status when drained
	stopped  chan struct{} // closed when Stop has finished
	exitCode int           // the launched child's status, once exited is closed
	exited   chan struct{} // Launch: closed when the launched child has exited

	top   topState    // Top's totals and clients (top.go)
	cen   censusState // the censuses at attach (census.go)
	leaks leakState   // leak checks (leaks.go)
	exp   *exporter   // the interval profiles sent, with Properties.Export (exports.go)
}

// MaxNameLen is the longest session name, in characters; a longer one is
// refused with ErrNameTooLong. Names are compared without regard to case.
const MaxNameLen = registry.MaxNameLen

// Start starts a session named name that traces the running processes pids.
// The provider defaults to ProviderEBPF. With ProviderPreload the
// interposer that Launch preloads is injected into each process instead
// (heapscope attach --inject): its threads are stopped with ptrace at a safe
// point, the library is loaded with dlopen and the GOT entries of the
// allocation functions are pointed at it; Stop (or heapscope's death) puts
// them back. The processes they fork are not traced. With eBPF, once a
// process's probes are in, Start takes a census of its heap and writes it
// into the trace as the blocks live before the trace (see census.go,
// Properties.NoCensus, Censuses); an injected process has none yet, and
// the frees of its blocks from before the attach count as unmatched.
func Start(name string, props Properties, pids []int) (*Session, error) {
	if len(pids) == 0 {
		return nil, fmt.Errorf("no process to trace: %w", errs.ErrInvalidFlags)
	}
	for _, pid := range pids {
		if !proc.Alive(pid) {
			return nil, fmt.Errorf("pid %d: %w (it does not exist, or has exited)", pid, errs.ErrNoSuchProcess)
		}
	}
	if !props.NoCensus && props.Sample == 0 && props.Mode != Aggregate && props.FileMode != RealTime &&
		(props.Provider == "" || props.Provider == ProviderEBPF) {
		for _, pid := range pids {
			go warmCensus(pid) // while the BPF objects load
		}
	}
	s, err := newSession(name, props, ProviderEBPF, false)
	if err != nil {
		return nil, err
	}
	var traced []int
	for _, pid := range pids {
		err := s.b.attach(pid)
		if err != nil && exitedDuring(pid, err) {
			// Gone before its probes were in: nothing of it was traced.
			// The others are traced still; with none, say so.
			err = fmt.Errorf("pid %d exited while heapscope was attaching to it, before its first traced call: %w", pid, errs.ErrNoSuchProcess)
			if len(pids) > 1 {
				s.sink.Note(event.Warning{PID: uint32(pid), Time: monotonicNow(), Code: "exited", Text: err.Error()})
				continue
			}
		}
		if err != nil {
			s.abort()
			return nil, err
		}
		traced = append(traced, pid)
	}
	if len(traced) == 0 {
		s.abort()
		return nil, fmt.Errorf("pids %v all exited while heapscope was attaching to them: %w", pids, errs.ErrNoSuchProcess)
	}
	if err := s.commit(); err != nil {
		s.abort()
		return nil, err
	}
	for _, pid := range traced {
		s.censusAfterAttach(pid)
	}
	s.run()
	return s, nil
}

// Launch starts cmd held before its first instruction, turns tracing on, then
// lets it run: every allocation is seen, including those of constructors that
// run before main. The session ends when cmd exits; ExitStatus then gives its
// status. The provider defaults to ProviderPreload. cmd must not have been
// started. The preload provider refuses, with ErrUnavailable, a program it
// could not trace: a static one, or one that gains privileges at exec
// (set-user-ID or set-group-ID to another user, file capabilities).
func Launch(name string, props Properties, cmd *exec.Cmd) (*Session, error) {
	if props.Provider == "" || props.Provider == ProviderPreload {
		if err := checkPreloadable(cmd.Path); err != nil {
			return nil, err
		}
	}
	s, err := newSession(name, props, ProviderPreload, true)
	if err != nil {
		return nil, err
	}
	if s.props.checksAtExit() {
		s.keepTotalsFromStart()
	}
	if err := s.b.launch(cmd); err != nil {
		s.abort()
		return nil, fmt.Errorf("starting %s: %w", cmd.Path, err)
	}
	if err := s.commit(); err != nil {
		// Rare (the folder changed under us): the program has run
		// for an instant; a session that failed to start leaves none.
		cmd.Process.Kill()
		cmd.Wait()
		s.abort()
		return nil, err
	}
	s.mu.Lock()
	s.child = cmd
	s.exited = make(chan struct{})
	s.mu.Unlock()
	if h, ok := s.b.(interface{ holdsChildren() bool }); s.props.checksAtExit() || ok && h.holdsChildren() {
		s.watchExit(cmd.Process.Pid)
	}
	w := s.exitWatch()
	pidfd := openPidfd(cmd.Process.Pid)
	go func() {
		// A wait of the parent reports (and takes) its child's ptrace
		// stops too, a leak check's among them: wait only once the
		// child has ended (its pidfd is readable then, and not before).
		if w != nil {
			<-w.Done()
		}
		waitEnded(pidfd)
		// Wait reports the child's end to the backend, which ends the
		// session once the child's events are in.
		cmd.Wait()
		status, sig := launch.Status(cmd.ProcessState)
		s.mu.Lock()
		s.exitCode = status
		close(s.exited)
		s.mu.Unlock()
		s.b.exited(cmd.Process.Pid, status, sig)
	}()
	s.run()
	return s, nil
}

func newSession(name string, props Properties, defaultProvider Provider, launched bool) (*Session, error) {
	if err := registry.CheckName(name); err != nil {
		return nil, err
	}
	if err := props.Validate(); err != nil {
		return nil, err
	}
	props = props.withDefaults(defaultProvider)
	if err := props.Validate(); err != nil {
		return nil, err // a combination the provider's default made, e.g. Start with OnFull block
	}
	if props.Provider == ProviderEBPF {
		if err := ebpfAvailable(); err != nil {
			return nil, err
		}
	}
	dir, err := registry.Dir()
	if err != nil {
		return nil, err
	}
	s := &Session{
		name:    name,
		props:   props,
		started: time.Now(),
		stacks:  props.StackEvents,
		stopped: make(chan struct{}),
		drained: make(chan struct{}),
		sink:    &sessionSink{sampling: props.Sample > 0},

		launched: launched,
	}
	s.sink.setHooks(props.Hooks)
	// The eBPF provider's load (most of it the verifier's) runs while the
	// session's name is taken and its file made: a start in milliseconds.
	// The tracer sends nothing before it attaches a process.
	var loaded chan backendOrErr
	if props.Provider == ProviderEBPF {
		loaded = make(chan backendOrErr, 1)
		go func() {
			b, err := newEBPF(s)
			loaded <- backendOrErr{b, err}
		}()
	}
	// unload closes the eBPF provider when the session fails before it is
	// used.
	unload := func() {
		if loaded != nil {
			if r := <-loaded; r.err == nil {
				r.b.close()
			}
		}
	}
	entry, err := registry.Acquire(dir, registry.Info{
		Name: name, Owner: os.Getpid(), Socket: registry.SocketPath(dir, name),
		Provider: string(props.Provider), Started: s.started,
	})
	if err != nil {
		unload()
		return nil, err
	}
	s.entry = entry
	if len(props.Export) > 0 {
		// Before the provider: the totals see its first event.
		if s.exp, err = newExporter(s); err != nil {
			unload()
			entry.Release()
			return nil, err
		}
	}
	if props.FileMode != RealTime {
		w, err := createWriter(s)
		if err != nil {
			unload()
			if s.exp != nil {
				s.exp.abort()
			}
			entry.Release()
			return nil, err
		}
		s.sink.w = w
	}
	switch props.Provider {
	case ProviderPreload:
		s.b, err = newPreload(s)
	case ProviderEBPF:
		r := <-loaded
		s.b, err = r.b, r.err
	}
	if err != nil {
		if s.sink.w != nil {
			s.sink.w.Close() // removes the file, never named
		}
		if s.exp != nil {
			s.exp.abort()
		}
		entry.Release()
		return nil, err
	}
	ctl, err := control.Listen(entry.Info.Socket, s.handle)
	if err != nil {
		s.abort()
		return nil, err
	}
	s.ctl = ctl
	return s, nil
}

// exitedDuring reports whether err, from attaching pid, is pid's having
// exited meanwhile (it was alive when Start was called). Whatever the
// attach was reading when it went (its maps, a file through its root: an
// ENOENT, an ESRCH), a pid no longer alive is a pid that exited.
func exitedDuring(pid int, err error) bool {
	return err != nil && !proc.Alive(pid)
}

type backendOrErr struct {
	b   backend
	err error
}

// abort undoes a session that failed to start. Its trace file was never
// named: closing the writer removes it, and whatever the path held is as it
// was.
func (s *Session) abort() {
	if s.ctl != nil {
		s.ctl.Close()
	}
	if s.b != nil {
		s.b.close()
	}
	if s.sink.w != nil {
		s.sink.w.Close()
	}
	if s.exp != nil {
		s.exp.abort()
	}
	s.entry.Release()
}

// commit names the trace file, once the session has started.
func (s *Session) commit() error {
	if s.sink.w == nil {
		return nil
	}
	return s.sink.w.Commit()
}

// run starts the session's background work: the flush timer, the watch
// for the end of the traced processes, and the exports.
func (s *Session) run() {
	if s.exp != nil {
		go s.exp.run()
	}
	go func() {
		t := time.NewTicker(s.props.FlushInterval)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				s.flushPeriodic()
			case <-s.b.done():
				s.Stop()
				return
			case <-s.stopped:
				return
			}
		}
	}()
}

// Name returns the session's name.
func (s *Session) Name() string { return s.name }

// Properties returns the session's properties, with defaults filled in.
func (s *Session) Properties() Properties { return s.props }

// PIDs returns the processes being traced.
func (s *Session) PIDs() []int { return s.b.pids() }

// Stats returns what the session has delivered and lost so far.
func (s *Session) Stats() event.Stats {
	return s.sink.fileStats(s.sinkStats())
}

// sinkStats is the provider's count completed by the sink: what the trace
// file's writer is given, to add what it dropped itself.
func (s *Session) sinkStats() event.Stats {
	st := s.b.stats()
	s.sink.fill(&st)
	return st
}

// periodicFlusher is a backend whose flush on the session's timer may do
// less than Flush (the eBPF provider's aggregate mode takes a snapshot
// only when it costs less than the calls it stands for).
type periodicFlusher interface{ flushPeriodic() error }

// flushPeriodic is Flush for the session's timer.
func (s *Session) flushPeriodic() error {
	if _, ok := s.b.(periodicFlusher); !ok {
		return s.Flush()
	}
	return s.flushWith(s.b.(periodicFlusher).flushPeriodic)
}

// Flush delivers every event captured so far to the trace file and the hooks,
// and writes the file's buffers to disk.
func (s *Session) Flush() error { return s.flushWith(s.b.flush) }

func (s *Session) flushWith(flush func() error) error {
	select {
	case <-s.drained:
		return fmt.Errorf("session %q: %w", s.name, errs.ErrNotRunning)
	default:
	}
	err := flush()
	s.sink.sampleMemory()
	st := s.sinkStats()
	if serr := s.sink.Stats(st); err == nil {
		err = serr
	}
	if ferr := s.sink.flush(); err == nil {
		err = ferr
	}
	return err
}

// SetHooks installs h: from now on each event is passed, live and in order,
// to the hook for its kind. A nil field clears that hook; SetHooks(Hooks{})
// clears them all. Hooks run on the session's collecting goroutine: a slow
// hook slows the session (and, with the preload provider's Block policy, the
// traced program).
func (s *Session) SetHooks(h Hooks) { s.sink.setHooks(h) }

// Update changes the processes and stack-walked events of the session.
func (s *Session) Update(c Change) error {
	var errList []error
	if c.SetPIDs != nil {
		want := map[int]bool{}
		for _, pid := range c.SetPIDs {
			want[pid] = true
		}
		for _, pid := range s.b.pids() {
			if !want[pid] {
				c.RemovePIDs = append(c.RemovePIDs, pid)
			}
			delete(want, pid)
		}
		for pid := range want {
			c.AddPIDs = append(c.AddPIDs, pid)
		}
	}
	for _, pid := range c.AddPIDs {
		if slices.Contains(s.b.pids(), pid) {
			continue
		}
		if !proc.Alive(pid) {
			errList = append(errList, fmt.Errorf("pid %d: %w", pid, errs.ErrNoSuchProcess))
			continue
		}
		if err := s.b.attach(pid); err != nil {
			errList = append(errList, err)
			continue
		}
		s.censusAfterAttach(pid)
	}
	for _, pid := range c.RemovePIDs {
		if err := s.b.detach(pid); err != nil {
			errList = append(errList, err)
		}
	}
	if c.Stacks != nil {
		k := *c.Stacks
		if k == 0 {
			k = DefaultStacksFor(s.props.Families)
		}
		if err := s.b.setStacks(k); err != nil {
			errList = append(errList, err)
		} else {
			s.mu.Lock()
			s.stacks = k
			s.mu.Unlock()
		}
	}
	return errors.Join(errList...)
}

// Stop ends the session: tracing stops, every event captured reaches the
// trace file and the hooks, the file is closed and the name is released.
// Stopping a launched session does not kill the program; it runs on
// untraced.
func (s *Session) Stop() error {
	s.stopOnce.Do(func() {
		var errList []error
		if w := s.exitWatch(); w != nil {
			w.Close() // stopped by name: the program runs on, untraced
		}
		s.sink.sampleMemory() // before the provider ends: its processes may be gone after
		if err := s.b.close(); err != nil {
			errList = append(errList, err)
		}
		st := s.sinkStats()
		if err := s.sink.Stats(st); err != nil {
			errList = append(errList, err)
		}
		if err := s.sink.close(); err != nil {
			errList = append(errList, err)
		}
		if s.exp != nil {
			// Every event is in: the last interval, then up to
			// exportCloseWait for the exports still queued.
			s.exp.close()
		}
		s.final = s.Status()
		close(s.drained)
		// The control server waits for requests in progress, a stop request
		// among them (it waits for drained); the name is released last, so
		// no new session can take the socket's path before it is closed.
		if s.ctl != nil {
			s.ctl.Close()
		}
		if err := s.entry.Release(); err != nil {
			errList = append(errList, err)
		}
		s.stopErr = joinDistinct(errList)
		close(s.stopped)
	})
	<-s.stopped
	return s.stopErr
}

// joinDistinct joins errs, each message once: a write error of the trace
// file comes back from the provider, the stats and the close alike.
func joinDistinct(errList []error) error {
	var kept []error
	for _, err := range errList {
		if !slices.ContainsFunc(kept, func(k error) bool { return k.Error() == err.Error() }) {
			kept = append(kept, err)
		}
	}
	return errors.Join(kept...)
}

// Wait blocks until the session ends: its last process exited, or Stop was
// called here or by name from another process.
func (s *Session) Wait() error {
	<-s.stopped
	return s.stopErr
}

// Done returns a channel closed when the session has ended.
func (s *Session) Done() <-chan struct{} { return s.stopped }

// ExitStatus returns the launched program's exit status (128+N when killed
// by signal N) once it has exited; ok is false while it runs, and for a
// session that launched nothing.
func (s *Session) ExitStatus() (status int, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.exited == nil {
		return 0, false
	}
	select {
	case <-s.exited:
		return s.exitCode, true
	default:
		return 0, false
	}
}

// ProgramExited returns a channel closed when the program Launch started
// has exited, which may be after the session ended (stopped by name, the
// program runs on untraced); ok is false for a session that launched
// nothing.
func (s *Session) ProgramExited() (exited <-chan struct{}, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.exited, s.exited != nil
}

// Files returns the trace files written so far.
func (s *Session) Files() []string {
	if s.sink.w == nil {
		return nil
	}
	return s.sink.w.Files()
}

// ControlProtocol is the version of the control socket's format: of
// Status, Change and the operations. A session answers with the version it
// speaks, and Control, Update and Sessions refuse (ErrProtocol) an answer in
// another: a session run by another version of heapscope.
const ControlProtocol = 2

// Status describes a running session: what Control's ControlQuery returns,
// and, as JSON, what the control socket carries.
type Status struct {
	// Protocol is the ControlProtocol of the session that answered.
	Protocol int    `json:"protocol"`
	Name     string `json:"name"`
	// Owner is the pid of the process running the session.
	Owner    int      `json:"owner"`
	Provider Provider `json:"provider"`
	// Properties are the session's, with defaults filled in.
	Properties Properties `json:"properties"`
	PIDs       []int      `json:"pids"`
	// Stacks are the event kinds that carry a stack now (Update changes
	// them), written "alloc,realloc" in JSON.
	Stacks  event.KindSet `json:"stacks"`
	Started time.Time     `json:"started"`
	Stats   event.Stats   `json:"stats"`
	Files   []string      `json:"files,omitempty"`
	// Sampled counts the allocations and reallocations recorded so far
	// when the session samples (Properties.Sample > 0).
	Sampled uint64 `json:"sampled,omitempty"`
	// Unwind is what the unwind tables cost, when the session walks stacks
	// with them.
	Unwind *UnwindStatus `json:"unwind,omitempty"`
	// Warnings are the provider's first problems that did not end the
	// session (the eBPF provider's: a child it could not follow, a file
	// whose unwind table found no room).
	Warnings []string `json:"warnings,omitempty"`
	// Processes are every process the session traces now: PIDs and the
	// processes they forked that it follows (Leaks checks any of them).
	Processes []int `json:"processes,omitempty"`
	// Exports are the counters of each export target (Properties.Export),
	// in its order.
	Exports []ExportStats `json:"exports,omitempty"`
}

// Status returns the session's current state.
func (s *Session) Status() Status {
	s.mu.Lock()
	stacks := s.stacks
	s.mu.Unlock()
	st := Status{
		Protocol: ControlProtocol, Name: s.name, Owner: os.Getpid(), Provider: s.props.Provider, Properties: s.props,
		PIDs: s.b.pids(), Stacks: stacks, Started: s.started, Stats: s.Stats(), Files: s.Files(),
		Sampled: s.sink.sampled.Load(),
	}
	if u, ok := s.b.(unwindReporter); ok {
		st.Unwind = u.unwindStatus()
	}
	if w, ok := s.b.(warner); ok {
		st.Warnings = w.warnings()
	}
	st.Processes = s.livePIDs()
	if s.exp != nil {
		st.Exports = s.exp.stats()
	}
	return st
}

// warner is a backend that keeps warnings.
type warner interface{ warnings() []string }
