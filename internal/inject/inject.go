// Package inject loads heapscope's interposer into a process that is
// already running and starts or stops its tracing there
// (heapscope attach --inject), without a debugger.
//
// Inject stops every thread of the process (internal/stopped), waits for a
// safe point (see safepoint.go), and makes one stopped thread call the C
// library's dlopen on the interposer (see libfile.go for where it is
// found), then the interposer's heapscope_inject_open (a socketpair: the
// collector's end is taken with pidfd_getfd and handed to Options.Serve)
// and heapscope_inject_start, which says hello to the collector, points
// the GOT entries of the allocation functions in every module at its
// wrappers and starts its watcher thread (see the interposer's
// csrc/got.inc and csrc/inject.inc). The calls run through a trampoline
// (csrc/tramp.S) that gives the thread back its registers, extended state,
// signal mask and errno by itself, so that a heapscope killed at any point
// leaves the thread running on as it was. Eject, at the session's end,
// calls heapscope_inject_stop the same way: the entries go back, the
// rings are unmapped, and the process runs untraced, its allocations
// intact; the library stays loaded, idle, for the next session.
//
// Nothing is injected where it could harm the process: a statically linked
// one (nothing to load into), one whose C library is not glibc, one under
// a seccomp filter (a system call of the interposer's could kill it), one
// stopped by job control or traced by another tracer, one whose interposer
// is another build's or was preloaded by heapscope run. Each is a clear
// error, and the process is left running.
package inject

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/heapscope/heapscope/internal/errs"
	"github.com/heapscope/heapscope/internal/preload"
	"github.com/heapscope/heapscope/internal/proc"
	"github.com/heapscope/heapscope/internal/stopped"
)

// Defaults of Options.
const (
	// DefaultTimeout bounds the wait for a safe point.
	DefaultTimeout = 5 * time.Second
	// DefaultCallTimeout bounds each call made in the process.
	DefaultCallTimeout = 10 * time.Second
)

// Options of Inject and Eject.
type Options struct {
	// Serve is given the collector's end of the process's connection,
	// before the interposer says hello on the other. Inject needs it.
	Serve func(conn *os.File) error
	// Timeout bounds the wait for a safe point; DefaultTimeout when 0.
	Timeout time.Duration
	// CallTimeout bounds each call in the process; DefaultCallTimeout
	// when 0.
	CallTimeout time.Duration
	// Strict waits, up to Timeout, for a point where no thread at all is
	// inside the allocator or the loader; by default one where only the
	// calling thread is known not to be is taken after 100 ms (or a
	// quarter of Timeout, if less).
	Strict bool
	// Memfd loads the library through a memfd of the process's even
	// where it could open heapscope's file (tests).
	Memfd bool
}

// Result says what an Inject or Eject did.
type Result struct {
	PID int
	// Entries are the GOT entries redirected (Inject) or put back (Eject).
	Entries int
	// Modules are the modules whose entries were looked at.
	Modules int
	// Loaded says the library was loaded now (not by an earlier session).
	Loaded bool
	// Library is the path the process loaded it by.
	Library string
	// Tries are the stops it took to find a safe point.
	Tries int
	// Strict says no thread was inside the allocator or the loader at
	// that point; otherwise only the calling thread was known not to be.
	Strict bool
	// Released says the other threads ran again before the calls were
	// done (the calling thread waited for a lock one of them held).
	Released bool
	// Paused is how long the process was stopped in the stops that made
	// calls.
	Paused time.Duration
	// RingsKept says Eject found no point where every thread was outside
	// the interposer: its entries went back, its rings stay mapped.
	RingsKept bool
	// Took is the time from the call to the end.
	Took time.Duration
}

// debugf, set by tests, says where the time goes.
var debugf = func(string, ...any) {}

// testPoint, set by tests, is called at the points an injection passes:
// "stopped", "cave", "callN.K" (the K-th system call of the N-th call made
// in the process), "served", "started". The tests kill heapscope there.
var testPoint = func(string) {}

// target is what Inject and Eject learn of a process before stopping it.
type target struct {
	pid  int
	maps []proc.Mapping
	libc *libcInfo
	lib  *preload.Injectable
	// base is the load bias of our interposer in the process, 0 when it is
	// not loaded; path the path it is mapped from.
	base uint64
	path string
}

