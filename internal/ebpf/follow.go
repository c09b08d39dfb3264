package ebpf

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"

	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/heapscope/heapscope/internal/errs"
	"github.com/heapscope/heapscope/internal/stopped"
)

// Children. Probes are attached per process (a PID-filtered uprobe runs its
// program only in that process), so the parent's probes, though the child
// inherits their breakpoints, do not report the child's calls. The BPF side
// stops a followed process's child at its fork, and a followed process at
// its exec, before either runs an instruction, and sends a note; the
// follower attaches the probes and then continues the process. The stop is
// a SIGSTOP: a group stop, which a parent that waits with WUNTRACED (a
// job-control shell) can see and a SIGCONT ends, unless a watch of package
// stopped traces the process (WatchOptions.Follow, with Holding as its
// Held): then it is a ptrace stop the parent cannot see, which
// stopped.Release ends. NoFollowFork avoids both.

// noteSize is sizeof(struct note).
const noteSize = 24

func decodeNote(b []byte, n *heapscopeNote) bool {
	if len(b) != noteSize {
		return false
	}
	le := binary.LittleEndian
	n.Time = le.Uint64(b[0:])
	n.Kind = le.Uint32(b[8:])
	n.Pid = le.Uint32(b[12:])
	n.Ppid = le.Uint32(b[16:])
	n.Held = int32(le.Uint32(b[20:]))
	return true
}

// Kinds of struct note.
const (
	noteFork = 1
	noteExec = 2
	noteLibs = 3 // the loader added objects: load their tables
)

// following reports whether forks and execs are followed.
func (t *Tracer) following() bool { return !t.cfg.NoFollowFork }

// FollowsChildren returns nil when the tracer follows the processes traced
// processes fork and exec, else why not: Config.NoFollowFork, or a kernel
// without what it takes (bpf_send_signal_task, Linux 6.13), in which case
// the error wraps errs.ErrUnavailable.
func (t *Tracer) FollowsChildren() error {
	switch {
	case t.followErr != nil:
		return fmt.Errorf("ebpf: children are not followed: %w: %v", errs.ErrUnavailable, t.followErr)
	case !t.following():
		return errors.New("ebpf: children are not followed (NoFollowFork)")
	}
	return nil
}

// attachFollow attaches the fork and exec tracepoints.
func (t *Tracer) attachFollow() error {
	for _, name := range []string{"on_fork", "on_exec"} {
		l, err := link.AttachTracing(link.TracingOptions{Program: t.coll.Programs[name]})
		if err != nil {
			closeLinks(t.forks)
			t.forks = nil
			return fmt.Errorf("ebpf: attaching %s: %w", name, err)
		}
		t.forks = append(t.forks, l)
	}
	return nil
}

// note handles a fork or exec the BPF side reported, in its own goroutine:
// attaching waits for the reader (which delivers what the process did
// before).
func (t *Tracer) note(n heapscopeNote) {
	held := n.Held == 0
	pid := int(n.Pid)
	if held {
		t.heldMu.Lock()
		t.held[pid] = true
		t.heldMu.Unlock()
	}
	switch n.Kind {
	case noteFork:
		// In the parent's queue: the children of one process are
		// followed one at a time, and those of others beside them, so
		// that a burst of forks in one process does not stall the
		// others'.
		t.follows.run(int(n.Ppid), func() { t.followFork(pid, held) })
	case noteExec:
		t.follows.run(pid, func() { t.followExec(pid, held) })
	case noteLibs:
		go t.loadLibraries(pid, held)
	default:
		go t.resume(pid, held)
	}
}

// followQueues runs functions in order for each key, and the queues of
// different keys side by side, each on a goroutine while it has work.
type followQueues struct {
	mu sync.Mutex
	q  map[int][]func()
}

func (f *followQueues) run(key int, fn func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.q == nil {
		f.q = map[int][]func(){}
	}
	if q, busy := f.q[key]; busy {
		f.q[key] = append(q, fn)
		return
	}
	f.q[key] = nil
	go func() {
		for {
			fn()
			f.mu.Lock()
			q := f.q[key]
			if len(q) == 0 {
				delete(f.q, key)
				f.mu.Unlock()
				return
			}
			fn, f.q[key] = q[0], q[1:]
			f.mu.Unlock()
		}
	}()
}

