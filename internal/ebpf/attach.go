package ebpf

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/internal/ebpf/sites"
	"github.com/heapscope/heapscope/internal/errs"
	"github.com/heapscope/heapscope/internal/proc"
	"github.com/heapscope/heapscope/internal/stopped"
)

// AttachOption modifies how Attach traces a process.
type AttachOption func(*attachOptions)

type attachOptions struct {
	launched bool
	// held: the BPF side holds the process stopped (a followed child or
	// exec) until Attach returns, so no event of it can come before its
	// Process record.
	held bool
}

// Launched says the caller started the process and will reap it: instead of
// an Exit with status -1, the tracer waits for the status the caller gives
// ReportExit before sending the process's Exit (or until Close).
//
// A process held at its exec stop (ptrace) needs no option: Attach sees
// that its libraries are not mapped yet and probes the ones its dynamic
// loader will map, by path, so that the first allocation (in a constructor
// before main) is seen.
func Launched() AttachOption { return func(o *attachOptions) { o.launched = true } }

// Attach starts tracing pid: it probes the allocator functions of the files
// the process maps, sends an event.Process and the event.Module records of
// its executable mappings, and from then on its calls. Attaching a process
// already traced does nothing. The error wraps errs.ErrNoSuchProcess when
// pid does not exist (or has exited) and errs.ErrAccessDenied when it cannot
// be probed.
func (t *Tracer) Attach(pid int, opts ...AttachOption) error {
	var o attachOptions
	for _, opt := range opts {
		opt(&o)
	}
	t.attachMu.RLock()
	defer t.attachMu.RUnlock()
	defer t.lockPid(pid)()
	return t.attachLocked(pid, o)
}

// pidLock is one process's attach lock, shared by those who wait for it.
type pidLock struct {
	sync.Mutex
	users int
}

// lockPid takes pid's attach lock, and returns what releases it.
func (t *Tracer) lockPid(pid int) func() {
	t.mu.Lock()
	if t.pidLocks == nil {
		t.pidLocks = map[int]*pidLock{}
	}
	l := t.pidLocks[pid]
	if l == nil {
		l = &pidLock{}
		t.pidLocks[pid] = l
	}
	l.users++
	t.mu.Unlock()
	l.Lock()
	return func() {
		l.Unlock()
		t.mu.Lock()
		if l.users--; l.users == 0 {
			delete(t.pidLocks, pid)
		}
		t.mu.Unlock()
	}
}

// attachLocked is Attach, called with attachMu held for reading and pid's
// lock.
func (t *Tracer) attachLocked(pid int, o attachOptions) error {
	t.mu.Lock()
	closed := t.closed
	_, traced := t.procs[pid]
	t.mu.Unlock()
	if closed {
		return errClosed
	}
	if traced {
		return nil
	}
	if pid <= 0 {
		return fmt.Errorf("ebpf: pid %d: %w", pid, errs.ErrNoSuchProcess)
	}

	// The pidfd watches for this process's exit: a later process reusing
	// the pid is not mistaken for it.
	pidfd, err := unix.PidfdOpen(pid, 0)
	switch {
	case errors.Is(err, unix.ESRCH):
		return fmt.Errorf("ebpf: pid %d: %w", pid, errs.ErrNoSuchProcess)
	case errors.Is(err, unix.EINVAL), errors.Is(err, unix.ENOENT):
		return fmt.Errorf("ebpf: pid %d is a thread, not a process: %w", pid, errs.ErrNoSuchProcess)
	case err != nil:
		return fmt.Errorf("ebpf: pid %d: pidfd_open: %w", pid, err)
	}
	p := &tracee{pid: pid, pidfd: pidfd, launched: o.launched, report: make(chan exitStatus, 1), ended: make(chan struct{})}
	p.root, _ = proc.OpenRoot(pid) // nil if it cannot be opened: names are read while it lives
	if t.cfg.Mode == event.Aggregate {
		if p.pidx, err = t.newPidx(); err != nil {
			unix.Close(pidfd)
			return err
		}
	}
	if err := t.attach(p, o.held); err != nil {
		if t.uw != nil {
			t.uw.forget(uint32(pid))
		}
		t.freePidx(p.pidx)
		unix.Close(pidfd)
		if p.root != nil {
			p.root.Close()
		}
		return err
	}
	t.mu.Lock()
	t.procs[pid] = p
	t.mu.Unlock()
	if err := t.watch.add(p); err != nil {
		// Without a watch its exit would go unnoticed: undo.
		t.end(p, false)
		return err
	}
	go t.retitle(p)
	return nil
}

