package ebpf

import (
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/cilium/ebpf/link"

	"github.com/heapscope/heapscope/buildid"
	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/internal/proc"
)

// loader is where to probe a process's dynamic loader to learn of the
// libraries it maps.
type loader struct {
	path   string
	ex     *link.Executable
	probe  uint64 // file offset of _dl_debug_state
	rDebug uint64 // address of _r_debug in the process
}

// findLoader finds the dynamic loader mapped in pid, or nil for a static
// process (or a loader without the debugger interface).
func findLoader(pid int) (*loader, error) {
	maps, err := proc.ReadMaps(pid)
	if err != nil {
		return nil, err
	}
	var base uint64
	path, open := "", ""
	for _, m := range maps {
		if m.File() && m.Offset == 0 && strings.HasPrefix(filepath.Base(m.Path), "ld-") {
			path, base, open = m.Path, m.Start, proc.MappedFile(pid, m)
			break
		}
	}
	if path == "" {
		return nil, nil
	}
	f, err := elf.Open(open)
	if err != nil {
		return nil, fmt.Errorf("pid %d: %w", pid, err)
	}
	defer f.Close()
	syms, err := f.DynamicSymbols()
	if err != nil {
		return nil, nil
	}
	var state, rDebug uint64
	for _, s := range syms {
		switch s.Name {
		case "_dl_debug_state":
			state = s.Value
		case "_r_debug":
			rDebug = s.Value
		}
	}
	first, ok := firstLoad(f)
	if state == 0 || rDebug == 0 || !ok {
		return nil, nil
	}
	off, ok := fileOffset(f, state)
	if !ok {
		return nil, nil
	}
	ex, err := link.OpenExecutable(open)
	if err != nil {
		return nil, fmt.Errorf("pid %d: %w", pid, err)
	}
	// The mapping at file offset 0 holds the first PT_LOAD.
	return &loader{path: path, ex: ex, probe: off, rDebug: base - first + rDebug}, nil
}

func firstLoad(f *elf.File) (uint64, bool) {
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD {
			return p.Vaddr &^ (p.Align - 1), true
		}
	}
	return 0, false
}

func fileOffset(f *elf.File, addr uint64) (uint64, bool) {
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && addr >= p.Vaddr && addr < p.Vaddr+p.Filesz {
			return addr - p.Vaddr + p.Off, true
		}
	}
	return 0, false
}

// library handles one entry of a loader's list: the executable mappings of
// a shared object loaded at base, sent as Module records unless known.
// The name is the process's (its link_map's l_name), so it is opened only
// as proc.OpenInRoot opens it, and away from the delivery goroutine
// (readModules): a FIFO or device named there cannot stall delivery, and a
// file whose reads hang (on a file system the process serves) delays it at
// most moduleWait.
func (t *Tracer) library(l *heapscopeLib) {
	name := cString(l.Name[:])
	if !strings.HasPrefix(name, "/") {
		return // the executable (""), the vDSO: known from the maps
	}
	t.out.Lock()
	ms := t.modules[l.Pid]
	traced := ms != nil && t.known[l.Pid]
	t.out.Unlock()
	if !traced {
		return
	}
	pid, base := l.Pid, l.Base
	var root *os.File
	t.mu.Lock()
	p := t.procs[int(pid)]
	if p != nil {
		root = p.root
	}
	t.mu.Unlock()
	if p != nil {
		t.usdtLibrary(p, name)
	}
	if mods, ok := t.readModules(pid, ms, func() ([]event.Module, error) { return objectModules(pid, name, base, root) }); ok {
		t.out.Lock()
		if t.modules[pid] == ms {
			t.sendModules(ms, mods)
		}
		t.out.Unlock()
	}
	if t.uw != nil && !t.uw.knows(pid, name) {
		// A library loaded after attach: its table, away from the
		// reader (building one can take a tenth of a second).
		go func() {
			if missing, err := t.uw.load(pid); err == nil {
				t.warnTables(missing)
			}
			t.mu.Lock()
			_, traced := t.procs[int(pid)]
			t.mu.Unlock()
			if !traced {
				t.uw.forget(pid) // it ended meanwhile
			}
		}()
	}
}

// moduleWait is how long delivery waits for the modules of a file to be
// read before it goes on without them (they are sent when they come).
const moduleWait = 250 * time.Millisecond

// readModules runs read, which opens files of a traced process's choosing,
// in a goroutine of its own, and returns what it read if it ends within
// moduleWait. If it does not, the modules are sent when it ends, if ms is
// still the process's (the same image).
func (t *Tracer) readModules(pid uint32, ms *moduleSet, read func() ([]event.Module, error)) ([]event.Module, bool) {
	ch := make(chan []event.Module, 1)
	go func() {
		mods, err := read()
		if err != nil {
			mods = nil
		}
		ch <- mods
	}()
	timer := time.NewTimer(moduleWait)
	defer timer.Stop()
	select {
	case mods := <-ch:
		return mods, true
	case <-timer.C:
		go func() {
			mods := <-ch
			if len(mods) == 0 {
				return
			}
			t.out.Lock()
			defer t.out.Unlock()
			if t.modules[pid] == ms {
				t.sendModules(ms, mods)
			}
		}()
		return nil, false
	}
}

// loadLibraries loads the tables of the files pid's loader has just
// mapped, which the BPF side stopped it for (before their code runs), then
// continues it, also when loading fails.
func (t *Tracer) loadLibraries(pid int, held bool) {
	defer t.resume(pid, held)
	if t.uw == nil {
		return
	}
	// Fails when pid has ended (its ranges are gone) or at Close.
	if missing, err := t.uw.reload(uint32(pid)); err == nil {
		t.warnTables(missing)
	}
}

func cString(b []int8) string {
	n := 0
	for n < len(b) && b[n] != 0 {
		n++
	}
	s := make([]byte, n)
	for i := range s {
		s[i] = byte(b[i])
	}
	return string(s)
}

// objectModules returns the executable segments of the ELF file name,
// loaded at base in pid, as the mappings the loader made of them. The file
// is opened by proc.OpenInRoot while pid lives, and once it has exited by
// proc.OpenIn in its root, opened at attach (nil: not at all): only ever a
// regular file, resolved in the process's root.
func objectModules(pid uint32, name string, base uint64, root *os.File) ([]event.Module, error) {
	fd, err := proc.OpenInRoot(int(pid), name, base)
	if err != nil && !errors.Is(err, proc.ErrNotRegular) && root != nil {
		fd, err = proc.OpenIn(root, name)
	}
	if err != nil {
		return nil, err
	}
	defer fd.Close()
	f, err := elf.NewFile(fd)
	if err != nil {
		return nil, err
	}
	id, _ := buildid.ELF(f)
	now := monotonic()
	const page = 4096
	var mods []event.Module
	for _, p := range f.Progs {
		if p.Type != elf.PT_LOAD || p.Flags&elf.PF_X == 0 {
			continue
		}
		start := (base + p.Vaddr) &^ (page - 1)
		end := (base + p.Vaddr + p.Memsz + page - 1) &^ (page - 1)
		mods = append(mods, event.Module{
			PID: pid, Time: now, Start: start, End: end, Offset: p.Off &^ (page - 1),
			Path: name, BuildID: id,
		})
	}
	return mods, nil
}