// inspect checks what can be checked while the process runs.
func inspect(pid int) (*target, error) {
	if pid <= 0 {
		return nil, fmt.Errorf("pid %d: %w", pid, errs.ErrNoSuchProcess)
	}
	if pid == os.Getpid() {
		return nil, fmt.Errorf("pid %d is heapscope itself: %w", pid, errs.ErrInvalidFlags)
	}
	st, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		if _, err := proc.ReadStat(pid); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("pid %d: %w", pid, errs.ErrNoSuchProcess)
	}
	owner := -1
	for _, line := range strings.Split(string(st), "\n") {
		k, v, _ := strings.Cut(line, ":")
		v = strings.TrimSpace(v)
		switch k {
		case "Uid":
			if f := strings.Fields(v); len(f) > 1 {
				owner, _ = strconv.Atoi(f[1]) // the effective ID
			}
		case "State":
			if strings.HasPrefix(v, "T") || strings.HasPrefix(v, "t") {
				return nil, fmt.Errorf("pid %d is stopped (%s): injecting into it would run it; continue it first (kill -CONT): %w", pid, v, errs.ErrCannotStop)
			}
			if strings.HasPrefix(v, "Z") || strings.HasPrefix(v, "X") {
				return nil, fmt.Errorf("pid %d has exited: %w", pid, errs.ErrNoSuchProcess)
			}
		case "Seccomp":
			if v != "0" {
				return nil, fmt.Errorf("pid %d runs under a seccomp filter (mode %s): a system call of the interposer's could kill it; attach without --inject (eBPF): %w", pid, v, errs.ErrUnavailable)
			}
		case "TracerPid":
			if v != "0" {
				who := ""
				if c, err := os.ReadFile("/proc/" + v + "/comm"); err == nil {
					who = " (" + strings.TrimSpace(string(c)) + ")"
				}
				return nil, fmt.Errorf("pid %d is already traced by pid %s%s: %w", pid, v, who, errs.ErrCannotStop)
			}
		}
	}
	t := &target{pid: pid}
	if t.maps, err = proc.ReadMaps(pid); err != nil {
		if errors.Is(err, errs.ErrAccessDenied) {
			return nil, accessDenied(pid, owner)
		}
		return nil, err
	}
	if t.libc, err = findLibc(pid, t.maps); err != nil {
		return nil, err
	}
	if t.lib, err = preload.InjectLibrary(); err != nil {
		return nil, fmt.Errorf("%v: %w", err, errs.ErrUnavailable)
	}
	return t, nil
}

// accessDenied is the error of a process heapscope may not trace: what
// stands in the way, as far as can be seen from outside.
func accessDenied(pid, owner int) error {
	why := "not permitted to trace it"
	if owner >= 0 && owner != os.Geteuid() {
		why += fmt.Sprintf(" (it runs as uid %d, heapscope as uid %d)", owner, os.Geteuid())
	}
	if b, err := os.ReadFile("/proc/sys/kernel/yama/ptrace_scope"); err == nil {
		if s := strings.TrimSpace(string(b)); s != "0" {
			why += "; kernel.yama.ptrace_scope is " + s
		}
	}
	return fmt.Errorf("pid %d: %s: run heapscope as its owner or as root: %w", pid, why, errs.ErrAccessDenied)
}

// isInterposer reports whether a mapping's path names heapscope's
// interposer, of any build.
func isInterposer(path string) bool {
	return strings.HasPrefix(filepath.Base(path), "libheapscope_preload") || strings.HasPrefix(path, "/memfd:heapscope-preload")
}

// findOurs looks, in the stopped process, for a copy of the interposer of
// this build: it sets t.base and t.path. A copy of another build, or one
// heapscope run preloaded, is an error.
func (t *target) findOurs(p *stopped.Process) error {
	t.maps = p.Maps()
	t.base, t.path = 0, ""
	for _, m := range t.maps {
		if !isInterposer(m.Path) || m.Offset != 0 {
			continue
		}
		// the first segment is at file address 0: the bias is its start
		id := make([]byte, len(t.lib.BuildID))
		if _, err := p.ReadAt(id, int64(m.Start+t.lib.BuildIDAt)); err != nil || string(id) != string(t.lib.BuildID) {
			return fmt.Errorf("pid %d maps another build of heapscope's interposer (%s): it was started by another heapscope's run or attach; restart it to attach with this one: %w", t.pid, m.Path, errs.ErrUnavailable)
		}
		if t.base != 0 && t.base != m.Start {
			return fmt.Errorf("pid %d maps heapscope's interposer twice (%s and %s): started by heapscope run?: %w", t.pid, t.path, m.Path, errs.ErrUnavailable)
		}
		t.base, t.path = m.Start, m.Path
	}
	return nil
}

