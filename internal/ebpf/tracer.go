package ebpf

import (
	"errors"
	"fmt"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/features"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"

	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/internal/errs"
	"github.com/heapscope/heapscope/internal/usdt"
)

// Tracer traces the heap of a set of processes. Its methods may be called
// from any goroutine. The sink it writes into is called from one goroutine
// at a time; the sink may call Stats and PIDs, not the other methods (they
// wait for the sink).
type Tracer struct {
	cfg   Config
	sink  event.Sink
	coll  *ebpf.Collection
	objs  objects
	multi bool // uprobe_multi links
	rd    *ringbuf.Reader
	sys   []link.Link // mmap syscall tracepoints
	// forks are the fork and exec tracepoints, when children are followed
	// (see Config.NoFollowFork).
	forks     []link.Link
	followErr error    // why children are not followed, when they cannot be
	uw        *uwState // unwind tables (Config.UnwindTables)
	// live and totals are aggregate mode's tables, mapped.
	live, totals *table

	attachMu sync.Mutex // one Attach, Detach or Close at a time

	mu       sync.Mutex // guards procs, pidxUsed, closed, internalRanges and windows
	procs    map[int]*tracee
	pidxUsed []bool // aggregate mode: process indexes in use
	// glibc's own frees (internalfree.go): each file's ranges, and the
	// windows in the BPF map, by index - 1.
	internalRanges map[string][][2]uint64
	windows        []window
	closed         bool
	done           chan struct{}
	doneOnce       sync.Once
	closing        chan struct{} // closed when Close begins
	finished       chan struct{} // closed when Close ends

	// Under mu too: the otel_memory probes of the files seen, and the
	// sites of theirs in usdt_sites (usdt.go).
	usdtFiles map[fileKey][]usdt.Probe
	usdtSites map[usdtSiteKey]uint32

	// out serializes what is sent to the sink, and guards the tables that
	// decide what has been sent.
	out         sync.Mutex
	known       map[uint32]bool // processes whose events are accepted
	stacks      map[stackKey]event.StackID
	lastStack   stackKey // the last stack looked up, and its id
	lastStackID event.StackID
	nextStack   map[uint32]event.StackID
	stacksRead  []uint64 // keys of stacks read since settleStacks
	modules     map[uint32]*moduleSet
	batch       []event.Event
	sinkErr     error
	delivered   atomic.Uint64
	userLost    atomic.Uint64 // stacks unreadable from user space
	// Aggregate mode: what the tables could not hold, by pid (under out),
	// and the frees of spilling processes that matched no block.
	spilled        map[uint32]*spillProc
	spillUnmatched atomic.Uint64

	// life guards the kernel objects' lifetime: Flush and SetStacks hold
	// it for reading; Close takes it to free them.
	life sync.RWMutex
	gone bool // the kernel objects are freed
	// statsMu guards final, the last Stats, set when the objects are
	// freed. Stats takes only it, so that a sink may call Stats.
	statsMu sync.Mutex
	final   *event.Stats

	flushMu sync.Mutex // one drain at a time
	// period is FlushPeriodic's account of the last periodic snapshot.
	periodMu sync.Mutex
	period   struct {
		calls, listed uint64
		last          time.Time
		took          time.Duration
		warned        bool
	}
	flushed    chan struct{}
	queue      *queue        // from read to forward
	readerDone chan struct{} // closed when forward ends
	readerErr  error

	warnMu   sync.Mutex
	warnings []error
	heldMu   sync.Mutex
	held     map[int]bool // processes the BPF side stopped, until continued

	watch  *watcher
	wg     sync.WaitGroup // the snapshot ticker
	ending sync.WaitGroup // ends of exited processes in progress
}