// retitleAfter are the times after attach at which a process's command
// line is read again: a program that writes its title over its argv
// (nginx's workers, forked with the master's title; redis, launched) does
// it early.
var retitleAfter = []time.Duration{100 * time.Millisecond, time.Second, 10 * time.Second}

// retitle reads p's command line again at retitleAfter, until p ends, and
// sends it when it has changed (see titled).
func (t *Tracer) retitle(p *tracee) {
	var last time.Duration
	for _, d := range retitleAfter {
		timer := time.NewTimer(d - last)
		select {
		case <-p.ended:
			timer.Stop()
			return
		case <-timer.C:
		}
		last = d
		t.titled(p)
	}
}

// titled sends p's Process record again, with the same time, if its
// command line has changed since it was sent: a record with the pid and
// time of a process's last one is that process's, updated (not a new
// image, which has a time of its own).
func (t *Tracer) titled(p *tracee) {
	// Not while it is stopped: held at an exec, its command line is the
	// new image's.
	t.heldMu.Lock()
	held := t.held[p.pid]
	t.heldMu.Unlock()
	if st, err := proc.ReadStat(p.pid); held || err != nil || st.State == 'T' || st.State == 't' {
		return
	}
	argv, err := proc.Cmdline(p.pid)
	if err != nil || len(argv) == 0 {
		return
	}
	t.out.Lock()
	defer t.out.Unlock()
	if !t.known[uint32(p.pid)] || slices.Equal(argv, p.info.Cmdline) {
		return
	}
	t.mu.Lock()
	current := t.procs[p.pid] == p
	t.mu.Unlock()
	if current {
		p.info.Cmdline = argv
		t.send(t.sink.Process(p.info))
	}
}

func (t *Tracer) attach(p *tracee, held bool) error {
	pid := p.pid
	st, err := proc.ReadStat(pid)
	if err != nil {
		return fmt.Errorf("ebpf: %w", err)
	}
	if st.State == 'Z' || st.State == 'X' {
		return fmt.Errorf("ebpf: pid %d has exited: %w", pid, errs.ErrNoSuchProcess)
	}
	exe, _ := proc.Exe(pid)
	cmdline, _ := proc.Cmdline(pid)
	start := time.Now()
	var targets []target
	usdts, err := t.usdtTargets(pid, exe)
	if err != nil {
		return err
	}
	if usdts == nil {
		if targets, err = findTargets(pid); err != nil {
			return fmt.Errorf("ebpf: %w", err)
		}
		if len(targets) == 0 && t.cfg.Families&event.FamilyMmap == 0 {
			return fmt.Errorf("ebpf: pid %d (%s) maps no allocator heapscope can probe: %w", pid, exe, errs.ErrUnavailable)
		}
	}
	ld, err := findLoader(pid)
	if err != nil {
		return fmt.Errorf("ebpf: %w", err)
	}
	t.phases.since("maps and allocator symbols read", pid, start)
	start = time.Now()

	if t.uw != nil {
		// Before the probes: the first stacks are unwound with them (a
		// stack walked by frame pointer alone would be another stack,
		// another site, of the same call).
		if missing, err := t.uw.load(uint32(pid)); err != nil {
			t.warn(err)
		} else {
			t.warnTables(missing)
		}
		t.phases.since("unwind tables built and loaded", pid, start)
		start = time.Now()
	}
	if err := t.placeProbes(p, st, exe, cmdline, targets, usdts, ld, held); err != nil {
		return err
	}
	t.phases.since("probes placed and records sent", pid, start)
	if t.uw != nil && ld != nil {
		if err := t.uw.holdAtLoader(uint32(pid)); err != nil {
			t.warn(err)
		}
	}
	return nil
}

