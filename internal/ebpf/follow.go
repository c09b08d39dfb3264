package ebpf

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/heapscope/heapscope/internal/errs"
)

// Children. Probes are attached per process (a PID-filtered uprobe runs its
// program only in that process), so the parent's probes, though the child
// inherits their breakpoints, do not report the child's calls. The BPF side
// stops a followed process's child at its fork, and a followed process at
// its exec, before either runs an instruction, and sends a note; the
// follower attaches the probes and then continues the process. The stop is
// a SIGSTOP, which a parent that waits with WUNTRACED (a job-control shell)
// can see, and a SIGCONT ends it; NoFollowFork avoids both.

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
	go func() {
		switch n.Kind {
		case noteFork:
			t.followFork(pid, held)
		case noteExec:
			t.followExec(pid, held)
		case noteLibs:
			t.loadLibraries(pid, held)
		default:
			t.resume(pid, held)
		}
	}()
}

// followFork traces a child of a traced process, then continues it.
func (t *Tracer) followFork(pid int, held bool) {
	defer t.resume(pid, held)
	if err := t.Attach(pid); err != nil {
		t.forget(pid)
		t.warn(fmt.Errorf("ebpf: following child %d: %w", pid, err))
	}
}

// followExec ends the traced image of pid that exec'd, and traces the new
// one from its first instruction, then continues it.
func (t *Tracer) followExec(pid int, held bool) {
	defer t.resume(pid, held)
	t.attachMu.Lock()
	defer t.attachMu.Unlock()
	p, closed := t.tracee(pid)
	if p == nil || closed {
		return
	}
	// The old image's events are all in the ring before the note; end
	// delivers them, then its Exit.
	p.execd = true
	t.end(p, false)
	if err := t.attachLocked(pid, attachOptions{launched: p.launched}); err != nil {
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
		unix.Kill(pid, unix.SIGCONT)
	}
}

// resumeAll continues the processes still held, whose followers wait for
// Close to end (and would then not trace them): Close must not return
// with a process of the user's stopped.
func (t *Tracer) resumeAll() {
	t.heldMu.Lock()
	defer t.heldMu.Unlock()
	for pid := range t.held {
		unix.Kill(pid, unix.SIGCONT)
	}
	clear(t.held)
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
