package ebpf

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/heapscope/heapscope/internal/proc"
	"github.com/heapscope/heapscope/unwind"
)

// Unwinding with tables (Config.UnwindTables). Each executable file a
// traced process maps gets its table built once (package unwind, from its
// .eh_frame and .debug_frame), and copied into one BPF array shared by every
// process that maps the file (keyed by device and inode, as the kernel
// keys uprobes); each process gets the list of its executable mappings, with
// the file's run of entries and the mapping's bias. The BPF walk unwinds
// with them, by frame pointer where a file has no table or a table no rule.

// Sizes of the BPF side's tables (bpf/heapscope.h).
const (
	uwMaxRanges = 256
	// DefaultUnwindEntries is the room, in 8-byte entries, for the tables
	// of all files when Config.UnwindEntries is 0: 8 MiB of kernel memory
	// (python3.11 and libc take 0.75 MiB of it).
	DefaultUnwindEntries = 1 << 20
)

// uwFile is a file's table, as loaded into the shared array.
type uwFile struct {
	path        string
	first, n    uint32
	base        uint64
	segs        []elf.ProgHeader // executable PT_LOADs, for the bias
	err         error            // why it has no table (it unwinds by frame pointer)
	warned      bool
	buildTime   time.Duration
	bytes       int
	fallbackPct float64
}

// uwState is the tracer's unwinding state.
type uwState struct {
	mu      sync.Mutex
	entries []byte // uw_entries, mapped
	next    uint32 // the first free entry
	files   map[string]*uwFile
	procs   *ebpf.Map
	dlHold  *ebpf.Map                  // processes stopped when their loader adds objects
	loaded  map[uint32]map[string]bool // per process: the files in its ranges
	gen     uint32                     // the last generation of ranges given
}

func newUWState(entries, procs, dlHold *ebpf.Map) (*uwState, error) {
	b, err := mmapArray(entries)
	if err != nil {
		return nil, err
	}
	return &uwState{entries: b, files: map[string]*uwFile{}, procs: procs, dlHold: dlHold, loaded: map[uint32]map[string]bool{}}, nil
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

// close unmaps the entries; a load after it fails.
func (u *uwState) close() {
	if u == nil {
		return
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.entries != nil {
		unix.Munmap(u.entries)
		u.entries = nil
	}
}

var errUWClosed = errors.New("ebpf: unwind tables closed")

// file returns the table of the file mapped as m in pid, building and
// loading it the first time the file is seen.
func (u *uwState) file(pid uint32, m proc.Mapping) *uwFile {
	key := fmt.Sprintf("%s:%d", m.Dev, m.Inode)
	if f := u.files[key]; f != nil {
		return f
	}
	f := &uwFile{path: m.Path}
	u.files[key] = f
	open := proc.MappedFile(int(pid), m)
	ef, err := elf.Open(open)
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
	n := uint32(len(tb.Entries))
	if int(u.next)+int(n) > len(u.entries)/8 {
		f.err = fmt.Errorf("no room for its %d entries (%d of %d used): raise Config.UnwindEntries", n, u.next, len(u.entries)/8)
		return f
	}
	for i, e := range tb.Entries {
		v := uint64(e.Addr) | uint64(e.CFAOffset)<<32 | uint64(e.Kind)<<48 | uint64(e.Aux)<<56
		binary.LittleEndian.PutUint64(u.entries[8*(int(u.next)+i):], v)
	}
	f.first, f.n, f.base = u.next, n, tb.Base
	u.next += n
	return f
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
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.entries == nil {
		return nil, errUWClosed
	}
	if _, ok := u.loaded[pid]; again && !ok {
		return nil, errUWNotLoaded
	}
	var v heapscopeUwProc
	var missing []*uwFile
	files := map[string]bool{}
	for _, m := range maps {
		if !m.Exec() || !m.File() || v.N >= uwMaxRanges {
			continue
		}
		files[m.Path] = true
		f := u.file(pid, m)
		if f.err != nil || f.n < 2 {
			missing = append(missing, f)
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
			continue
		}
		// load bias = start - the vaddr the mapping's first byte has
		bias := m.Start - (seg.Vaddr - seg.Off + m.Offset)
		r := &v.R[v.N]
		r.Start, r.End, r.Bias, r.First, r.Count = m.Start, m.End, bias+f.base, f.first, f.n
		v.N++
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
	u.loaded[pid] = files
	return missing, nil
}

// knows reports whether pid's ranges include the file at path.
func (u *uwState) knows(pid uint32, path string) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.loaded[pid][path]
}

// forget drops pid's ranges.
func (u *uwState) forget(pid uint32) {
	u.mu.Lock()
	defer u.mu.Unlock()
	delete(u.loaded, pid)
	u.procs.Delete(pid)
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

// UnwindTables returns the tables loaded so far, by path (nil unless
// Config.UnwindTables).
func (t *Tracer) UnwindTables() []UnwindTable {
	if t.uw == nil {
		return nil
	}
	t.uw.mu.Lock()
	defer t.uw.mu.Unlock()
	var out []UnwindTable
	for _, f := range t.uw.files {
		out = append(out, UnwindTable{Path: f.path, Entries: int(f.n), Bytes: f.bytes, BuildTime: f.buildTime, Fallback: f.fallbackPct, Err: f.err})
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
		t.uw.mu.Unlock()
		if first {
			t.warn(fmt.Errorf("ebpf: %s: no unwind table, its frames are unwound by frame pointer: %w", f.path, f.err))
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
	sum := func(i uint32) uint64 {
		var perCPU []uint64
		var n uint64
		if err := t.objs.counters.Lookup(i, &perCPU); err == nil {
			for _, v := range perCPU {
				n += v
			}
		}
		return n
	}
	return sum(ctrStacksCut), sum(ctrUWFallback)
}