// tracee is one traced process.
type tracee struct {
	pid       int
	pidx      uint16 // its index in the aggregate tables (0 in stream mode)
	links     []link.Link
	pidfd     int
	launched  bool
	report    chan exitStatus
	endOnce   sync.Once
	info      event.Process // its Process record, as last sent (under out)
	root      *os.File      // its root directory (proc.OpenRoot), for names it gives once it has exited
	ended     chan struct{} // closed when end begins
	execd     bool          // ended by an exec (its command line is the new image's)
	finishing bool          // its final snapshot is being taken (under mu)

	// Traced through its otel_memory probes (usdt.go): the files whose
	// probes are attached, and the loader's names of libraries looked at
	// since; links made after the attach are added under lmu, and none
	// once linksClosed.
	lmu         sync.Mutex
	usdt        bool
	usdtFiles   map[fileKey]bool
	usdtNames   map[string]bool
	linksClosed bool
}

type exitStatus struct{ status, signal int32 }

// New loads the BPF objects for cfg and returns a tracer tracing nothing
// yet. The error wraps errs.ErrInvalidFlags for a bad cfg,
// errs.ErrOutOfMemory when the kernel cannot give the maps their size, and
// what Available returns when eBPF cannot be used.
func New(cfg Config, sink event.Sink) (*Tracer, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if sink == nil {
		return nil, fmt.Errorf("ebpf: nil sink: %w", errs.ErrInvalidFlags)
	}
	if err := Available(); err != nil {
		return nil, err
	}
	t := &Tracer{
		cfg:       cfg,
		sink:      sink,
		procs:     map[int]*tracee{},
		done:      make(chan struct{}),
		closing:   make(chan struct{}),
		finished:  make(chan struct{}),
		known:     map[uint32]bool{},
		stacks:    map[stackKey]event.StackID{},
		nextStack: map[uint32]event.StackID{},
		modules:   map[uint32]*moduleSet{},
		flushed:   make(chan struct{}),
		held:      map[int]bool{},
	}
	t.multi = !cfg.noMulti && features.HaveBPFLinkUprobeMulti() == nil
	if err := t.load(); err != nil {
		if cfg.NoFollowFork {
			return nil, err
		}
		// A kernel before 6.13 has no bpf_send_signal_task: trace
		// without following children rather than not at all.
		t.followErr = err
		t.cfg.NoFollowFork = true
		if err := t.load(); err != nil {
			return nil, err
		}
	}
	if t.watch, err = newWatcher(t); err != nil {
		t.coll.Close()
		return nil, err
	}
	if cfg.Families&event.FamilyMmap != 0 {
		if err := t.attachSyscalls(); err != nil {
			t.watch.close()
			t.coll.Close()
			return nil, err
		}
	}
	if t.following() {
		if err := t.attachFollow(); err != nil {
			t.closeKernelObjects()
			return nil, err
		}
	}
	// The ring carries the events in stream mode, and in both modes the
	// loader's lists of libraries (and the notes of forks and execs).
	if t.rd, err = ringbuf.NewReader(t.objs.events); err != nil {
		t.closeKernelObjects()
		return nil, fmt.Errorf("ebpf: ring buffer reader: %w", err)
	}
	t.readerDone = make(chan struct{})
	t.queue = newQueue()
	go t.read()
	go t.forward()
	if cfg.Mode == event.Aggregate && cfg.FlushInterval > 0 {
		t.wg.Add(1)
		go t.tick()
	}
	if cfg.Mode == event.Aggregate {
		t.wg.Add(1)
		go t.harvest()
	}
	return t, nil
}

