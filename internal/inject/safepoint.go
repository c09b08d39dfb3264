package inject

import (
	"debug/elf"
	"encoding/binary"
	"fmt"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/heapscope/heapscope/internal/proc"
	"github.com/heapscope/heapscope/internal/stopped"
	"github.com/heapscope/heapscope/unwind"
)

// The safe point. The thread that runs the injected calls runs them as a
// signal handler would run, in the middle of whatever it was doing: it
// must not be inside code that those calls enter again (the allocator,
// whose arena lock it may hold; the dynamic loader; dl_iterate_phdr's
// callbacks; fork; pthread_create; the interposer itself), at any depth of
// its stack. So every stopped thread's stack is walked, with the unwind
// tables built from each file's .eh_frame (package unwind), and each frame
// is judged by the function it is in: the C library's exported functions
// (and, with its debug file, malloc.c's whole code, as the census reads
// it), the loader's, an allocator library's, the interposer's.
//
// The other threads stay stopped while the calls run. One of them inside
// the allocator or the loader may hold a lock the calls need: the calling
// thread then waits on a futex, and stopped.Run lets the others go until
// the calls are done, so a lock held never deadlocks the injection. A
// point where no thread is inside the allocator or the loader is preferred
// (the calls then run with the whole program still); a program that
// allocates on every thread all the time rarely has one, and after a
// while any point where the calling thread is safe is taken.

// frame is one frame of a walked stack.
type frame struct {
	pc  uint64
	mod *module
}

// walked is a thread's stack as the walk found it.
type walked struct {
	frames []frame
	signal bool   // it passes through a signal handler's frame
	stuck  string // the walk stopped early inside the C library or the loader: why
}

// module is an executable mapping of a file and its unwind table.
type module struct {
	path     string
	lo, hi   uint64
	bias     uint64
	table    *unwind.Table
	kind     modKind
	libcFunc funcs // for the C library: its exported functions
}

type modKind uint8

const (
	modOther modKind = iota
	modLibc
	modLoader
	modAllocator  // jemalloc, tcmalloc, mimalloc
	modInterposer // heapscope's, from an earlier session or another build
)

// walker walks the stacks of one stopped process.
type walker struct {
	p     *stopped.Process
	pid   int
	maps  []proc.Mapping
	libc  *libcInfo
	ours  func(path string) bool
	mods  map[uint64]*module // by mapping start
	cache *unwind.Cache
}

var (
	tablesMu sync.Mutex
	tables   = map[string]*unwind.Table{} // by file identity: built once per heapscope process
	progsMu  sync.Mutex
	progsOf  = map[string][]elf.ProgHeader{}
)

func fileKey(m proc.Mapping) string {
	return m.Path + "\x00" + m.Dev + "\x00" + strconv.FormatUint(m.Inode, 10)
}

// module returns the module whose code holds pc, or nil.
func (w *walker) module(pc uint64) *module {
	i := sort.Search(len(w.maps), func(i int) bool { return w.maps[i].End > pc })
	if i >= len(w.maps) || w.maps[i].Start > pc || !w.maps[i].Exec() {
		return nil
	}
	m := w.maps[i]
	if md, ok := w.mods[m.Start]; ok {
		return md
	}
	md := &module{path: m.Path, lo: m.Start, hi: m.End}
	w.mods[m.Start] = md
	base := filepath.Base(m.Path)
	switch {
	case m.Path == w.libc.path:
		md.kind, md.libcFunc = modLibc, w.libc.all
	case strings.HasPrefix(base, "ld-linux") || strings.HasPrefix(base, "ld64.so"):
		md.kind = modLoader
	case strings.HasPrefix(base, "libjemalloc") || strings.HasPrefix(base, "libtcmalloc") || strings.HasPrefix(base, "libmimalloc"):
		md.kind = modAllocator
	case w.ours(m.Path) || strings.HasPrefix(base, "libheapscope_preload") || strings.HasPrefix(m.Path, "/memfd:heapscope-preload"):
		md.kind = modInterposer
	}
	if !m.File() {
		return md // the vDSO, JIT code: no table
	}
	file := proc.MappedFile(w.pid, m)
	key := fileKey(m)
	progsMu.Lock()
	progs, ok := progsOf[key]
	progsMu.Unlock()
	if !ok {
		if f, err := elf.Open(file); err == nil {
			for _, p := range f.Progs {
				progs = append(progs, p.ProgHeader)
			}
			f.Close()
		}
		progsMu.Lock()
		progsOf[key] = progs
		progsMu.Unlock()
	}
	var err error
	if md.bias, err = loadBias(progs, w.maps, m.Path); err != nil {
		return md
	}
	tablesMu.Lock()
	t, ok := tables[key]
	tablesMu.Unlock()
	if !ok {
		if w.cache != nil {
			t, _ = w.cache.Load(file)
		} else {
			t, _ = unwind.Build(file)
		}
		tablesMu.Lock()
		tables[key] = t
		tablesMu.Unlock()
	}
	md.table = t
	return md
}