// placeProbes places pid's probes and sends its Process and Module
// records, holding the output meanwhile (unless the process is held), so
// that no event of the process is sent before its Process record.
func (t *Tracer) placeProbes(p *tracee, st proc.Stat, exe string, cmdline []string, targets []target, usdts []usdtTarget, ld *loader, held bool) error {
	if !held {
		t.out.Lock()
		defer t.out.Unlock()
	}
	if err := t.placeLinks(p, targets, usdts, ld); err != nil {
		return err
	}
	if held {
		// The probes took most of it, without holding the other
		// processes' delivery.
		t.out.Lock()
		defer t.out.Unlock()
	}
	now := monotonic()
	mods, _ := proc.Modules(p.pid, now)
	t.known[uint32(p.pid)] = true
	ms := &moduleSet{read: now}
	t.modules[uint32(p.pid)] = ms
	p.info = event.Process{PID: uint32(p.pid), PPID: uint32(st.PPID), Time: now, Exe: exe, Cmdline: cmdline}
	t.send(t.sink.Process(p.info))
	t.sendModules(ms, mods)
	return nil
}

// placeLinks places pid's probes, on its allocators' functions (targets)
// or its otel_memory probe sites (usdts), and puts it in the BPF side's
// sets.
func (t *Tracer) placeLinks(p *tracee, targets []target, usdts []usdtTarget, ld *loader) error {
	pid := p.pid
	for _, tg := range targets {
		ls, err := t.attachTarget(pid, p.pidx, tg)
		p.links = append(p.links, ls...)
		if err != nil {
			closeLinks(p.links)
			p.links = nil
			return err
		}
	}
	if usdts != nil {
		p.lmu.Lock()
		p.usdt, p.usdtFiles, p.usdtNames = true, map[fileKey]bool{}, map[string]bool{}
		for _, tg := range usdts {
			p.usdtFiles[tg.key] = true
		}
		p.lmu.Unlock()
	}
	for _, tg := range usdts {
		ls, err := t.attachUSDT(pid, tg)
		p.links = append(p.links, ls...)
		if err != nil {
			closeLinks(p.links)
			p.links = nil
			return err
		}
	}
	if ld != nil {
		ls, err := t.attachProgram(ld.ex, t.prog("dl_state"), false, pid, []uint64{ld.probe}, []uint64{ld.rDebug})
		p.links = append(p.links, ls...)
		if err != nil {
			closeLinks(p.links)
			p.links = nil
			return attachError(pid, ld.path, err)
		}
	}
	if t.cfg.Families&event.FamilyMmap != 0 {
		if err := t.objs.traced.Put(uint32(pid), uint8(1)); err != nil {
			closeLinks(p.links)
			p.links = nil
			return fmt.Errorf("ebpf: pid %d: tracing its mmap calls: %w", pid, err)
		}
	}
	if t.following() {
		if err := t.objs.follow.Put(uint32(pid), uint8(1)); err != nil {
			closeLinks(p.links)
			p.links = nil
			t.objs.traced.Delete(uint32(pid))
			return fmt.Errorf("ebpf: pid %d: following its children: %w", pid, err)
		}
	}
	return nil
}

// wanted reports whether a site is probed: its family is traced, or it is
// one operator new and delete call.
func (t *Tracer) wanted(s sites.Site) bool {
	fams := t.cfg.Families
	if fams&s.Func.Family() != 0 {
		return true
	}
	if fams&event.FamilyCXX == 0 {
		return false
	}
	switch s.Func {
	case event.FuncMalloc, event.FuncFree, event.FuncAlignedAlloc, event.FuncMemalign, event.FuncPosixMemalign:
		return true
	}
	return false
}

func cookie(s sites.Site, heap event.Heap, pidx uint16) uint64 {
	sp := s.Placement.SPDelta
	if sp > cookieSPMax {
		sp = cookieSPMax
	}
	return uint64(s.Func) | uint64(heap)<<cookieHeapShift | sp<<cookieSPShift | uint64(pidx)<<cookiePidxShift
}