// state reads the interposer's state word at off.
func (t *target) state(p *stopped.Process, off int) (uint32, error) {
	var b [4]byte
	if _, err := p.ReadAt(b[:], int64(t.base+t.lib.State+uint64(off))); err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint32(b[:]), nil
}

// stopAtSafePoint stops the process until a thread can make the calls; it
// returns the stopped process (which the caller resumes) and the thread.
func (t *target) stopAtSafePoint(opt Options, res *Result, eject, release bool) (*stopped.Process, stopped.Thread, error) {
	timeout := opt.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	start := time.Now()
	deadline := start.Add(timeout)
	strictUntil := start.Add(min(timeout/4, 100*time.Millisecond))
	if opt.Strict {
		strictUntil = deadline
	}
	nap := 200 * time.Microsecond
	var why string
	for {
		res.Tries++
		t0 := time.Now()
		p, err := stopped.Stop(t.pid, stopped.Options{Timeout: min(time.Until(deadline)+time.Second, 2*time.Second), MaxPause: timeout + 4*DefaultCallTimeout})
		if err != nil {
			return nil, stopped.Thread{}, err
		}
		fail := func(err error) (*stopped.Process, stopped.Thread, error) {
			p.Resume()
			return nil, stopped.Thread{}, err
		}
		if err := t.findOurs(p); err != nil {
			return fail(err)
		}
		if eject && t.base == 0 {
			return p, stopped.Thread{}, nil // nothing to do: the caller resumes
		}
		watcher := 0
		if t.base != 0 {
			if w, err := t.state(p, preload.InjectStateWatcher); err == nil {
				watcher = int(int32(w))
			}
		}
		cave, err := findCave(t.libc, t.maps)
		if err != nil {
			return fail(err)
		}
		w := newWalker(p, t.libc, func(path string) bool { return t.path != "" && path == t.path })
		ts := p.Threads()
		t1 := time.Now()
		strict := time.Now().Before(strictUntil)
		if inCave(ts, cave) {
			why = "a thread is in the trampoline of an earlier injection"
		} else {
			th, quiet, w := w.choose(ts, watcher, strict, release)
			debugf("try %d: stop %v, judge %v: %q", res.Tries, t1.Sub(t0), time.Since(t1), w)
			if why = w; why == "" {
				res.Strict = quiet
				return p, th, nil
			}
		}
		p.Resume()
		if time.Now().After(deadline) {
			return nil, stopped.Thread{}, fmt.Errorf("pid %d reached no safe point in %v (%d tries; last: %s): %w", t.pid, timeout, res.Tries, why, errs.ErrCannotStop)
		}
		time.Sleep(nap)
		nap = min(2*nap, 20*time.Millisecond)
	}
}

// inCave reports whether a thread runs in the trampoline's page padding.
func inCave(ts []stopped.Thread, cave uint64) bool {
	for _, t := range ts {
		if t.Regs.Rip >= cave && t.Regs.Rip < cave+uint64(len(trampCode)) {
			return true
		}
	}
	return false
}