// The code of glibc's __restore_rt, where a signal handler returns: mov
// $15, %rax; syscall.
var restoreRT = []byte{0x48, 0xc7, 0xc0, 0x0f, 0x00, 0x00, 0x00, 0x0f, 0x05}

const maxWalk = 256

// walk walks thread t's stack.
func (w *walker) walk(t stopped.Thread) walked {
	var out walked
	pc, rsp, rbp := t.Regs.Rip, t.Regs.Rsp, t.Regs.Rbp
	innermost := true
	word := func(at uint64) (uint64, bool) {
		var b [8]byte
		if _, err := w.p.ReadAt(b[:], int64(at)); err != nil {
			return 0, false
		}
		return binary.LittleEndian.Uint64(b[:]), true
	}
	for len(out.frames) < maxWalk {
		md := w.module(pc)
		out.frames = append(out.frames, frame{pc, md})
		if md == nil {
			return out // outside every file: JIT code, or the end
		}
		var code [9]byte
		if _, err := w.p.ReadAt(code[:], int64(pc)); err == nil && string(code[:]) == string(restoreRT) {
			// a signal handler returns here; the interrupted context
			// is in the ucontext at rsp (its gregs from byte 40)
			out.signal = true
			var g [23 * 8]byte
			if _, err := w.p.ReadAt(g[:], int64(rsp+40)); err != nil {
				out.stuck = "an unreadable signal frame"
				return out
			}
			rbp = binary.LittleEndian.Uint64(g[10*8:])
			rsp = binary.LittleEndian.Uint64(g[15*8:])
			pc = binary.LittleEndian.Uint64(g[16*8:])
			innermost = true
			continue
		}
		look := pc - md.bias
		if !innermost {
			look-- // the call, not what follows it
		}
		innermost = false
		var e unwind.Entry
		ok := false
		if md.table != nil {
			e, ok = md.table.Lookup(look)
		}
		if !ok || e.Kind == unwind.KindFallback {
			if md.kind == modLibc || md.kind == modLoader {
				out.stuck = fmt.Sprintf("no unwind rule at %#x in %s", pc, filepath.Base(md.path))
			}
			return out
		}
		var cfa uint64
		switch e.Kind {
		case unwind.KindEnd:
			return out
		case unwind.KindRSP:
			cfa = rsp + uint64(e.CFAOffset)
		case unwind.KindRBP:
			cfa = rbp + uint64(e.CFAOffset)
		case unwind.KindPLT:
			cfa = rsp + uint64(e.CFAOffset)
			if pc&15 >= uint64(e.Aux) {
				cfa += 8
			}
		default:
			return out
		}
		if cfa <= rsp || cfa&7 != 0 {
			return out
		}
		if off := e.RBPOffset(); off != 0 && e.Kind != unwind.KindPLT {
			v, ok := word(uint64(int64(cfa) + int64(off)))
			if !ok {
				return out
			}
			rbp = v
		}
		ra, ok := word(cfa - 8)
		if !ok || ra < 4096 {
			return out
		}
		pc, rsp = ra, cfa
	}
	return out
}

// verdict is what the walk says of a thread.
type verdict struct {
	tid    int
	busy   string // inside the allocator or the loader (or the interposer): why
	unsafe string // why it cannot run the calls ("" if it can)
	idle   bool   // stopped in a system call
	// inInterposer: its busy frame is the interposer's
	inInterposer bool
}