// newPidx takes the lowest free process index of the aggregate tables.
func (t *Tracer) newPidx() (uint16, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for i := 1; i <= maxPidx; i++ {
		if i >= len(t.pidxUsed) {
			t.pidxUsed = append(t.pidxUsed, make([]bool, i+1-len(t.pidxUsed))...)
		}
		if !t.pidxUsed[i] {
			t.pidxUsed[i] = true
			return uint16(i), nil
		}
	}
	return 0, fmt.Errorf("ebpf: aggregate mode traces at most %d processes at once: %w", maxPidx, errs.ErrOutOfMemory)
}

// freePidx returns a process index, once its slots are purged.
func (t *Tracer) freePidx(pidx uint16) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if int(pidx) < len(t.pidxUsed) {
		t.pidxUsed[pidx] = false
	}
}

// attachTarget probes the wanted sites of one file for pid. It returns the
// links made even when it fails, for the caller to close.
func (t *Tracer) attachTarget(pid int, pidx uint16, tg target) ([]link.Link, error) {
	ex, err := link.OpenExecutable(tg.open)
	if err != nil {
		return nil, fmt.Errorf("ebpf: pid %d: %s: %w", pid, tg.path, err)
	}
	// One program is every probe; the cookie says which part of an
	// allocator it is (roles), and whether it is a return probe (ret).
	type group struct {
		roles         []uint64
		ret           []bool
		addrs, cookie []uint64
	}
	var alloc, free, wrap group
	// Probes go live in this order and (closeLinks closes in reverse) go
	// away in the opposite one. Frees first: while only some probes are
	// live (closing a link can take milliseconds of the target's calls), a
	// block allocated then is seen freed rather than leaked, and a free
	// of a block not seen allocated is counted as unmatched, as any free
	// of a block from before tracing is. The allocation's return probe
	// before its entry probe: an entry seen without its return would leave
	// the thread inside a call that never ends.
	alloc.roles, alloc.ret = []uint64{roleAllocExit, roleAllocEnter}, []bool{true, false}
	free.roles, free.ret = []uint64{roleFree}, []bool{false}
	wrap.roles, wrap.ret = []uint64{roleWrap}, []bool{false}
	for _, s := range tg.sites {
		if !t.wanted(s) {
			continue
		}
		g := &alloc
		switch s.Role {
		case sites.RoleFree:
			g = &free
		case sites.RoleWrapAlloc, sites.RoleWrapFree:
			g = &wrap
		}
		c := cookie(s, tg.heap, pidx)
		if s.Role == sites.RoleFree && tg.heap == event.HeapLibc {
			win, err := t.freeWindow(tg, s)
			if err != nil {
				return nil, err
			}
			c |= win << cookieWinShift
		}
		g.addrs = append(g.addrs, s.ProbeOffset())
		g.cookie = append(g.cookie, c)
	}

	var links []link.Link
	for _, g := range []group{free, alloc, wrap} {
		if len(g.addrs) == 0 {
			continue
		}
		for i, role := range g.roles {
			cookies := make([]uint64, len(g.cookie))
			for j, c := range g.cookie {
				cookies[j] = c | role<<cookieRoleShift
			}
			ls, err := t.attachProgram(ex, t.prog("probe"), g.ret[i], pid, g.addrs, cookies)
			links = append(links, ls...)
			if err != nil {
				return links, attachError(pid, tg.path, err)
			}
		}
	}
	return links, nil
}

func (t *Tracer) attachProgram(ex *link.Executable, prog *ebpf.Program, ret bool, pid int, addrs, cookies []uint64) ([]link.Link, error) {
	if t.multi {
		opts := &link.UprobeMultiOptions{Addresses: addrs, Cookies: cookies, PID: uint32(pid)}
		var l link.Link
		var err error
		if ret {
			l, err = ex.UretprobeMulti(nil, prog, opts)
		} else {
			l, err = ex.UprobeMulti(nil, prog, opts)
		}
		if err != nil {
			return nil, err
		}
		return []link.Link{l}, nil
	}
	var links []link.Link
	for i, a := range addrs {
		opts := &link.UprobeOptions{Address: a, PID: pid, Cookie: cookies[i]}
		var l link.Link
		var err error
		if ret {
			l, err = ex.Uretprobe("", prog, opts)
		} else {
			l, err = ex.Uprobe("", prog, opts)
		}
		if err != nil {
			return links, err
		}
		links = append(links, l)
	}
	return links, nil
}

