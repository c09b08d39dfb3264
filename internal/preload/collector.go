//go:build linux && amd64

package preload

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/internal/errs"
)

// A Collector is one preload session: the socket traced processes connect
// to, the control block they share, and the goroutine that drains their
// rings into the sink. The sink is called from one goroutine at a time.
type Collector struct {
	cfg  Config
	sink event.Sink
	lib  string
	dir  string
	lock int // flock on dir while the collector runs (see sockdir.go)
	sock string
	self uint32

	ln    *net.UnixListener
	ctlFD int
	ctl   []byte
	state *uint32
	bell  *uint32
	sleep *uint32
	beat  *uint64
	clk   *clock

	mu      sync.Mutex // guards the fields below, and the control block's life
	reqs    []request
	closing bool // Close was called: no new processes
	stopped bool // the pump is done: no requests at all
	conns   map[*net.UnixConn]struct{}
	serving map[*conn]struct{} // the processes' connections past their hello (see settle)
	stacks  event.KindSet

	tables tableServer // unwind tables for --unwind tables

	statsMu sync.Mutex
	stats   event.Stats

	live atomic.Int64 // images not known to have exited, as of the pump's last pass

	wg       sync.WaitGroup // acceptor and connection goroutines
	done     chan struct{}  // the pump returned
	closeErr error

	// pump state
	procs     []*proc
	children  map[uint32]int // PID → pidfd: children named by a traced parent, not yet connected
	byConn    map[*conn]*proc
	nextID    map[uint32]uint32 // per PID: the next free stack id, across images
	batch     []event.Event
	heap      []*ring
	flushes   []*flushReq
	sinkErr   error
	delivered uint64
	lost      uint64
	broken    uint64
	lastStats event.Stats
	// ringsMapped counts the rings processes sent (tests check they are
	// reused).
	ringsMapped int
	statsAt     time.Time
}

// New starts a collector. Nothing is traced until a command prepared with
// it runs.
func New(cfg Config, sink event.Sink) (*Collector, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if sink == nil {
		return nil, fmt.Errorf("preload: nil sink: %w", errs.ErrInvalidFlags)
	}
	if cfg.Unwind == event.UnwindDWARF && !haveLibunwind() {
		return nil, fmt.Errorf("preload: --unwind dwarf needs libunwind.so.8 (Debian: libunwind8): %w", errs.ErrUnavailable)
	}
	lib, err := LibraryPath()
	if err != nil {
		return nil, fmt.Errorf("%v: %w", err, errs.ErrUnavailable)
	}
	c := &Collector{
		cfg:      cfg,
		sink:     sink,
		lib:      lib,
		self:     uint32(os.Getpid()),
		ctlFD:    -1,
		lock:     -1,
		conns:    map[*net.UnixConn]struct{}{},
		serving:  map[*conn]struct{}{},
		done:     make(chan struct{}),
		byConn:   map[*conn]*proc{},
		nextID:   map[uint32]uint32{},
		children: map[uint32]int{},
		batch:    make([]event.Event, 0, batchSize),
	}
	if err := c.setup(); err != nil {
		c.release()
		return nil, err
	}
	c.statsAt = time.Now()
	c.wg.Add(1)
	go c.accept()
	go c.pump()
	return c, nil
}