func (w *walker) judge(t stopped.Thread, watcher int) verdict {
	v := verdict{tid: t.TID, idle: int64(t.Regs.Orig_rax) >= 0}
	if t.TID == watcher {
		v.unsafe = "it is the interposer's watcher thread"
		return v
	}
	wk := w.walk(t)
	for _, f := range wk.frames {
		if f.mod == nil {
			continue
		}
		switch f.mod.kind {
		case modLoader:
			v.busy = fmt.Sprintf("in the dynamic loader (%#x in %s)", f.pc, filepath.Base(f.mod.path))
		case modAllocator:
			v.busy = fmt.Sprintf("in the allocator (%#x in %s)", f.pc, filepath.Base(f.mod.path))
		case modInterposer:
			v.busy = fmt.Sprintf("in heapscope's interposer (%#x)", f.pc)
			v.inInterposer = true
		case modLibc:
			for _, s := range w.libc.unsafe {
				if f.pc >= s.lo && f.pc < s.hi {
					v.busy = fmt.Sprintf("in %s (%#x)", s.name, f.pc)
					break
				}
			}
		}
		if v.busy != "" {
			break
		}
	}
	switch {
	case v.busy != "":
		v.unsafe = v.busy
	case wk.signal:
		v.unsafe = "in a signal handler"
	case wk.stuck != "":
		v.unsafe = "its stack cannot be walked (" + wk.stuck + ")"
	case t.Signal != 0:
		v.unsafe = "a signal is pending for it"
	case !w.stackRoom(t):
		v.unsafe = "too little stack left"
	}
	return v
}

// stackNeed is the stack the calls may use below the thread's: dlopen's,
// the interposer's start, and the extended state.
const stackNeed = 256 << 10

// stackRoom reports whether thread t has stackNeed bytes of stack left.
func (w *walker) stackRoom(t stopped.Thread) bool {
	sp := t.Regs.Rsp
	i := sort.Search(len(w.maps), func(i int) bool { return w.maps[i].End > sp })
	if i >= len(w.maps) || w.maps[i].Start > sp {
		return false
	}
	m := w.maps[i]
	if m.Path == "[stack]" {
		return sp-m.Start >= stackNeed || stackLimit(w.pid) > m.End-sp+stackNeed
	}
	return sp-m.Start >= stackNeed
}

// stackLimit is the main thread's stack limit (RLIMIT_STACK's soft limit).
func stackLimit(pid int) uint64 {
	var rl unix.Rlimit
	if unix.Prlimit(pid, unix.RLIMIT_STACK, nil, &rl) != nil {
		return 8 << 20
	}
	return rl.Cur
}

// choose picks the thread to run the calls on: every thread is judged.
// strict wants none inside the allocator or the loader; eject wants none
// inside the interposer (its rings are about to go). It returns the thread
// and whether no thread was inside the allocator or the loader, or why no
// thread will do.
func (w *walker) choose(ts []stopped.Thread, watcher int, strict, eject bool) (th stopped.Thread, quiet bool, why string) {
	var best *stopped.Thread
	bestIdle := false
	var whys []string
	quiet = true
	for i := range ts {
		v := w.judge(ts[i], watcher)
		if v.tid == watcher {
			continue
		}
		if v.busy != "" {
			quiet = false
			if strict || eject && v.inInterposer {
				return stopped.Thread{}, false, fmt.Sprintf("thread %d is %s", v.tid, v.busy)
			}
		}
		if v.unsafe != "" {
			whys = append(whys, fmt.Sprintf("thread %d is %s", v.tid, v.unsafe))
			continue
		}
		if best == nil || v.idle && !bestIdle {
			best, bestIdle = &ts[i], v.idle
		}
	}
	if best == nil {
		if len(whys) == 0 {
			whys = append(whys, "no thread")
		}
		return stopped.Thread{}, false, strings.Join(whys, "; ")
	}
	return *best, quiet, ""
}

func newWalker(p *stopped.Process, libc *libcInfo, ours func(string) bool) *walker {
	w := &walker{p: p, pid: p.PID(), maps: p.Maps(), libc: libc, ours: ours, mods: map[uint64]*module{}}
	w.cache, _ = unwind.OpenCache("") // without it, tables are built in memory
	return w
}