func attachError(pid int, path string, err error) error {
	switch {
	case isNotExist(err):
		return fmt.Errorf("ebpf: pid %d: %w (while probing %s: %v)", pid, errs.ErrNoSuchProcess, path, err)
	case errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES):
		return fmt.Errorf("ebpf: pid %d: probing %s: %w: %v", pid, path, errs.ErrAccessDenied, err)
	}
	return fmt.Errorf("ebpf: pid %d: probing %s: %w", pid, path, err)
}

// attachSyscalls attaches the mmap, munmap and mremap tracepoints. BPF on a
// tracepoint runs for every process; the programs return at once for
// processes not in the traced map.
func (t *Tracer) attachSyscalls() error {
	if err := mountTracefs(); err != nil {
		return err
	}
	for _, tp := range []struct {
		name string
		prog *ebpf.Program
	}{
		{"sys_enter_mmap", t.coll.Programs["mmap_enter"]}, {"sys_exit_mmap", t.coll.Programs["mmap_exit"]},
		{"sys_enter_munmap", t.coll.Programs["munmap_enter"]}, {"sys_exit_munmap", t.coll.Programs["munmap_exit"]},
		{"sys_enter_mremap", t.coll.Programs["mremap_enter"]}, {"sys_exit_mremap", t.coll.Programs["mremap_exit"]},
	} {
		l, err := link.Tracepoint("syscalls", tp.name, tp.prog, nil)
		if err != nil {
			closeLinks(t.sys)
			t.sys = nil
			return fmt.Errorf("ebpf: tracepoint syscalls/%s %w", tp.name, err)
		}
		t.sys = append(t.sys, l)
	}
	return nil
}

// tracefsDir is where the kernel documents tracefs; link.Tracepoint looks
// there and under debugfs.
const tracefsDir = "/sys/kernel/tracing"

// mountTracefs mounts tracefs on tracefsDir when neither it nor debugfs's
// tracing directory holds the event tree, as on a minimal container or VM
// where nothing mounted it; systemd and perf do the same. It is needed
// only for the syscall tracepoints: uprobes are made through perf_event_open.
func mountTracefs() error {
	for _, dir := range []string{tracefsDir, "/sys/kernel/debug/tracing"} {
		if _, err := os.Stat(dir + "/events"); err == nil {
			return nil
		}
	}
	if err := unix.Mount("tracefs", tracefsDir, "tracefs", 0, ""); err != nil && !errors.Is(err, unix.EBUSY) {
		return fmt.Errorf("ebpf: tracefs is not mounted and mounting it on %s failed: %w", tracefsDir, err)
	}
	return nil
}

// tracee returns pid's tracee (nil if not traced) and whether the tracer
// is closed.
func (t *Tracer) tracee(pid int) (*tracee, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.procs[pid], t.closed
}

// Detach stops tracing pid: its probes are removed, what it produced is
// delivered (in aggregate mode, a final Snapshot), and an Exit with status
// -1 is sent. The error wraps errs.ErrNoSuchProcess if pid is not traced.
func (t *Tracer) Detach(pid int) error {
	t.attachMu.RLock()
	defer t.attachMu.RUnlock()
	defer t.lockPid(pid)()
	p, closed := t.tracee(pid)
	if closed {
		return errClosed
	}
	if p == nil {
		return fmt.Errorf("ebpf: pid %d is not traced: %w", pid, errs.ErrNoSuchProcess)
	}
	t.end(p, false)
	return t.sinkError()
}

func (t *Tracer) sinkError() error {
	t.out.Lock()
	defer t.out.Unlock()
	return t.sinkErr
}

// endedWait bounds the wait, at the end of a process a watch traces, for
// the watch to take its end in (stopped.Ended).
const endedWait = 250 * time.Millisecond

// ReportExit gives the exit status of a process attached with Launched,
// which the caller reaped: status is the exit code, or 128+signal when
// signal killed it. The process's Exit record carries them.
func (t *Tracer) ReportExit(pid, status, signal int) error {
	t.mu.Lock()
	p := t.procs[pid]
	t.mu.Unlock()
	if p == nil || !p.launched {
		return fmt.Errorf("ebpf: pid %d is not a traced launched process: %w", pid, errs.ErrNoSuchProcess)
	}
	select {
	case p.report <- exitStatus{int32(status), int32(signal)}:
	default: // reported already
	}
	return nil
}

