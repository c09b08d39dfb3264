package symbolize

import (
	"fmt"
	"hash/maphash"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"sync"

	"github.com/heapscope/heapscope/event"
)

// DefaultDebugDir is where distributions install separate debug files
// (Debian's *-dbg and *-dbgsym packages): it is searched after
// Options.DebugDirs.
const DefaultDebugDir = "/usr/lib/debug"

// Options configure a Symbolizer. The zero Options symbolize on the machine
// that made the trace, with demangled names and inlined frames.
type Options struct {
	// DebugDirs are further roots searched for separate debug files, before
	// DefaultDebugDir: ROOT/.build-id/xx/yyyy.debug by build-id, and
	// ROOT/DIR/NAME for a .gnu_debuglink NAME of a file in DIR.
	DebugDirs []string
	// Sysroot is prepended to every module path, and its
	// usr/lib/debug is searched for debug files: it symbolizes a trace taken
	// on another machine from a copy of that machine's files.
	Sysroot string
	// NoDemangle keeps C++ and Rust names as the linker sees them.
	NoDemangle bool
	// NoInlines gives one frame per address, the function the code was
	// compiled into, with the line of the innermost inlined code.
	NoInlines bool
}

// A Symbolizer resolves addresses in traced processes to frames, from module
// records (event.Module) alone: it reads the files they name, or their copies
// under a sysroot, and their separate debug files.
//
// Each file is loaded once per build-id however many processes map it, its
// DWARF is decoded one compilation unit at a time as addresses need it, and
// each distinct address is resolved once. A Symbolizer is safe for
// concurrent use, and resolves addresses of different files in parallel:
// a report can spread the first, costly lookups over its cores.
type Symbolizer struct {
	opts      Options
	debugDirs []string

	mu    sync.Mutex // guards procs and objs
	procs map[uint32]*process
	objs  map[string]*objEntry // by build-id, or by "path:" and the path when a file has none

	wmu      sync.Mutex // guards warnings and warned
	warnings []string
	warned   map[string]bool
	// Past maxWarnings, warnings are only counted, once each (by hash).
	moreWarnings int
	moreSeen     map[uint64]bool
}

// objEntry is an object, loaded once on first use.
type objEntry struct {
	once sync.Once
	o    *object
}

// process is what the Symbolizer knows of one traced process.
type process struct {
	mods  []mapping // sorted by start, not overlapping
	cache map[uint64][]Frame
	gen   uint64 // counts changes to mods: a result computed before one is not cached
}

// mapping is a module record and the object it maps.
type mapping struct {
	event.Module
	obj *objEntry
}

// New returns a Symbolizer with options o.
func New(o Options) *Symbolizer {
	s := &Symbolizer{
		opts:   o,
		procs:  map[uint32]*process{},
		objs:   map[string]*objEntry{},
		warned: map[string]bool{},
	}
	s.debugDirs = append(s.debugDirs, o.DebugDirs...)
	if o.Sysroot != "" {
		s.debugDirs = append(s.debugDirs, filepath.Join(o.Sysroot, DefaultDebugDir))
	}
	s.debugDirs = append(s.debugDirs, DefaultDebugDir)
	return s
}

