package ebpf

import (
	"bufio"
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/heapscope/heapscope/internal/proc"
	"github.com/heapscope/heapscope/unwind"
)

// Unwinding with tables (Config.UnwindTables). Each executable file a
// traced process maps gets its table built once (package unwind, from its
// .eh_frame and .debug_frame), and copied into chunks of entries shared by
// every process that maps the file (keyed by device and inode, as the
// kernel keys uprobes); each process gets the list of its executable
// mappings, with the runs of entries that hold the file's table and the
// mapping's bias. The BPF walk unwinds with them, by frame pointer where a
// file has no table or a table no rule.
//
// The chunks are made as tables need room, up to Config.UnwindEntries in
// all, and a file's table is freed when no traced process maps the file
// any more (an empty chunk goes back to the kernel). A table may be split
// over runs in several chunks, so that freed room is used again. The
// processes of one user may hold at most half of the room (a file is
// counted for each user whose processes map it): another user's processes
// cannot take it all. A file whose table finds no room unwinds by frame
// pointer, the tracer warns naming the flag that gives more, and the
// stacks cut there are counted (Stats.StacksCutNoTable); it gets its table
// when room is freed and its process's loader next changes its list (or
// another process maps it).

// Sizes of the BPF side's tables (bpf/heapscope.h).
const (
	uwMaxRanges    = 256
	uwChunkEntries = 1 << 18
	uwMaxChunks    = 512
	// DefaultUnwindEntries is the room, in 8-byte entries, for the tables
	// of all files when Config.UnwindEntries is 0: 64 MiB of kernel memory
	// at most, taken 2 MiB at a time as tables need it (python3.11 and libc
	// take 0.75 MiB, clang++ with libLLVM and libclang-cpp 16 MiB).
	DefaultUnwindEntries = 8 << 20
	// MaxUnwindEntries bounds Config.UnwindEntries (1 GiB).
	MaxUnwindEntries = uwMaxChunks * uwChunkEntries
)

// uwFile is a file's table, as loaded into the chunks.
type uwFile struct {
	key         string // device:inode
	path        string
	runs        []uwRun
	n           int // its entries
	base        uint64
	segs        []elf.ProgHeader // executable PT_LOADs, for the bias
	tb          *unwind.Table    // built but not loaded: no room yet
	err         error            // why it has no table (it unwinds by frame pointer)
	warned      bool
	users       map[uint32]int // traced processes mapping it, by user
	buildTime   time.Duration
	bytes       int
	fallbackPct float64
}

// uwRun is a run of a file's table in a chunk: its entries first to
// first+count-1, the last one the end marker or the next run's first. It
// covers the table's addresses [lo, hi).
type uwRun struct {
	chunk, first, count uint32
	lo, hi              uint64
}

// uwChunk is one array of entries, mapped into this process.
type uwChunk struct {
	m    *ebpf.Map
	mem  []byte
	free []extent // sorted by first, merged
}

type extent struct{ first, n uint32 }

// uwProc is what a traced process uses.
type uwProc struct {
	uid   uint32
	files map[string]*uwFile // by key
	paths map[string]bool
}

// uwState is the tracer's unwinding state.
type uwState struct {
	mu        sync.Mutex
	outer     *ebpf.Map // uw_chunks
	chunkSpec *ebpf.MapSpec
	chunks    []*uwChunk // by index in outer; nil where none
	budget    int        // entries
	used      int        // entries held by runs
	closed    bool
	files     map[string]*uwFile
	procs     *ebpf.Map
	dlHold    *ebpf.Map // processes stopped when their loader adds objects
	loaded    map[uint32]*uwProc
	gen       uint32 // the last generation of ranges given
	// seen is every file a table was made for, or tried, by key: what
	// UnwindTables reports, after the table is freed too.
	seen map[string]*uwFile
}

func newUWState(outer *ebpf.Map, chunkSpec *ebpf.MapSpec, procs, dlHold *ebpf.Map, budget int) *uwState {
	return &uwState{
		outer: outer, chunkSpec: chunkSpec, budget: budget, chunks: make([]*uwChunk, uwMaxChunks),
		files: map[string]*uwFile{}, procs: procs, dlHold: dlHold, loaded: map[uint32]*uwProc{}, seen: map[string]*uwFile{},
	}
}