// load sets the BPF objects' constants and sizes and loads them.
func (t *Tracer) load() error {
	spec, err := loadHeapscope()
	if err != nil {
		return fmt.Errorf("ebpf: %w", err)
	}
	set := func(name string, v any) error {
		if err := spec.Variables[name].Set(v); err != nil {
			return fmt.Errorf("ebpf: setting %s: %w", name, err)
		}
		return nil
	}
	wakeupMask := ^uint64(t.cfg.RingSize/4 - 1) // RingSize is a power of two
	if err := errors.Join(
		set("aggregate", boolByte(t.cfg.Mode == event.Aggregate)),
		set("families", uint32(t.cfg.Families)),
		set("wakeup_mask", wakeupMask),
		set("stack_kinds", stackMask(t.cfg.Stacks)),
		set("uw", boolByte(t.cfg.UnwindTables)),
		set("sample_rate", uint64(t.cfg.Sample)),
	); err != nil {
		return err
	}

	spec.Maps["stacks"].MaxEntries = uint32(t.cfg.StackMapSize)
	spec.Maps["known"].MaxEntries = uint32(t.cfg.MaxStacks)
	chunkSpec := spec.Maps["uw_chunks"].InnerMap.Copy()
	if t.cfg.Sample > 0 && t.cfg.Mode == event.Stream { // aggregate: the live table is the set
		spec.Maps["sampled"].MaxEntries = uint32(t.cfg.MaxLive)
	}
	liveSlots, totalSlots := bucketSlots, bucketSlots // unused in stream mode
	if t.cfg.Mode == event.Stream {
		spec.Maps["events"].MaxEntries = uint32(t.cfg.RingSize)
	} else {
		// What the tables cannot hold comes through the ring.
		spec.Maps["events"].MaxEntries = uint32(t.cfg.RingSize)
		liveSlots, totalSlots = tableSlots(t.cfg.MaxLive), tableSlots(t.cfg.StackMapSize)
		if err := t.checkTableMemory(liveSlots, totalSlots); err != nil {
			return err
		}
	}
	spec.Maps["live_keys"].MaxEntries = uint32(liveSlots / bucketSlots)
	spec.Maps["live_vals"].MaxEntries = uint32(liveSlots)
	spec.Maps["totals_keys"].MaxEntries = uint32(totalSlots / bucketSlots)
	spec.Maps["totals_vals"].MaxEntries = uint32(totalSlots)
	if err := errors.Join(
		set("live_mask", uint32(liveSlots/bucketSlots-1)),
		set("totals_mask", uint32(totalSlots/bucketSlots-1)),
	); err != nil {
		return err
	}

	// Load only the programs this tracer attaches: uprobe_multi or classic,
	// and the syscall tracepoints when mmap is traced.
	for name := range spec.Programs {
		multi := len(name) > 6 && name[len(name)-6:] == "_multi"
		switch name {
		case "mmap_enter", "mmap_exit", "munmap_enter", "munmap_exit", "mremap_enter", "mremap_exit":
			if t.cfg.Families&event.FamilyMmap == 0 {
				delete(spec.Programs, name)
			}
			continue
		case "on_fork", "on_exec":
			if !t.following() {
				delete(spec.Programs, name)
			}
			continue
		case "smp_weights_test": // TestSampleWeightsBPF's
			delete(spec.Programs, name)
			continue
		case "usdt_alloc", "usdt_free": // classic uprobes, a few sites
			if t.cfg.Source == SourceUprobes {
				delete(spec.Programs, name)
			}
			continue
		}
		if multi != t.multi {
			delete(spec.Programs, name)
		}
	}

	coll, err := ebpf.NewCollection(spec)
	if err != nil {
		if errors.Is(err, unix.ENOMEM) || errors.Is(err, unix.E2BIG) {
			return fmt.Errorf("ebpf: creating maps (ring %d bytes, %d live blocks, %d stacks): %w: %v",
				t.cfg.RingSize, t.cfg.MaxLive, t.cfg.StackMapSize, errs.ErrOutOfMemory, err)
		}
		if errors.Is(err, unix.EPERM) {
			return fmt.Errorf("ebpf: loading: %w: %v", errs.ErrAccessDenied, err)
		}
		return fmt.Errorf("ebpf: loading: %w", err)
	}
	t.coll = coll
	t.objs = objects{
		events:     coll.Maps["events"],
		stacks:     coll.Maps["stacks"],
		known:      coll.Maps["known"],
		counters:   coll.Maps["counters"],
		traced:     coll.Maps["traced"],
		follow:     coll.Maps["follow"],
		spilling:   coll.Maps["spilling"],
		stackKinds: coll.Variables["stack_kinds"],
	}
	if t.cfg.UnwindTables {
		t.uw = newUWState(coll.Maps["uw_chunks"], chunkSpec, coll.Maps["uw_procs"], coll.Maps["dl_hold"], t.cfg.UnwindEntries)
	}
	if t.cfg.Mode == event.Aggregate {
		if t.live, err = mapTable(coll.Maps["live_keys"], coll.Maps["live_vals"]); err != nil {
			coll.Close()
			return err
		}
		if t.totals, err = mapTable(coll.Maps["totals_keys"], coll.Maps["totals_vals"]); err != nil {
			t.live.close()
			coll.Close()
			return err
		}
	}
	return nil
}