func (c *Collector) setup() error {
	cleanStaleSockDirs(os.TempDir())
	dir, lock, err := makeSockDir()
	if err != nil {
		return err
	}
	c.dir, c.lock = dir, lock
	c.sock = filepath.Join(dir, "sock")
	c.ln, err = net.ListenUnix("unixpacket", &net.UnixAddr{Name: c.sock, Net: "unixpacket"})
	if err != nil {
		return fmt.Errorf("preload: listen: %w", err)
	}
	// The interposer refuses a socket that others can write (whatever the
	// umask made of it); the directory, 0700, already keeps them out.
	if err := os.Chmod(c.sock, 0o600); err != nil {
		return fmt.Errorf("preload: listen: %w", err)
	}
	fd, err := unix.MemfdCreate("heapscope-control", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return fmt.Errorf("preload: control block: %w: %v", errs.ErrOutOfMemory, err)
	}
	c.ctlFD = fd
	if err := unix.Ftruncate(fd, ctlSize); err != nil {
		return fmt.Errorf("preload: control block: %w: %v", errs.ErrOutOfMemory, err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_SEAL); err != nil {
		return fmt.Errorf("preload: sealing the control block: %w", err)
	}
	c.ctl, err = unix.Mmap(fd, 0, ctlSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fmt.Errorf("preload: control block: %w: %v", errs.ErrOutOfMemory, err)
	}
	c.state = (*uint32)(unsafe.Pointer(&c.ctl[ctlState]))
	c.bell = (*uint32)(unsafe.Pointer(&c.ctl[ctlDoorbell]))
	c.sleep = (*uint32)(unsafe.Pointer(&c.ctl[ctlSleeping]))
	c.beat = (*uint64)(unsafe.Pointer(&c.ctl[ctlHeartbeat]))

	useTSC := tscUsable() && !forceMonotonic
	c.clk = newClock(useTSC)
	c.stacks = c.cfg.Stacks &^ event.NoStacks
	le := binary.LittleEndian
	le.PutUint32(c.ctl[ctlMagic:], magic)
	le.PutUint32(c.ctl[ctlVersion:], version)
	le.PutUint32(c.ctl[ctlFamilies:], uint32(c.cfg.Families))
	le.PutUint32(c.ctl[ctlUnwind:], uint32(c.cfg.Unwind))
	le.PutUint32(c.ctl[ctlMaxFrames:], uint32(c.cfg.MaxFrames))
	le.PutUint32(c.ctl[ctlRingSize:], uint32(c.cfg.BufferSize))
	onFull := uint32(onFullBlock)
	if c.cfg.OnFull == event.Drop {
		onFull = onFullDrop
	}
	le.PutUint32(c.ctl[ctlOnFull:], onFull)
	le.PutUint32(c.ctl[ctlClock:], c.clk.mode)
	le.PutUint64(c.ctl[ctlSampleRate:], uint64(c.cfg.SampleRate))
	le.PutUint64(c.ctl[ctlSampleSeed:], c.cfg.SampleSeed)
	if c.cfg.EmitUSDT {
		le.PutUint32(c.ctl[ctlEmitUsdt:], 1)
	}
	atomic.StoreUint32(c.state, stackBits(c.cfg.Stacks))
	return nil
}

// forceMonotonic makes sessions use CLOCK_MONOTONIC timestamps even where the
// TSC is usable (tests of the fallback set it).
var forceMonotonic bool

func stackBits(s event.KindSet) uint32 { return uint32(s&^event.NoStacks) & stateStacks }

func haveLibunwind() bool {
	for _, d := range []string{"/usr/lib/x86_64-linux-gnu", "/lib/x86_64-linux-gnu", "/usr/lib64", "/lib64", "/usr/lib", "/lib", "/usr/local/lib"} {
		if _, err := os.Stat(filepath.Join(d, "libunwind.so.8")); err == nil {
			return true
		}
	}
	return false
}

// release frees what setup acquired.
func (c *Collector) release() {
	if c.ln != nil {
		c.ln.Close()
	}
	c.mu.Lock()
	if c.ctl != nil {
		unix.Munmap(c.ctl)
		c.ctl, c.state, c.bell, c.sleep, c.beat = nil, nil, nil, nil, nil
	}
	c.mu.Unlock()
	if c.ctlFD >= 0 {
		unix.Close(c.ctlFD)
		c.ctlFD = -1
	}
	if c.dir != "" {
		os.RemoveAll(c.dir)
		unix.Close(c.lock)
	}
}

// Library returns the path of the interposer the collector injects.
func (c *Collector) Library() string { return c.lib }

// Prepare makes cmd traced: it sets cmd.Env (from os.Environ() when nil) so
// that the program loads the interposer and reaches this collector. The
// caller starts cmd, waits for it, and reports its end with Exited.
func (c *Collector) Prepare(cmd *exec.Cmd) error {
	c.mu.Lock()
	closing := c.closing
	c.mu.Unlock()
	if closing {
		return fmt.Errorf("preload: collector closed: %w", errs.ErrNotRunning)
	}
	env := cmd.Env
	if env == nil {
		env = os.Environ()
	}
	out := make([]string, 0, len(env)+3)
	preload := c.lib
	for _, kv := range env {
		switch {
		case strings.HasPrefix(kv, envPrefix):
			continue
		case strings.HasPrefix(kv, "LD_PRELOAD="):
			if v := strings.TrimPrefix(kv, "LD_PRELOAD="); v != "" {
				preload += " " + v
			}
			continue
		}
		out = append(out, kv)
	}
	cmd.Env = append(out, "LD_PRELOAD="+preload, envSocket+"="+c.sock, envLib+"="+c.lib,
		envUID+"="+strconv.Itoa(os.Geteuid()))
	return nil
}

// Exited reports that the process pid, started by the caller, ended with
// exit status status, or was killed by signal (then status is ignored). Its
// Exit record carries them (Status 128+signal when killed); without this
// call it carries -1.
func (c *Collector) Exited(pid int, status, signal int) {
	c.enqueue(request{kind: reqExited, pid: uint32(pid), status: status, signal: signal})
}

// Live returns how many traced processes are not known to have exited (or
// whose last events are not yet delivered), as of the collector's last
// pass: a program's descendants that are still running once it has exited,
// counting those forked by a traced process that have not allocated yet.
func (c *Collector) Live() int { return int(c.live.Load()) }

// SetStacks changes, live, which kinds carry a stack: running processes see
// it at their next allocation call.
func (c *Collector) SetStacks(s event.KindSet) error {
	if err := checkStacks(s); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closing {
		return fmt.Errorf("preload: collector closed: %w", errs.ErrNotRunning)
	}
	for {
		old := atomic.LoadUint32(c.state)
		if atomic.CompareAndSwapUint32(c.state, old, old&^stateStacks|stackBits(s)) {
			c.stacks = s &^ event.NoStacks
			return nil
		}
	}
}

// Stacks returns the kinds that currently carry a stack.
func (c *Collector) Stacks() event.KindSet {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stacks
}

// Flush returns once every event published before the call has reached the
// sink (a thread stopped in the middle of writing one delays it by at most
// a second), and reports the sink's first error.
func (c *Collector) Flush() error {
	done := make(chan error, 1)
	if !c.enqueue(request{kind: reqFlush, done: done}) {
		return fmt.Errorf("preload: collector closed: %w", errs.ErrNotRunning)
	}
	return <-done
}

// Stats returns what the session delivered and lost so far.
func (c *Collector) Stats() event.Stats {
	c.statsMu.Lock()
	defer c.statsMu.Unlock()
	return c.stats
}

// Close ends the session: processes still running stop tracing at their
// next call (and stop passing LD_PRELOAD on); everything they published is
// drained into the sink, followed by an Exit for every process and a final
// Stats. It returns the sink's first error. Call it after the direct child
// exited, or to stop.
func (c *Collector) Close() error {
	c.mu.Lock()
	if c.closing {
		c.mu.Unlock()
		<-c.done
		return c.closeErr
	}
	c.closing = true
	for {
		old := atomic.LoadUint32(c.state)
		if atomic.CompareAndSwapUint32(c.state, old, old|stateClosed) {
			break
		}
	}
	done := make(chan error, 1)
	c.reqs = append(c.reqs, request{kind: reqClose, done: done})
	c.kick()
	c.mu.Unlock()
	c.closeErr = <-done
	<-c.done
	// Stop accepting, then end every connection: processes that connect
	// now find no one and run untraced.
	c.ln.Close()
	c.mu.Lock()
	for uc := range c.conns {
		uc.Close()
	}
	c.mu.Unlock()
	c.wg.Wait()
	c.tables.close()
	c.release()
	return c.closeErr
}

// ---- requests from the API and the connection goroutines ----

type reqKind uint8

const (
	reqHello reqKind = iota
	reqRing
	reqEOF
	reqExited
	reqFlush
	reqClose
	reqChildren
	reqNote
	reqDetached
	reqFlushProcess // FlushProcess (flushpid.go)
)

type request struct {
	kind   reqKind
	conn   *conn
	hello  *hello
	ring   *ring
	pid    uint32
	pids   []uint32 // reqChildren
	code   uint32   // reqNote
	text   string   // reqNote: its path, if any
	status int
	signal int
	done   chan error
}

// enqueue hands a request to the pump; false when it is refused (then a
// ring in it is unmapped): new processes once Close was called, anything
// once the pump stopped. Until then, rings and ends of connections already
// known still count: Close waits for them.
func (c *Collector) enqueue(r request) bool {
	c.mu.Lock()
	if c.stopped || (c.closing && (r.kind == reqHello || r.kind == reqFlush)) {
		c.mu.Unlock()
		if r.ring != nil {
			r.ring.answer(false)
			r.ring.unmap()
		}
		return false
	}
	c.reqs = append(c.reqs, r)
	c.kick()
	c.mu.Unlock()
	return true
}

// kick wakes the pump. c.mu is held: the control block is mapped.
func (c *Collector) kick() {
	atomic.AddUint32(c.bell, 1)
	futexWake(c.bell, 1)
}

func (c *Collector) takeRequests(into []request) []request {
	c.mu.Lock()
	into = append(into[:0], c.reqs...)
	c.reqs = c.reqs[:0]
	c.mu.Unlock()
	return into
}

func (c *Collector) hasRequests() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.reqs) > 0
}