// holdAtLoader makes the BPF side stop pid when its dynamic loader has
// added objects to its list (at start-up, at dlopen), until their tables
// are loaded (Tracer.loadLibraries). Called with pid's ranges loaded.
func (u *uwState) holdAtLoader(pid uint32) error {
	if err := u.dlHold.Put(pid, uint32(0)); err != nil {
		return fmt.Errorf("ebpf: pid %d: holding it at its loader: %w", pid, err)
	}
	return nil
}

// close frees the chunks; a load after it fails.
func (u *uwState) close() {
	if u == nil {
		return
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	u.closed = true
	for i, c := range u.chunks {
		if c != nil {
			unix.Munmap(c.mem)
			c.m.Close()
			u.chunks[i] = nil
		}
	}
}

var errUWClosed = errors.New("ebpf: unwind tables closed")

// errNoRoom is why a table was not loaded for want of room.
var errNoRoom = errors.New("no room in the unwind tables")

// fileFor returns the file mapped as m in pid, building its table the
// first time the file is seen. Called with mu held.
func (u *uwState) fileFor(pid uint32, m proc.Mapping) *uwFile {
	key := fmt.Sprintf("%s:%d", m.Dev, m.Inode)
	if f := u.files[key]; f != nil {
		return f
	}
	f := &uwFile{key: key, path: m.Path, users: map[uint32]int{}}
	u.files[key] = f
	defer func() {
		// A file seen again (its table was freed once no process
		// mapped it) keeps a good record over a failure of this load,
		// which is of the process (gone, its /proc entries with it),
		// not of the file.
		if old := u.seen[key]; old == nil || old.err != nil || f.err == nil {
			u.seen[key] = f
		}
	}()
	fd, err := proc.OpenMapped(int(pid), m)
	if err != nil {
		f.err = err
		return f
	}
	defer fd.Close()
	ef, err := elf.NewFile(fd)
	if err != nil {
		f.err = err
		return f
	}
	defer ef.Close()
	for _, p := range ef.Progs {
		if p.Type == elf.PT_LOAD && p.Flags&elf.PF_X != 0 {
			f.segs = append(f.segs, p.ProgHeader)
		}
	}
	tb, err := unwind.BuildELF(ef)
	if err != nil {
		f.err = err
		return f
	}
	f.buildTime, f.bytes = tb.Stats.BuildTime, tb.Size()
	if len(tb.Entries) > 0 {
		f.fallbackPct = 100 * float64(tb.Stats.Fallbacks) / float64(len(tb.Entries))
	}
	f.n, f.base = len(tb.Entries), tb.Base
	if f.n >= 2 {
		f.tb = tb
	}
	return f
}

// share is the most room the processes of one user may hold.
func (u *uwState) share() int { return u.budget / 2 }

// charge returns the entries of the tables loaded for files that uid's
// processes map. Called with mu held.
func (u *uwState) charge(uid uint32) int {
	n := 0
	for _, f := range u.files {
		if f.runs != nil && f.users[uid] > 0 {
			n += f.n
		}
	}
	return n
}

// place loads f's built table into the chunks, for uid, if there is room
// in all and in uid's share. Called with mu held.
func (u *uwState) place(f *uwFile, uid uint32) {
	if f.tb == nil || f.runs != nil {
		return
	}
	n := f.n
	need := n + n/(uwChunkEntries-1) + 1 // runs repeat one entry each
	if c := u.charge(uid); c+n > u.share() {
		f.err = fmt.Errorf("%w: its %d entries (%s) would take this user's processes to %s, over their share of %s (half the room): raise --unwind-tables-size",
			errNoRoom, n, mib(n), mib(c+n), mib(u.share()))
		return
	}
	if u.used+need > u.budget {
		f.err = fmt.Errorf("%w: its %d entries (%s) do not fit, %s of %s used: raise --unwind-tables-size",
			errNoRoom, n, mib(n), mib(u.used), mib(u.budget))
		return
	}
	runs, err := u.alloc(f.tb.Entries)
	if err != nil {
		f.err = err
		return
	}
	f.runs, f.tb, f.err = runs, nil, nil
	for _, r := range runs {
		u.used += int(r.count)
	}
}

func mib(entries int) string { return fmt.Sprintf("%.1f MiB", float64(entries)*8/(1<<20)) }

// alloc writes es into free runs of the chunks, making chunks as needed.
// Called with mu held.
func (u *uwState) alloc(es []unwind.Entry) ([]uwRun, error) {
	var runs []uwRun
	undo := func() {
		for _, r := range runs {
			u.chunks[r.chunk].release(r.first, r.count)
		}
	}
	i := 0 // the next entry to place
	for i < len(es)-1 {
		ci, ext, ok := u.freeRun()
		if !ok {
			undo()
			return nil, fmt.Errorf("%w: no chunk left", errNoRoom)
		}
		c := u.chunks[ci]
		k := int(ext.n)
		if rest := len(es) - i; k > rest {
			k = rest
		}
		c.take(ext.first, uint32(k))
		for j := 0; j < k; j++ {
			e := es[i+j]
			v := uint64(e.Addr) | uint64(e.CFAOffset)<<32 | uint64(e.Kind)<<48 | uint64(e.Aux)<<56
			binary.LittleEndian.PutUint64(c.mem[8*(int(ext.first)+j):], v)
		}
		r := uwRun{chunk: uint32(ci), first: ext.first, count: uint32(k), lo: 0, hi: 1 << 32}
		if i > 0 {
			r.lo = uint64(es[i].Addr)
		}
		last := i + k - 1 // the run's last entry: the next run's first
		if last < len(es)-1 {
			r.hi = uint64(es[last].Addr)
		}
		runs = append(runs, r)
		i = last
	}
	return runs, nil
}

// freeRun returns the first free extent of at least two entries, making a
// chunk if none has one. Called with mu held.
func (u *uwState) freeRun() (int, extent, bool) {
	for i, c := range u.chunks {
		if c == nil {
			continue
		}
		for _, e := range c.free {
			if e.n >= 2 {
				return i, e, true
			}
		}
	}
	made := 0
	for _, c := range u.chunks {
		if c != nil {
			made++
		}
	}
	if u.closed || made*uwChunkEntries >= u.budget+uwChunkEntries-1 {
		return 0, extent{}, false
	}
	for i, c := range u.chunks {
		if c != nil {
			continue
		}
		nc, err := u.newChunk(i)
		if err != nil {
			return 0, extent{}, false
		}
		u.chunks[i] = nc
		return i, nc.free[0], true
	}
	return 0, extent{}, false
}

func (u *uwState) newChunk(i int) (*uwChunk, error) {
	m, err := ebpf.NewMap(u.chunkSpec)
	if err != nil {
		return nil, fmt.Errorf("ebpf: unwind table chunk: %w", err)
	}
	mem, err := mmapArray(m)
	if err != nil {
		m.Close()
		return nil, err
	}
	if err := u.outer.Put(uint32(i), m); err != nil {
		unix.Munmap(mem)
		m.Close()
		return nil, fmt.Errorf("ebpf: unwind table chunk: %w", err)
	}
	return &uwChunk{m: m, mem: mem, free: []extent{{0, uwChunkEntries}}}, nil
}

// take removes [first, first+n) from the free extent that starts at first.
func (c *uwChunk) take(first, n uint32) {
	for i, e := range c.free {
		if e.first == first {
			if e.n == n {
				c.free = append(c.free[:i], c.free[i+1:]...)
			} else {
				c.free[i] = extent{first + n, e.n - n}
			}
			return
		}
	}
}

// release gives [first, first+n) back, merging it with its neighbours.
func (c *uwChunk) release(first, n uint32) {
	i := sort.Search(len(c.free), func(i int) bool { return c.free[i].first > first })
	c.free = append(c.free, extent{})
	copy(c.free[i+1:], c.free[i:])
	c.free[i] = extent{first, n}
	if i+1 < len(c.free) && c.free[i].first+c.free[i].n == c.free[i+1].first {
		c.free[i].n += c.free[i+1].n
		c.free = append(c.free[:i+1], c.free[i+2:]...)
	}
	if i > 0 && c.free[i-1].first+c.free[i-1].n == c.free[i].first {
		c.free[i-1].n += c.free[i].n
		c.free = append(c.free[:i], c.free[i+1:]...)
	}
}

// unload frees f's runs, and each chunk left empty. Called with mu held.
func (u *uwState) unload(f *uwFile) {
	for _, r := range f.runs {
		c := u.chunks[r.chunk]
		c.release(r.first, r.count)
		u.used -= int(r.count)
		if len(c.free) == 1 && c.free[0].n == uwChunkEntries {
			u.outer.Delete(r.chunk)
			unix.Munmap(c.mem)
			c.m.Close()
			u.chunks[r.chunk] = nil
		}
	}
	f.runs = nil
}

// UnwindUsage returns the entries the unwind tables hold and the room for
// them (Config.UnwindEntries), and the chunks of kernel memory made.
func (t *Tracer) UnwindUsage() (used, room, chunks int) {
	if t.uw == nil {
		return 0, 0, 0
	}
	u := t.uw
	u.mu.Lock()
	defer u.mu.Unlock()
	for _, c := range u.chunks {
		if c != nil {
			chunks++
		}
	}
	return u.used, u.budget, chunks
}

// load gives pid's BPF walk the ranges of its executable mappings now. It
// returns the files that have no table (they unwind by frame pointer).
func (u *uwState) load(pid uint32) ([]*uwFile, error) {
	return u.loadRanges(pid, false)
}

// errUWNotLoaded: reload of a process whose ranges were never loaded, or
// were dropped.
var errUWNotLoaded = errors.New("ebpf: no unwind ranges to reload")

// reload is load for a process whose ranges are loaded already: it fails
// once they have been dropped (the process ended) rather than adding them
// again.
func (u *uwState) reload(pid uint32) ([]*uwFile, error) {
	return u.loadRanges(pid, true)
}

func (u *uwState) loadRanges(pid uint32, again bool) ([]*uwFile, error) {
	maps, err := proc.ReadMaps(int(pid))
	if err != nil {
		return nil, err
	}
	uid, uidErr := processUID(int(pid))
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.closed {
		return nil, errUWClosed
	}
	p := u.loaded[pid]
	if again && p == nil {
		return nil, errUWNotLoaded
	}
	if p == nil {
		if uidErr != nil {
			return nil, uidErr
		}
		p = &uwProc{uid: uid}
	}
	files := map[string]*uwFile{}
	paths := map[string]bool{}
	for _, m := range maps {
		if m.Exec() && m.File() {
			f := u.fileFor(pid, m)
			files[f.key] = f
			paths[m.Path] = true
		}
	}
	// What the process maps now is its; what it no longer maps is
	// released (freed when no one maps it).
	for k, f := range files {
		if p.files[k] == nil {
			f.users[p.uid]++
		}
	}
	for k, f := range p.files {
		if files[k] == nil {
			u.release(f, p.uid)
		}
	}
	p.files, p.paths = files, paths
	u.loaded[pid] = p

	var v heapscopeUwProc
	var missing []*uwFile
	add := func(r heapscopeUwRange) {
		if v.N < uwMaxRanges {
			v.R[v.N] = r
			v.N++
		}
	}
	for _, m := range maps {
		if !m.Exec() || !m.File() {
			continue
		}
		f := files[fmt.Sprintf("%s:%d", m.Dev, m.Inode)]
		u.place(f, p.uid)
		if f.runs == nil {
			missing = append(missing, f)
			add(heapscopeUwRange{Start: m.Start, End: m.End}) // count 0: no table
			continue
		}
		var seg *elf.ProgHeader
		for i := range f.segs {
			s := &f.segs[i]
			if m.Offset >= s.Off&^0xfff && m.Offset < s.Off+s.Filesz {
				seg = s
			}
		}
		if seg == nil {
			add(heapscopeUwRange{Start: m.Start, End: m.End})
			continue
		}
		// load bias = start - the vaddr the mapping's first byte has
		bias := m.Start - (seg.Vaddr - seg.Off + m.Offset) + f.base
		for _, r := range f.runs {
			lo, hi := r.lo+bias, r.hi+bias
			if r.hi == 1<<32 {
				hi = m.End
			}
			if r.lo == 0 {
				lo = m.Start
			}
			lo, hi = max(lo, m.Start), min(hi, m.End)
			if lo < hi {
				add(heapscopeUwRange{Start: lo, End: hi, Bias: bias, First: r.first, Count: r.count, Chunk: r.chunk})
			}
		}
	}
	sort.Slice(v.R[:v.N], func(i, j int) bool { return v.R[i].Start < v.R[j].Start })
	// Never 0 (a thread's rules start at 0), never reused: a thread's
	// cached rules are of one generation of one process's ranges.
	u.gen++
	if u.gen == 0 {
		u.gen++
	}
	v.Gen = u.gen
	if err := u.procs.Put(pid, &v); err != nil {
		return missing, fmt.Errorf("ebpf: pid %d: loading its unwind ranges: %w", pid, err)
	}
	return missing, nil
}

// release drops one of uid's processes from f's users, and frees f's
// table once no traced process maps it. Called with mu held.
func (u *uwState) release(f *uwFile, uid uint32) {
	if f.users[uid]--; f.users[uid] <= 0 {
		delete(f.users, uid)
	}
	if len(f.users) == 0 {
		u.unload(f)
		f.tb = nil
		delete(u.files, f.key)
	}
}

// processUID returns the real user id of pid.
func processUID(pid int) (uint32, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, fmt.Errorf("ebpf: pid %d: %w", pid, err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if f := bytes.Fields(sc.Bytes()); len(f) >= 2 && string(f[0]) == "Uid:" {
			uid, err := strconv.ParseUint(string(f[1]), 10, 32)
			if err == nil {
				return uint32(uid), nil
			}
		}
	}
	return 0, fmt.Errorf("ebpf: pid %d: no Uid in its status", pid)
}

// knows reports whether pid's ranges include the file at path.
func (u *uwState) knows(pid uint32, path string) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	p := u.loaded[pid]
	return p != nil && p.paths[path]
}