// Inject loads the interposer into process pid, if it is not loaded yet,
// and starts a session of the collector Options.Serve serves there. On
// error the process runs on as it was (a session that could not start
// leaves its entries as they were).
func Inject(pid int, opt Options) (*Result, error) {
	if opt.Serve == nil {
		return nil, fmt.Errorf("inject: no Serve: %w", errs.ErrInvalidFlags)
	}
	begin := time.Now()
	res := &Result{PID: pid}
	t, err := inspect(pid)
	if err != nil {
		return nil, err
	}
	// the file is written before the process stops, to keep the pause short
	var file string
	if !opt.Memfd {
		if f, err := libraryFile(t.lib.Image); err == nil && reachable(pid, f) {
			file = f
		}
	}
	pidfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return nil, fmt.Errorf("pid %d: pidfd_open: %w", pid, errs.ErrNoSuchProcess)
	}
	defer unix.Close(pidfd)
	p, th, err := t.stopAtSafePoint(opt, res, false, false)
	if err != nil {
		return nil, err
	}
	defer func() {
		res.Released = p.Released()
		p.Resume()
		res.Paused = p.Paused()
		res.Took = time.Since(begin)
	}()
	ct := opt.CallTimeout
	if ct <= 0 {
		ct = DefaultCallTimeout
	}
	cave, err := findCave(t.libc, t.maps)
	if err != nil {
		return nil, err
	}
	testPoint("stopped")
	c, err := newCaller(p, th, t.libc, cave, ct)
	if err != nil {
		return nil, err
	}
	testPoint("cave")
	if t.base == 0 {
		if err := t.load(c, file, pidfd); err != nil {
			return nil, err
		}
		res.Loaded = true
		if err := p.RefreshMaps(); err != nil {
			return nil, err
		}
		if err := t.findOurs(p); err != nil {
			return nil, err
		}
		if t.base == 0 {
			return nil, fmt.Errorf("pid %d: the interposer was loaded but is not mapped: %w", pid, errs.ErrUnavailable)
		}
	}
	res.Library = t.path
	// the connection
	r, _, err := c.call(t.base + t.lib.Open)
	if err != nil {
		return nil, err
	}
	peer := int64(int32(uint32(r)))
	if peer < 0 {
		return nil, fmt.Errorf("pid %d: %w", pid, preload.InjectError(peer, 0))
	}
	conn, err := unix.PidfdGetfd(pidfd, int(peer), 0)
	if err != nil {
		return nil, fmt.Errorf("pid %d: taking the interposer's socket (pidfd_getfd): %v: %w", pid, err, errs.ErrAccessDenied)
	}
	f := os.NewFile(uintptr(conn), "heapscope-inject")
	if err := opt.Serve(f); err != nil {
		return nil, err
	}
	testPoint("served")
	args := make([]byte, preload.InjectArgsSize)
	binary.LittleEndian.PutUint32(args[preload.InjectArgMagic:], preload.InjectMagic)
	binary.LittleEndian.PutUint32(args[preload.InjectArgVersion:], preload.InjectVersion)
	binary.LittleEndian.PutUint32(args[preload.InjectArgPeer:], uint32(peer))
	at, err := c.put(0, args)
	if err != nil {
		return nil, err
	}
	r, _, err = c.call(t.base+t.lib.Start, at)
	if err != nil {
		return nil, err
	}
	out, err := c.read(at, preload.InjectArgsSize)
	if err != nil {
		return nil, err
	}
	if code := int64(int32(uint32(r))); code != 0 {
		return nil, fmt.Errorf("pid %d: %w", pid, preload.InjectError(code, int32(binary.LittleEndian.Uint32(out[preload.InjectArgErrno:]))))
	}
	res.Entries = int(binary.LittleEndian.Uint32(out[preload.InjectArgEntries:]))
	res.Modules = int(binary.LittleEndian.Uint32(out[preload.InjectArgModules:]))
	testPoint("started")
	return res, nil
}

// RTLD_NOW | RTLD_LOCAL
const dlopenFlags = 0x2

// load makes the process dlopen the interposer: by path when file is one
// it reaches, else through a memfd of its own.
func (t *target) load(c *caller, file string, pidfd int) error {
	if file != "" {
		err := t.dlopen(c, file)
		if err == nil {
			return nil
		}
		// a folder it may not search, a file it may not read: the memfd
		// needs neither
		if !errors.Is(err, errNotOpened) {
			return err
		}
	}
	return t.loadMemfd(c)
}

var errNotOpened = errors.New("the process could not open the library")

func (t *target) dlopen(c *caller, path string) error {
	at, err := c.put(256, append([]byte(path), 0))
	if err != nil {
		return err
	}
	h, _, err := c.call(t.libc.fn["dlopen"], at, dlopenFlags)
	if err != nil {
		return err
	}
	if h != 0 {
		return nil
	}
	msg := ""
	if e, _, err := c.call(t.libc.fn["dlerror"]); err == nil {
		c.p.RefreshMaps() // the message may be in memory mapped since the stop
		msg = c.cstring(e, 1024)
	}
	if strings.Contains(msg, "No such file") || strings.Contains(msg, "ermission denied") ||
		strings.Contains(msg, "failed to map segment") || strings.Contains(msg, "Operation not permitted") {
		return fmt.Errorf("pid %d: dlopen(%s): %s: %w", t.pid, path, msg, errNotOpened)
	}
	return fmt.Errorf("pid %d: dlopen(%s) failed: %s: %w", t.pid, path, msg, errs.ErrUnavailable)
}

// The flags of memfd_create.
const (
	mfdCloexec      = 0x1
	mfdAllowSealing = 0x2
	mfdExec         = 0x10 // Linux 6.3: executable whatever vm.memfd_noexec's default
)