// ---- connections ----

// A conn is one connection of a traced process image.
type conn struct {
	uc  *net.UnixConn
	pid uint32
	// mu is held from a message's read until the pump has it queued (see
	// settle): whoever takes it and finds nothing unread knows that every
	// message sent before is in the pump's queue.
	mu sync.Mutex
}

// hello is a parsed HELLO message.
type hello struct {
	flags     uint32
	pid, ppid uint32
	mono      int64
	heap      event.Heap // the allocator its malloc is
	exe       string
	argv      []string
	private   *PrivateAllocator // an allocator of the executable's own that the interposer does not see
}

func parseHello(b []byte) (*hello, error) {
	le := binary.LittleEndian
	if len(b) < helloSize || le.Uint32(b) != magic || le.Uint32(b[4:]) != version || le.Uint32(b[8:]) != msgHello {
		return nil, errors.New("preload: bad hello")
	}
	h := &hello{
		flags: le.Uint32(b[12:]),
		pid:   le.Uint32(b[16:]),
		ppid:  le.Uint32(b[20:]),
		mono:  int64(le.Uint64(b[24:])),
	}
	el, cl := uint64(le.Uint32(b[32:])), uint64(le.Uint32(b[36:]))
	if helloSize+el+cl > uint64(len(b)) || h.pid == 0 {
		return nil, errors.New("preload: bad hello")
	}
	switch heap := le.Uint32(b[40:]); heap {
	case heapLibc, heapJemalloc, heapTcmalloc, heapMimalloc:
		h.heap = event.Heap(heap)
	default:
		return nil, fmt.Errorf("preload: bad hello: heap %d", heap)
	}
	h.exe = string(b[helloSize : helloSize+el])
	if cmd := strings.TrimSuffix(string(b[helloSize+el:helloSize+el+cl]), "\x00"); cmd != "" {
		h.argv = strings.Split(cmd, "\x00")
	}
	return h, nil
}