// AddModule records that m.Path is mapped executable at m.Start..m.End in
// process m.PID. A process has one record per mapping, usually several. A
// mapping that overlaps earlier ones of the same process replaces them, as
// mmap does. The file is read when an address in it is first resolved.
func (s *Symbolizer) AddModule(m event.Module) {
	if m.End <= m.Start {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.procs[m.PID]
	if p == nil {
		p = &process{}
		s.procs[m.PID] = p
	}
	// The mappings are sorted and disjoint: the ones m overlaps (it
	// replaces them) are a run, found by binary search. Modules usually
	// come in address order, and then m goes at the end.
	mods := p.mods
	if n := len(mods); n == 0 || mods[n-1].End <= m.Start {
		p.mods = append(mods, mapping{Module: m})
	} else {
		i := sort.Search(n, func(i int) bool { return mods[i].End > m.Start })
		j := i + sort.Search(n-i, func(k int) bool { return mods[i+k].Start >= m.End })
		p.mods = slices.Replace(mods, i, j, mapping{Module: m})
	}
	if len(p.cache) > 0 {
		p.cache = nil // an address may now be in a module it was not in
	}
	p.gen++
}

// Frames resolves addr, a return address in process pid, to its frames,
// innermost first: several when functions were inlined into one another.
// Being a return address, addr is looked up as addr-1, the last byte of the
// call instruction, so that the line is that of the call.
//
// Frames never returns an empty slice: an address in no known module gives
// one Frame with only Address set, and one in a module whose file cannot be
// read, or that has no symbols for it, gives a Frame with Module and Offset
// but no Function. The slice is shared by later calls for the same address:
// callers must not modify it.
func (s *Symbolizer) Frames(pid uint32, addr uint64) []Frame {
	s.mu.Lock()
	p := s.procs[pid]
	if p == nil {
		s.mu.Unlock()
		return []Frame{{Address: addr}}
	}
	if fr, ok := p.cache[addr]; ok {
		s.mu.Unlock()
		return fr
	}
	pc := addr
	if pc > 0 {
		pc--
	}
	i := sort.Search(len(p.mods), func(i int) bool { return p.mods[i].End > pc })
	if i == len(p.mods) || p.mods[i].Start > pc {
		s.mu.Unlock()
		return []Frame{{Address: addr}}
	}
	m := &p.mods[i]
	if m.obj == nil {
		m.obj = s.entry(m.Module)
	}
	mod, e, gen := m.Module, m.obj, p.gen
	s.mu.Unlock()

	// Files are read and decoded without s.mu, under the object's own lock.
	fr := s.resolve(mod, e, addr, pc)

	s.mu.Lock()
	defer s.mu.Unlock()
	if p.gen == gen {
		if p.cache == nil {
			p.cache = map[uint64][]Frame{}
		}
		if old, ok := p.cache[addr]; ok {
			return old // resolved meanwhile by another goroutine: share one
		}
		p.cache[addr] = fr
	}
	return fr
}

// Prefetch resolves the return addresses addrs of process pid, so that
// Frames answers them from its cache. It reads each file the addresses are
// in once for all of them, and files in parallel: the DWARF units that the
// addresses of one file fall in are read in one pass over its sections,
// where calls of Frames one address at a time may decompress a compressed
// section once per unit. Its effect on the results is none.
func (s *Symbolizer) Prefetch(pid uint32, addrs []uint64) {
	type work struct {
		m   event.Module
		e   *objEntry
		vas []uint64
	}
	byObj := map[*objEntry]*work{}
	var todo []*work
	s.mu.Lock()
	p := s.procs[pid]
	if p == nil {
		s.mu.Unlock()
		return
	}
	for _, addr := range addrs {
		if _, ok := p.cache[addr]; ok || addr == 0 {
			continue
		}
		pc := addr - 1
		i := sort.Search(len(p.mods), func(i int) bool { return p.mods[i].End > pc })
		if i == len(p.mods) || p.mods[i].Start > pc {
			continue
		}
		m := &p.mods[i]
		if m.obj == nil {
			m.obj = s.entry(m.Module)
		}
		w := byObj[m.obj]
		if w == nil {
			w = &work{m: m.Module, e: m.obj}
			byObj[m.obj] = w
			todo = append(todo, w)
		}
		w.vas = append(w.vas, pc-m.Start) // the offset in the mapping, for now
	}
	s.mu.Unlock()

	var wg sync.WaitGroup
	sem := make(chan struct{}, max(1, runtime.GOMAXPROCS(0)))
	for _, w := range todo {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			o := s.load(w.e, w.m)
			vas := w.vas[:0]
			for _, off := range w.vas {
				if va, ok := o.vaddr(w.m, w.m.Start+off); ok {
					vas = append(vas, va)
				}
			}
			o.prefetch(vas)
		}()
	}
	wg.Wait()
	for _, addr := range addrs {
		s.Frames(pid, addr)
	}
}