// checkTableMemory refuses aggregate tables larger than the machine's
// memory, with ErrOutOfMemory, before the kernel is asked for them: it
// would try to allocate them.
func (t *Tracer) checkTableMemory(liveSlots, totalSlots int) error {
	need := uint64(liveSlots)*(8+liveValSize) + uint64(totalSlots)*(8+totalValSize)
	var si unix.Sysinfo_t
	if err := unix.Sysinfo(&si); err != nil {
		return nil // the kernel will say
	}
	if have := uint64(si.Totalram) * uint64(si.Unit); need > have {
		return fmt.Errorf("ebpf: tables for %d live blocks and %d stacks need %d MiB, the machine has %d MiB: %w",
			t.cfg.MaxLive, t.cfg.StackMapSize, need>>20, have>>20, errs.ErrOutOfMemory)
	}
	return nil
}

// objects are the loaded maps and variables the Go side uses.
type objects struct {
	events, stacks, known, counters, traced, follow, spilling *ebpf.Map
	stackKinds                                                *ebpf.Variable
}

// closeTables unmaps aggregate mode's tables and the unwind tables.
func (t *Tracer) closeTables() {
	t.uw.close()
	if t.live != nil {
		t.live.close()
		t.totals.close()
		t.live, t.totals = nil, nil
	}
}

// prog returns a loaded program: name, or name_multi with uprobe_multi.
func (t *Tracer) prog(name string) *ebpf.Program {
	if p := t.coll.Programs[name+"_multi"]; p != nil {
		return p
	}
	return t.coll.Programs[name]
}

func boolByte(b bool) uint8 {
	if b {
		return 1
	}
	return 0
}

func (t *Tracer) closeKernelObjects() {
	for _, l := range append(t.sys, t.forks...) {
		l.Close()
	}
	t.sys, t.forks = nil, nil
	if t.watch != nil {
		t.watch.close()
	}
	t.closeTables()
	t.coll.Close()
}

// Config returns the tracer's configuration, with defaults filled in.
func (t *Tracer) Config() Config { return t.cfg }

// PIDs returns the processes traced, in order.
func (t *Tracer) PIDs() []int {
	t.mu.Lock()
	defer t.mu.Unlock()
	pids := make([]int, 0, len(t.procs))
	for pid := range t.procs {
		pids = append(pids, pid)
	}
	sort.Ints(pids)
	return pids
}

// SetStacks changes which kinds of event carry a stack, for events from now
// on. 0 and NoStacks both mean none.
func (t *Tracer) SetStacks(kinds event.KindSet) error {
	if err := event.CheckStacks(kinds); err != nil {
		return err
	}
	t.life.RLock()
	defer t.life.RUnlock()
	if t.gone {
		return errClosed
	}
	if err := t.objs.stackKinds.Set(stackMask(kinds)); err != nil {
		return fmt.Errorf("ebpf: setting stack kinds: %w", err)
	}
	return nil
}

// Done returns a channel closed when the last traced process has exited (a
// process detached with Detach does not count), and by Close.
func (t *Tracer) Done() <-chan struct{} { return t.done }