// parseChildren returns the PIDs of a CHILDREN message; nil if it is
// malformed.
func parseChildren(b []byte) []uint32 {
	le := binary.LittleEndian
	n := uint64(le.Uint32(b[12:]))
	if n == 0 || n > childrenMax || uint64(len(b)) != childrenSize+4*n {
		return nil
	}
	pids := make([]uint32, n)
	for i := range pids {
		pids[i] = le.Uint32(b[childrenSize+4*i:])
	}
	return pids
}

func (c *Collector) accept() {
	defer c.wg.Done()
	for {
		uc, err := c.ln.AcceptUnix()
		if err != nil {
			return
		}
		c.track(uc, c.serve)
	}
}

// track runs serve on a connection of its own goroutine, counted in c.wg
// and closed by Close; once the collector is closing, it closes uc instead.
func (c *Collector) track(uc *net.UnixConn, serve func(*net.UnixConn)) {
	c.mu.Lock()
	if c.closing {
		c.mu.Unlock()
		uc.Close()
		return
	}
	c.conns[uc] = struct{}{}
	c.wg.Add(1)
	c.mu.Unlock()
	go func() {
		defer c.untrack(uc)
		serve(uc)
	}()
}

// untrack closes a connection track started, once serve returned.
func (c *Collector) untrack(uc *net.UnixConn) {
	c.mu.Lock()
	delete(c.conns, uc)
	c.mu.Unlock()
	uc.Close()
	c.wg.Done()
}