// Stack resolves the return addresses of a stack (event.Stack.Frames,
// innermost first) into one list of frames, innermost first, inlined calls
// included: Frames of each address in turn. The result is the caller's.
func (s *Symbolizer) Stack(pid uint32, addrs []uint64) []Frame {
	var out []Frame
	for _, a := range addrs {
		out = append(out, s.Frames(pid, a)...)
	}
	return out
}

// resolve resolves addr, a return address, pc the address looked up, in
// mapping m of the object of e.
func (s *Symbolizer) resolve(m event.Module, e *objEntry, addr, pc uint64) []Frame {
	base := Frame{Module: m.Path, Offset: addr - m.Start + m.Offset, Address: addr}
	o := s.load(e, m)
	vaddr, ok := o.vaddr(m, pc)
	if !ok {
		return []Frame{base}
	}
	locs := o.lookup(vaddr)
	if len(locs) == 0 {
		return []Frame{base}
	}
	if s.opts.NoInlines && len(locs) > 1 {
		// The function the code is in, at the line of the innermost code.
		locs = []loc{{Function: locs[len(locs)-1].Function, File: locs[0].File, Line: locs[0].Line}}
	}
	frames := make([]Frame, len(locs))
	for i, l := range locs {
		f := base
		f.Function, f.File, f.Line = l.Function, l.File, l.Line
		f.Inlined = i < len(locs)-1
		frames[i] = f
	}
	return frames
}

// path is where m's file is read from: m.Path, under the sysroot if any.
func (s *Symbolizer) path(m event.Module) string {
	if s.opts.Sysroot != "" {
		return filepath.Join(s.opts.Sysroot, m.Path)
	}
	return m.Path
}

// entry returns the entry of m's object, made on first use; s.mu is held.
func (s *Symbolizer) entry(m event.Module) *objEntry {
	key := m.BuildID
	if key == "" {
		key = "path:" + s.path(m)
	}
	e := s.objs[key]
	if e == nil {
		e = &objEntry{}
		s.objs[key] = e
	}
	return e
}

// load returns e's object, reading the files of m, the first module record
// that needs it, on first use.
func (s *Symbolizer) load(e *objEntry, m event.Module) *object {
	e.once.Do(func() { e.o = s.loadObject(m, s.path(m)) })
	return e.o
}

// Warnings returns what went wrong while reading files so far, one line each,
// oldest first: files that could not be read, build-ids that did not match
// the trace's records, corrupt symbols or DWARF. A warning is given once.
func (s *Symbolizer) Warnings() []string {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	out := append([]string(nil), s.warnings...)
	if s.moreWarnings > 0 {
		out = append(out, fmt.Sprintf("%d more symbolization warnings like these", s.moreWarnings))
	}
	return out
}

// maxWarnings bounds the warnings kept: a trace naming thousands of files
// that cannot be read says so in a few lines, not thousands.
const maxWarnings = 32

var warnSeed = maphash.MakeSeed()

func (s *Symbolizer) warnf(format string, args ...any) {
	w := fmt.Sprintf(format, args...)
	s.wmu.Lock()
	defer s.wmu.Unlock()
	switch {
	case s.warned[w]:
	case len(s.warnings) >= maxWarnings:
		h := maphash.String(warnSeed, w)
		if !s.moreSeen[h] {
			if s.moreSeen == nil {
				s.moreSeen = make(map[uint64]bool)
			}
			s.moreSeen[h] = true
			s.moreWarnings++
		}
	default:
		s.warned[w] = true
		s.warnings = append(s.warnings, w)
	}
}

// Close releases the files the Symbolizer holds open. It must not be called
// while other calls are in progress. Frames may still be called after it;
// files are then opened again as needed.
func (s *Symbolizer) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var first error
	for _, e := range s.objs {
		if e.o == nil {
			continue
		}
		if err := e.o.close(); err != nil && first == nil {
			first = err
		}
	}
	s.objs = map[string]*objEntry{}
	for _, p := range s.procs {
		for i := range p.mods {
			p.mods[i].obj = nil
		}
	}
	return first
}