func (t *Tracer) closeDone() { t.doneOnce.Do(func() { close(t.done) }) }

// Stats returns what the tracer has delivered and lost so far. Lost counts
// are summed over CPUs. Unmatched (frees of blocks never seen allocated) is
// counted in aggregate mode; in stream mode every free is delivered and the
// consumer can tell. After Close it returns the last Stats sent.
func (t *Tracer) Stats() event.Stats {
	t.statsMu.Lock()
	defer t.statsMu.Unlock()
	if t.final != nil {
		return *t.final
	}
	return t.stats()
}

// counters sums the BPF side's per-CPU counters. Called with the kernel
// objects alive.
func (t *Tracer) counters() [numCounters]uint64 {
	var c [numCounters]uint64
	for i := range c {
		var perCPU []uint64
		if err := t.objs.counters.Lookup(uint32(i), &perCPU); err == nil {
			for _, v := range perCPU {
				c[i] += v
			}
		}
	}
	return c
}

func (t *Tracer) stats() event.Stats {
	var st event.Stats
	st.Time = monotonic()
	c := t.counters()
	st.Lost[event.LostRingFull] = c[ctrLostRingFull]
	st.Lost[event.LostMapFull] = c[ctrLostMapFull]
	st.Lost[event.LostOther] = c[ctrLostOther]
	st.StacksLost = c[ctrStacksLost] + t.userLost.Load()
	st.StacksCut = c[ctrStacksCut] + c[ctrStacksBroken]
	st.StacksCutDepth = c[ctrStacksCut]
	st.StacksCutNoTable = c[ctrStacksNoTable]
	st.Unmatched = c[ctrUnmatched]
	st.Delivered = t.delivered.Load() // in aggregate mode, the calls spilled
	if t.cfg.Mode == event.Aggregate {
		st.Delivered += c[ctrDelivered]
		st.Unmatched += t.spillUnmatched.Load()
	}
	return st
}

// Flush delivers what has been captured so far: in stream mode everything
// in the ring buffer reaches the sink before Flush returns; in aggregate
// mode a Snapshot of each traced process is sent. Either way a Stats
// record follows. It returns the first error the sink returned, if any.
func (t *Tracer) Flush() error {
	t.life.RLock()
	defer t.life.RUnlock()
	if t.gone {
		return errClosed
	}
	t.drain()
	if t.cfg.Mode == event.Aggregate {
		t.snapshot(t.PIDs(), false)
	}
	t.out.Lock()
	defer t.out.Unlock()
	t.send(t.sink.Stats(t.Stats()))
	return t.sinkErr
}

// send records the first error the sink returns. Called with out held.
func (t *Tracer) send(err error) {
	if err != nil && t.sinkErr == nil {
		t.sinkErr = fmt.Errorf("ebpf: sink: %w", err)
	}
}

// Close detaches every process, delivers everything captured (in aggregate
// mode a final Snapshot of each process), sends an Exit for each process
// still traced and a last Stats, and frees the kernel objects. It returns
// the first error the sink returned, if any.
func (t *Tracer) Close() error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		<-t.finished // the first Close's
		return t.sinkError()
	}
	t.closed = true
	// Before waiting for Attach or Detach: an end waiting for a
	// launcher's report gives up on it.
	close(t.closing)
	t.mu.Unlock()

	t.attachMu.Lock()
	defer t.attachMu.Unlock()
	t.mu.Lock()
	procs := make([]*tracee, 0, len(t.procs))
	for _, p := range t.procs {
		procs = append(procs, p)
	}
	t.mu.Unlock()
	sort.Slice(procs, func(i, j int) bool { return procs[i].pid < procs[j].pid })
	t.wg.Wait() // the snapshot ticker

	// No fork or exec is held from here on; those held already are
	// continued by their followers (whose Attach fails once this returns).
	for _, l := range t.forks {
		l.Close()
	}
	t.forks = nil
	// No exit is noticed from here on; those noticed already finish.
	t.watch.close()
	for _, l := range t.sys {
		l.Close()
	}
	t.sys = nil
	for _, p := range procs {
		t.end(p, false)
	}
	t.ending.Wait()
	t.drain()
	t.rd.Close()
	<-t.readerDone
	// Every note has been read: what is held now waits for this Close.
	t.resumeAll()

	t.life.Lock()
	t.statsMu.Lock()
	st := t.stats()
	t.final = &st
	t.closeTables()
	t.coll.Close()
	t.statsMu.Unlock()
	t.gone = true
	t.life.Unlock()

	t.out.Lock()
	t.send(t.sink.Stats(st))
	err := t.sinkErr
	if t.readerErr != nil && err == nil {
		err = t.readerErr
	}
	t.out.Unlock()
	t.closeDone()
	close(t.finished)
	return err
}