// rights returns the descriptors passed in a control message.
func rights(oob []byte) []int {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil
	}
	var fds []int
	for _, m := range msgs {
		if f, err := unix.ParseUnixRights(&m); err == nil {
			fds = append(fds, f...)
		}
	}
	return fds
}

func closeAll(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

// serve reads one connection: the hello, then ring descriptors, then EOF.
func (c *Collector) serve(uc *net.UnixConn) {
	buf := make([]byte, helloMax+1)
	oob := make([]byte, unix.CmsgSpace(16*4))
	n, oobn, _, _, err := uc.ReadMsgUnix(buf, oob)
	closeAll(rights(oob[:oobn]))
	if err != nil {
		return
	}
	h, err := parseHello(buf[:n])
	if err != nil {
		return
	}
	cn := &conn{uc: uc, pid: h.pid}
	// Listed before the process learns it may go on (settle).
	c.mu.Lock()
	c.serving[cn] = struct{}{}
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.serving, cn)
		c.mu.Unlock()
	}()
	status := uint32(0)
	if h.flags&helloContinue == 0 {
		// before the process goes on: said before its own output
		h.private = privateAllocatorOf(h.pid)
	}
	if !c.enqueue(request{kind: reqHello, conn: cn, hello: h}) {
		status = 1
	}
	w := make([]byte, welcomeSize)
	le := binary.LittleEndian
	le.PutUint32(w, magic)
	le.PutUint32(w[4:], version)
	le.PutUint32(w[8:], msgWelcome)
	le.PutUint32(w[12:], status)
	if _, _, err := uc.WriteMsgUnix(w, unix.UnixRights(c.ctlFD), nil); err != nil || status != 0 {
		if status == 0 {
			c.enqueue(request{kind: reqEOF, conn: cn})
		}
		return
	}
	rc, err := uc.SyscallConn()
	if err != nil {
		c.enqueue(request{kind: reqEOF, conn: cn})
		return
	}
	for {
		n, oobn, err := cn.recv(rc, buf, oob)
		more := c.take(cn, buf[:n], rights(oob[:oobn]), err)
		cn.mu.Unlock()
		if !more {
			return
		}
	}
}

// recv reads the next message of cn into buf and oob, and returns with
// cn.mu held (the socket is non-blocking: the lock is not held while it
// waits for a message).
func (cn *conn) recv(rc syscall.RawConn, buf, oob []byte) (n, oobn int, err error) {
	locked := false
	rerr := rc.Read(func(fd uintptr) bool {
		cn.mu.Lock()
		for {
			n, oobn, _, _, err = unix.Recvmsg(int(fd), buf, oob, unix.MSG_CMSG_CLOEXEC)
			if !errors.Is(err, unix.EINTR) {
				break
			}
		}
		if errors.Is(err, unix.EAGAIN) {
			cn.mu.Unlock()
			return false
		}
		locked = true
		return true
	})
	if !locked {
		cn.mu.Lock()
	}
	if err == nil {
		err = rerr
	}
	if err != nil {
		n, oobn = 0, 0
	}
	return n, oobn, err
}