// forget drops pid's ranges, and the tables no other traced process uses.
func (u *uwState) forget(pid uint32) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if p := u.loaded[pid]; p != nil {
		delete(u.loaded, pid)
		u.procs.Delete(pid)
		for _, f := range p.files {
			u.release(f, p.uid)
		}
	}
	u.dlHold.Delete(pid)
}

// UnwindTable describes a file's unwind table, as loaded for the BPF
// walk.
type UnwindTable struct {
	Path      string
	Entries   int
	Bytes     int           // its size in the unwind format
	BuildTime time.Duration // how long building it took
	Fallback  float64       // percent of its entries that say "no rule"
	Err       error         // why it has none (it unwinds by frame pointer)
}

// UnwindTables returns the tables made for the files traced processes
// have mapped, freed since or not, by path (nil unless
// Config.UnwindTables).
func (t *Tracer) UnwindTables() []UnwindTable {
	if t.uw == nil {
		return nil
	}
	t.uw.mu.Lock()
	defer t.uw.mu.Unlock()
	var out []UnwindTable
	for _, f := range t.uw.seen {
		out = append(out, UnwindTable{Path: f.path, Entries: f.n, Bytes: f.bytes, BuildTime: f.buildTime, Fallback: f.fallbackPct, Err: f.err})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}

// warnTables warns once for each file that has no table.
func (t *Tracer) warnTables(missing []*uwFile) {
	for _, f := range missing {
		t.uw.mu.Lock()
		first := f.err != nil && !f.warned
		f.warned = true
		err := f.err
		t.uw.mu.Unlock()
		if first {
			t.warn(fmt.Errorf("ebpf: %s: no unwind table, its frames are unwound by frame pointer: %w", f.path, err))
		}
	}
}

// UnwindCounters returns how many stacks the BPF walk cut at its depth
// limit, and how many frames it unwound by frame pointer because no table
// had a rule for them (with Config.UnwindTables).
func (t *Tracer) UnwindCounters() (cut, fallback uint64) {
	t.life.RLock()
	defer t.life.RUnlock()
	if t.gone {
		return 0, 0
	}
	c := t.counters()
	return c[ctrStacksCut], c[ctrUWFallback]
}