func (t *target) loadMemfd(c *caller) error {
	mc := t.libc.fn["memfd_create"]
	closeFn := t.libc.fn["close"]
	if mc == 0 || closeFn == 0 {
		return fmt.Errorf("pid %d cannot open heapscope's library file, and its C library has no memfd_create: %w", t.pid, errs.ErrUnavailable)
	}
	name, err := c.put(256, []byte("heapscope-preload\x00"))
	if err != nil {
		return err
	}
	r, errno, err := c.call(mc, name, mfdCloexec|mfdAllowSealing|mfdExec)
	if err == nil && int64(int32(uint32(r))) < 0 && unix.Errno(errno) == unix.EINVAL {
		r, errno, err = c.call(mc, name, mfdCloexec|mfdAllowSealing) // before Linux 6.3
	}
	if err != nil {
		return err
	}
	fd := int(int32(uint32(r)))
	if fd < 0 {
		return fmt.Errorf("pid %d: memfd_create: %v: %w", t.pid, unix.Errno(errno), errs.ErrUnavailable)
	}
	defer c.call(closeFn, uint64(fd))
	if err := fillMemfd(t.pid, fd, t.lib.Image); err != nil {
		return err
	}
	return t.dlopen(c, "/proc/self/fd/"+strconv.Itoa(fd))
}

// fillMemfd writes img into the memfd fd of process pid and seals it, so
// that nothing changes the code the process maps.
func fillMemfd(pid, fd int, img []byte) error {
	f, err := os.OpenFile("/proc/"+strconv.Itoa(pid)+"/fd/"+strconv.Itoa(fd), os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("pid %d: opening its memfd: %w", pid, err)
	}
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil || st.Size != 0 || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return fmt.Errorf("pid %d: descriptor %d is not the new memfd", pid, fd)
	}
	if _, err := f.Write(img); err != nil {
		return fmt.Errorf("pid %d: writing its memfd: %w", pid, err)
	}
	if _, err := unix.FcntlInt(f.Fd(), unix.F_ADD_SEALS, unix.F_SEAL_WRITE|unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_SEAL); err != nil {
		return fmt.Errorf("pid %d: sealing its memfd: %w", pid, err)
	}
	return nil
}

// Eject ends the session of process pid, in two steps: the GOT entries
// go back (a point where the calling thread is safe will do: a thread
// inside a wrapper finishes its call, untraced), then, with every thread
// stopped outside the interposer, its rings are unmapped. The process runs
// on untraced. A process without the interposer has nothing to end; one
// whose threads never all leave the interposer within Options.Timeout
// keeps its rings (Result.RingsKept), idle.
func Eject(pid int, opt Options) (*Result, error) {
	begin := time.Now()
	res := &Result{PID: pid}
	defer func() { res.Took = time.Since(begin) }()
	t, err := inspect(pid)
	if err != nil {
		return nil, err
	}
	out, err := t.stopCall(opt, res, false, preload.InjectStopRestore)
	if err != nil || out == nil {
		return res, err
	}
	res.Entries = int(binary.LittleEndian.Uint32(out[preload.InjectArgEntries:]))
	if _, err := t.stopCall(opt, res, true, preload.InjectStopRelease); err != nil {
		if !errors.Is(err, errs.ErrCannotStop) {
			return res, err
		}
		res.RingsKept = true
	}
	return res, nil
}

// stopCall stops the process at a safe point (with no thread inside the
// interposer if release) and calls the interposer's Stop with flags; it
// returns the arguments as Stop left them, nil when the interposer is not
// there.
func (t *target) stopCall(opt Options, res *Result, release bool, flags uint32) ([]byte, error) {
	p, th, err := t.stopAtSafePoint(opt, res, true, release)
	if err != nil {
		return nil, err
	}
	defer func() {
		res.Released = res.Released || p.Released()
		p.Resume()
		res.Paused += p.Paused()
	}()
	if t.base == 0 {
		return nil, nil
	}
	res.Library = t.path
	ct := opt.CallTimeout
	if ct <= 0 {
		ct = DefaultCallTimeout
	}
	cave, err := findCave(t.libc, t.maps)
	if err != nil {
		return nil, err
	}
	c, err := newCaller(p, th, t.libc, cave, ct)
	if err != nil {
		return nil, err
	}
	args := make([]byte, preload.InjectArgsSize)
	binary.LittleEndian.PutUint32(args[preload.InjectArgMagic:], preload.InjectMagic)
	binary.LittleEndian.PutUint32(args[preload.InjectArgVersion:], preload.InjectVersion)
	binary.LittleEndian.PutUint32(args[preload.InjectArgFlags:], flags)
	at, err := c.put(0, args)
	if err != nil {
		return nil, err
	}
	r, _, err := c.call(t.base+t.lib.Stop, at)
	if err != nil {
		return nil, err
	}
	if code := int64(int32(uint32(r))); code != 0 {
		return nil, fmt.Errorf("pid %d: %w", t.pid, preload.InjectError(code, 0))
	}
	return c.read(at, preload.InjectArgsSize)
}