// unread is how many bytes of messages cn's socket holds that serve has
// not read; -1 if it cannot tell.
func (cn *conn) unread() int {
	rc, err := cn.uc.SyscallConn()
	if err != nil {
		return -1
	}
	n := -1
	rc.Control(func(fd uintptr) {
		if v, err := unix.IoctlGetInt(int(fd), unix.SIOCINQ); err == nil {
			n = v
		}
	})
	return n
}

// settle waits until the pump has in its queue every message that process
// pid sent before, at most d: a process stopped (for a leak check, or at
// its exit) sends nothing more, but a ring it announced may still be in
// its socket, or read and not yet queued, if serve ran late (the
// interposer writes into a new ring the pump has not merged after 2 s).
// A flush of the process then drains that ring too.
func (c *Collector) settle(pid uint32, d time.Duration) {
	c.mu.Lock()
	var cns []*conn
	for cn := range c.serving {
		if cn.pid == pid {
			cns = append(cns, cn)
		}
	}
	c.mu.Unlock()
	deadline := time.Now().Add(d)
	for _, cn := range cns {
		for {
			cn.mu.Lock()
			n := cn.unread()
			cn.mu.Unlock()
			if n <= 0 || time.Now().After(deadline) {
				break
			}
			time.Sleep(100 * time.Microsecond)
		}
	}
}

// take handles a message serve read (err its read's error), with cn.mu
// held; it returns whether more may come.
func (c *Collector) take(cn *conn, b []byte, fds []int, err error) bool {
	le := binary.LittleEndian
	if err != nil || len(b) == 0 {
		closeAll(fds)
		c.enqueue(request{kind: reqEOF, conn: cn})
		return false
	}
	if len(b) >= childrenSize && le.Uint32(b) == magic && le.Uint32(b[4:]) == version &&
		le.Uint32(b[8:]) == msgChildren {
		closeAll(fds)
		if pids := parseChildren(b); len(pids) > 0 {
			c.enqueue(request{kind: reqChildren, conn: cn, pids: pids})
		}
		return true
	}
	if len(b) >= noteSize && le.Uint32(b) == magic && le.Uint32(b[4:]) == version && le.Uint32(b[8:]) == msgNote {
		closeAll(fds)
		if n := uint64(le.Uint32(b[20:])); n <= notePathMax && noteSize+n == uint64(len(b)) {
			c.enqueue(request{kind: reqNote, conn: cn, code: le.Uint32(b[12:]), pid: le.Uint32(b[16:]), text: string(b[noteSize:])})
		}
		return true
	}
	if len(b) == ringMsgSize && le.Uint32(b) == magic && le.Uint32(b[4:]) == version &&
		le.Uint32(b[8:]) == msgTables && len(fds) == 1 && c.cfg.Unwind >= event.UnwindTables {
		c.startTables(fds[0])
		return true
	}
	if len(b) != ringMsgSize || le.Uint32(b) != magic || le.Uint32(b[4:]) != version ||
		le.Uint32(b[8:]) != msgRing || len(fds) != 1 {
		closeAll(fds)
		return true
	}
	if testHookRing != nil {
		testHookRing()
	}
	r, err := mapRing(fds[0], uint32(c.cfg.BufferSize))
	closeAll(fds)
	if err == nil {
		c.enqueue(request{kind: reqRing, conn: cn, ring: r})
	}
	return true
}

// testHookRing, if set by a test, runs as serve takes in a new ring,
// before the pump has it: a collector that runs late.
var testHookRing func()
