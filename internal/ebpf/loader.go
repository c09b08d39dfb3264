package ebpf

import (
	"debug/elf"
	"fmt"
	"path/filepath"
	"strings"

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
// The file is read through the process's root while it lives, else by its
// name.
func (t *Tracer) library(l *heapscopeLib) {
	name := cString(l.Name[:])
	if !strings.HasPrefix(name, "/") {
		return // the executable (""), the vDSO: known from the maps
	}
	t.out.Lock()
	defer t.out.Unlock()
	ms := t.modules[l.Pid]
	if ms == nil || !t.known[l.Pid] {
		return
	}
	mods, err := objectModules(l.Pid, name, l.Base)
	if err != nil {
		return // the maps are read again if a stack needs it
	}
	t.sendModules(ms, mods)
	if t.uw != nil && !t.uw.knows(l.Pid, name) {
		// A library loaded after attach: its table, away from the
		// reader (building one can take a tenth of a second).
		pid := l.Pid
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
// loaded at base, as the mappings the loader made of them.
func objectModules(pid uint32, name string, base uint64) ([]event.Module, error) {
	f, err := elf.Open(fmt.Sprintf("/proc/%d/root%s", pid, name))
	if err != nil {
		if f, err = elf.Open(name); err != nil {
			return nil, err
		}
	}
	defer f.Close()
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