// closeLinks closes ls last first: entry probes before the return probes
// made ahead of them.
func closeLinks(ls []link.Link) {
	for i := len(ls) - 1; i >= 0; i-- {
		ls[i].Close()
	}
}

func monotonic() int64 {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}

// tick takes aggregate snapshots every FlushInterval.
func (t *Tracer) tick() {
	defer t.wg.Done()
	tk := time.NewTicker(t.cfg.FlushInterval)
	defer tk.Stop()
	for {
		select {
		case <-t.closing:
			return
		case <-tk.C:
			t.FlushPeriodic()
		}
	}
}

// FlushPeriodic is Flush for a timer. In aggregate mode a snapshot lists
// every live block: of a server whose live set is large and changes little
// it costs more than the calls between two snapshots would in stream
// mode. So FlushPeriodic takes a snapshot only when the last one listed
// fewer than smallSnapshot blocks or the calls accounted since are at least
// as many as it listed (none when no call came), and no sooner than
// snapshotShare times as long as the last took; otherwise it delivers what
// the ring holds and a Stats record.
// The tracer warns once when that puts snapshots further apart than
// FlushInterval. In stream mode it is Flush.
func (t *Tracer) FlushPeriodic() error {
	if t.cfg.Mode != event.Aggregate {
		return t.Flush()
	}
	t.life.RLock()
	defer t.life.RUnlock()
	if t.gone {
		return errClosed
	}
	t.drain()
	t.periodMu.Lock()
	p := &t.period
	c := t.Stats().Delivered
	due := c != p.calls && (c-p.calls >= p.listed || p.listed < smallSnapshot) && time.Since(p.last) >= snapshotShare*p.took
	if !due && c != p.calls && !p.warned && p.listed > 0 && time.Since(p.last) >= 2*t.cfg.FlushInterval {
		p.warned = true
		t.warn(fmt.Errorf("ebpf: --mode aggregate: snapshots list every live block (%d at the last): they are taken as the calls since the last one reach that many, "+
			"less often than every %v (--flush-interval); a process whose live set is large and changes little is traced at less cost with --mode stream",
			p.listed, t.cfg.FlushInterval))
	}
	if due {
		start := time.Now()
		p.listed = t.snapshot(t.PIDs(), false)
		p.calls, p.last, p.took = c, start, time.Since(start)
	}
	t.periodMu.Unlock()
	t.out.Lock()
	defer t.out.Unlock()
	t.send(t.sink.Stats(t.Stats()))
	return t.sinkErr
}

// smallSnapshot is the live blocks of a snapshot small enough to be taken
// at every FlushPeriodic (top's intervals).
const smallSnapshot = 1 << 16

// snapshotShare is how many times as long as a snapshot took aggregate
// mode waits before the next, at least.
const snapshotShare = 20

var errClosed = fmt.Errorf("ebpf: tracer closed: %w", errs.ErrNotRunning)

func isNotExist(err error) bool {
	return errors.Is(err, os.ErrNotExist) || errors.Is(err, unix.ESRCH)
}