// end stops tracing p, once: its probes go, what it produced is delivered,
// then its final snapshot (aggregate mode) and its Exit. exited says the
// process has ended (rather than being detached).
func (t *Tracer) end(p *tracee, exited bool) {
	p.endOnce.Do(func() {
		if !exited && !p.execd {
			t.titled(p) // detached: its last title
		}
		close(p.ended)
		t.watch.remove(p)
		p.lmu.Lock()
		p.linksClosed = true
		closeLinks(p.links)
		p.lmu.Unlock()
		if t.cfg.Families&event.FamilyMmap != 0 {
			t.objs.traced.Delete(uint32(p.pid))
		}
		if t.following() {
			t.objs.follow.Delete(uint32(p.pid))
		}
		if t.uw != nil {
			t.uw.forget(uint32(p.pid))
		}
		if !exited {
			t.clearThreads(p.pid)
		}
		if t.cfg.Sample > 0 && t.cfg.Mode == event.Stream { // aggregate: purge frees its live slots
			t.forgetSampled(p.pid)
		}
		// Every thread of an exited process has left its probes: what
		// it produced is in the ring, and the drain delivers it.
		t.drain()
		if t.cfg.Mode == event.Aggregate {
			t.mu.Lock()
			p.finishing = true
			t.mu.Unlock()
			t.snapshot([]int{p.pid}, true)
			t.purge(p.pid, p.pidx)
			t.freePidx(p.pidx)
		}

		ex := exitStatus{status: -1}
		if exited {
			if p.launched {
				select {
				case ex = <-p.report:
				case <-t.closing:
				}
			} else if s, ok := childStatus(p.pidfd); ok {
				ex = s
			} else if status, sig, ok := stopped.Ended(p.pid, endedWait); ok {
				// Another's child, followed by a watch, which saw it end.
				ex = exitStatus{int32(status), int32(sig)}
			}
		}
		t.out.Lock()
		t.send(t.sink.Exit(event.Exit{PID: uint32(p.pid), Time: monotonic(), Status: ex.status, Signal: ex.signal}))
		delete(t.known, uint32(p.pid))
		t.out.Unlock()
		unix.Close(p.pidfd)
		if p.root != nil {
			p.root.Close()
		}

		t.mu.Lock()
		delete(t.procs, p.pid)
		last := len(t.procs) == 0
		t.mu.Unlock()
		if exited && last {
			t.closeDone()
		}
	})
}

// clearThreads deletes the BPF state of a detached process's threads. A
// thread inside malloc when its probes went would otherwise keep a call in
// flight that never returns, and take its next calls, should the process
// be attached again, for calls nested in it. (An exited thread's state
// goes with it.)
func (t *Tracer) clearThreads(pid int) {
	m := t.coll.Maps["threads"]
	tids, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return
	}
	for _, d := range tids {
		tid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		fd, err := unix.PidfdOpen(tid, unix.PIDFD_THREAD)
		if err != nil {
			continue // gone, or a kernel before 6.9 (no thread pidfds)
		}
		m.Delete(int32(fd))
		unix.Close(fd)
	}
}

// smpKey is bpf/heapscope.h's struct smp_key.
type smpKey struct {
	Addr uint64
	Pid  uint32
	_    uint32
}

// forgetSampled removes pid's blocks from the sampled blocks: its probes
// are gone (or it is), so the entries would only fill the map, or make a
// later image's frees of the same addresses look sampled. (An exec'd
// image's are removed before the new one is attached, while it is held.)
func (t *Tracer) forgetSampled(pid int) {
	m := t.coll.Maps["sampled"]
	var k smpKey
	var v uint8
	var gone []smpKey
	it := m.Iterate()
	for it.Next(&k, &v) {
		if k.Pid == uint32(pid) {
			gone = append(gone, k)
		}
	}
	for _, k := range gone {
		m.Delete(k)
	}
}