// followFork traces a child of a traced process, then continues it.
func (t *Tracer) followFork(pid int, held bool) {
	defer t.resume(pid, held)
	if err := t.attachHeld(pid, held); err != nil {
		t.forget(pid)
		t.warn(fmt.Errorf("ebpf: following child %d: %w", pid, err))
	}
}

// attachHeld is Attach of a child the BPF side holds (or, !held, could not).
func (t *Tracer) attachHeld(pid int, held bool) error {
	t.attachMu.RLock()
	defer t.attachMu.RUnlock()
	defer t.lockPid(pid)()
	return t.attachLocked(pid, attachOptions{held: held})
}

// followExec ends the traced image of pid that exec'd, and traces the new
// one from its first instruction, then continues it.
func (t *Tracer) followExec(pid int, held bool) {
	defer t.resume(pid, held)
	t.attachMu.RLock()
	defer t.attachMu.RUnlock()
	defer t.lockPid(pid)()
	p, closed := t.tracee(pid)
	if p == nil || closed {
		return
	}
	// The old image's events are all in the ring before the note; end
	// delivers them, then its Exit.
	p.execd = true
	t.end(p, false)
	if err := t.attachLocked(pid, attachOptions{launched: p.launched, held: held}); err != nil {
		t.forget(pid)
		t.warn(fmt.Errorf("ebpf: following pid %d into its exec: %w", pid, err))
	}
}

// forget removes a process the BPF side added as a child from the followed
// and traced sets, when it could not be traced.
func (t *Tracer) forget(pid int) {
	t.life.RLock()
	defer t.life.RUnlock()
	if t.gone {
		return
	}
	t.mu.Lock()
	_, traced := t.procs[pid]
	t.mu.Unlock()
	if !traced {
		t.objs.follow.Delete(uint32(pid))
		t.objs.traced.Delete(uint32(pid))
	}
}

// resume continues a process the BPF side stopped.
func (t *Tracer) resume(pid int, held bool) {
	if !held {
		return
	}
	t.heldMu.Lock()
	defer t.heldMu.Unlock()
	if t.held[pid] {
		delete(t.held, pid)
		t.cont(pid)
	}
}

// cont ends a hold of pid, through the watch that traces it or with
// SIGCONT, and takes it off the watchdog's list. Through a watch, off the
// list first (on the watch's thread, before the process runs): once it
// runs it may be held again at once (its exec, its loader), and that hold,
// listed anew before its stop, must stay listed (the watch asks Holding).
// With SIGCONT, off the list after: a heapscope killed between the two
// leaves the stopped process listed for the watchdog. Called with heldMu
// held.
func (t *Tracer) cont(pid int) {
	if !stopped.Release(pid, func() { t.unheld(pid) }) {
		unix.Kill(pid, unix.SIGCONT)
		t.unheld(pid)
	}
}

// Holding reports whether the BPF side holds process pid (a stop it made
// and the tracer has not ended): a watch's WatchOptions.Held.
func (t *Tracer) Holding(pid int) bool {
	t.life.RLock()
	defer t.life.RUnlock()
	if t.gone {
		return false
	}
	var v uint8
	return t.objs.held.Lookup(uint32(pid), &v) == nil
}

// resumeAll continues the processes still held, whose followers wait for
// Close to end (and would then not trace them): Close must not return
// with a process of the user's stopped.
func (t *Tracer) resumeAll() {
	t.heldMu.Lock()
	defer t.heldMu.Unlock()
	for pid := range t.held {
		t.cont(pid)
	}
	clear(t.held)
}

// unheld takes a process continued off the watchdog's list.
func (t *Tracer) unheld(pid int) {
	t.life.RLock()
	defer t.life.RUnlock()
	if !t.gone {
		t.objs.held.Delete(uint32(pid))
	}
}

// warn keeps the first warnings of things that went wrong without ending
// the session (a child that could not be traced).
func (t *Tracer) warn(err error) {
	t.warnMu.Lock()
	defer t.warnMu.Unlock()
	if len(t.warnings) < maxWarnings {
		t.warnings = append(t.warnings, err)
	}
}

const maxWarnings = 32

// Warnings returns the first problems that did not end the session: a
// child that could not be traced (it exited at once, or maps no allocator
// heapscope can probe), at most 32.
func (t *Tracer) Warnings() []error {
	t.warnMu.Lock()
	defer t.warnMu.Unlock()
	return append([]error(nil), t.warnings...)
}
