//go:build linux && amd64

// Traced process images: their arrival, exit and end of stream.

package preload

import (
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/heapscope/heapscope/event"
)

// A proc is one traced process image: a process from its first traced call
// to its exit or its next exec.
type proc struct {
	pid, ppid uint32
	start     int64
	exe       string
	argv      []string
	direct    bool // our child: wait for Exited to learn its status
	conns     int  // connections still open
	pidfd     int  // -1 when unavailable
	dead      bool // the image ended: exited, or exec'd into another
	deadAt    time.Time
	final     bool // dead, and every ring it made is known: drain it all
	replaced  bool // it exec'd: a newer image of the PID exists
	started   bool // its Process record was sent
	status    int32
	signal    int32
	known     bool // status and signal came from Exited
	rings     []*ring
	idBase    uint32 // added to the interposer's stack ids
	maxID     uint32 // the largest id it defined
	lastTime  int64
	older     *proc           // an earlier image of the same PID, still draining
	heap      event.Heap      // the allocator its malloc is (one parseHello accepts)
	notes     []event.Warning // warnings before its Process record was sent
	execNote  string          // the warning of an exec it announced, said once its connections close
}

// hello registers a new image, or a new connection of a known one.
func (c *Collector) hello(cn *conn, h *hello) {
	c.dropChild(h.pid)
	var prev *proc
	for i := len(c.procs) - 1; i >= 0; i-- {
		if c.procs[i].pid == h.pid {
			prev = c.procs[i]
			break
		}
	}
	if h.flags&helloContinue != 0 && prev != nil && !prev.final {
		prev.conns++
		c.byConn[cn] = prev
		return
	}
	p := &proc{
		pid: h.pid, ppid: h.ppid, start: h.mono, exe: h.exe, argv: h.argv,
		direct: h.ppid == c.self, conns: 1, pidfd: -1, lastTime: h.mono, heap: h.heap,
	}
	if fd, err := unix.PidfdOpen(int(h.pid), 0); err == nil {
		p.pidfd = fd
	} else if err == unix.ESRCH {
		p.markDead()
	}
	if prev != nil {
		// A PID runs one image at a time: the earlier one exec'd into
		// this one, so it will write nothing more.
		prev.replaced = true
		prev.markDead()
		p.older = prev
	}
	c.byConn[cn] = p
	c.procs = append(c.procs, p)
	if h.private != nil {
		c.warn(p, WarnAllocatorUnseen, h.private.Text(progName(p)))
	}
}

// adopt notes children a traced process forked: until each connects or
// exits it counts as live, so that a session does not end under a child
// that has not allocated yet (a daemon's, whose parent exits at once).
func (c *Collector) adopt(pids []uint32) {
	for _, pid := range pids {
		if _, ok := c.children[pid]; ok || c.tracing(pid) {
			continue
		}
		fd, err := unix.PidfdOpen(int(pid), 0)
		if err != nil {
			continue // gone already
		}
		c.children[pid] = fd
	}
}

// tracing reports whether pid has a live traced image.
func (c *Collector) tracing(pid uint32) bool {
	for i := len(c.procs) - 1; i >= 0; i-- {
		if p := c.procs[i]; p.pid == pid {
			return !p.dead
		}
	}
	return false
}

// dropChild forgets a child named by its parent: it connected, or exited.
func (c *Collector) dropChild(pid uint32) {
	if fd, ok := c.children[pid]; ok {
		unix.Close(fd)
		delete(c.children, pid)
	}
}

func (p *proc) markDead() {
	if !p.dead {
		p.dead, p.deadAt = true, time.Now()
	}
}

// checkExits notices images that ended, and makes final those whose every
// ring is known.
func (c *Collector) checkExits() {
	live := 0
	defer func() { c.live.Store(int64(live)) }()
	for pid, fd := range c.children {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		if n, err := unix.Poll(fds, 0); err == nil && n > 0 {
			c.dropChild(pid)
		} else {
			live++
		}
	}
	for _, p := range c.procs {
		if p.final {
			continue
		}
		// Every connection closed: the image exited, exec'd, or closed our
		// socket. Only its exit (or a new image) ends its stream.
		if !p.dead && p.conns == 0 {
			if p.pidfd < 0 {
				p.markDead()
			} else {
				fds := []unix.PollFd{{Fd: int32(p.pidfd), Events: unix.POLLIN}}
				if n, err := unix.Poll(fds, 0); err == nil && n > 0 {
					p.markDead()
				}
			}
		}
		if p.dead && (p.conns == 0 || time.Since(p.deadAt) > eofPatience) {
			p.final = true
		}
		// An image that ended counts until its stream is final: the
		// children it named before exiting are known by then.
		if !p.final {
			live++
		}
	}
}

// runnable reports whether p's records may go to the sink now: an image
// waits until the one it replaced is done.
func (c *Collector) runnable(p *proc) bool {
	if p.older != nil {
		return false
	}
	if !p.started {
		p.started = true
		p.idBase = c.nextID[p.pid]
		c.sinkCall(c.sink.Process(event.Process{PID: p.pid, PPID: p.ppid, Time: p.start, Exe: p.exe, Cmdline: p.argv}))
		for _, w := range p.notes {
			c.sinkCall(c.sink.Note(w))
		}
		p.notes = nil
	}
	return true
}

// finish ends the streams of final images whose rings are drained: their
// Exit, and their resources. A direct child that exited waits for Exited
// unless the session is closing; then whatever was just drained is all
// there is.
func (c *Collector) finish(closing bool) {
	kept := c.procs[:0]
	for _, p := range c.procs {
		if !p.final || !p.started || (!closing && !drained(p)) || (p.direct && !p.replaced && !p.known && !closing) {
			kept = append(kept, p)
			continue
		}
		e := event.Exit{PID: p.pid, Time: monoNow(), Status: -1}
		if e.Time < p.lastTime {
			e.Time = p.lastTime
		}
		if p.known && !p.replaced {
			e.Status, e.Signal = p.status, p.signal
		}
		c.sinkCall(c.sink.Exit(e))
		if next := p.maxID + 1 + p.idBase; next > c.nextID[p.pid] {
			c.nextID[p.pid] = next
		}
		for _, r := range p.rings {
			c.forgetFlushTarget(r)
			r.unmap()
		}
		p.rings = nil
		if p.pidfd >= 0 {
			unix.Close(p.pidfd)
			p.pidfd = -1
		}
		for _, q := range c.procs {
			if q.older == p {
				q.older = nil
			}
		}
		for cn, q := range c.byConn {
			if q == p {
				delete(c.byConn, cn)
			}
		}
	}
	for i := len(kept); i < len(c.procs); i++ {
		c.procs[i] = nil
	}
	c.procs = kept
}

func drained(p *proc) bool {
	for _, r := range p.rings {
		if !r.broken && r.pos != atomic.LoadUint64(r.head) {
			return false
		}
	}
	return true
}
