package symbolize_test

import (
	"debug/elf"
	"fmt"
	"path/filepath"

	"github.com/heapscope/heapscope/buildid"
	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/symbolize"
)

// This resolves a return address in a process's libc, offline, from the
// module record a trace holds for it.
func Example() {
	mod, addr, err := libcMalloc()
	if err != nil {
		fmt.Println(err)
		return
	}
	s := symbolize.New(symbolize.Options{})
	defer s.Close()
	s.AddModule(mod)
	// addr+1: Frames takes return addresses and looks up the byte before.
	for _, f := range s.Frames(mod.PID, addr+1) {
		fmt.Println(f.Function, filepath.Base(f.File), f.Line > 0, f.Module == mod.Path)
	}
	fmt.Println(s.Warnings())
	// Output:
	// __libc_malloc malloc.c true true
	// []
}

// libcMalloc describes libc as ld.so would map it in process 1234, at
// 0x7f0000000000, and returns the address malloc would have there.
func libcMalloc() (event.Module, uint64, error) {
	const path, base = "/lib/x86_64-linux-gnu/libc.so.6", 0x7f0000000000
	f, err := elf.Open(path)
	if err != nil {
		return event.Module{}, 0, err
	}
	defer f.Close()
	id, err := buildid.ELF(f)
	if err != nil {
		return event.Module{}, 0, err
	}
	var mod event.Module
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && p.Flags&elf.PF_X != 0 {
			mod = event.Module{PID: 1234, Path: path, BuildID: id,
				Start: base + p.Vaddr&^0xfff, End: base + p.Vaddr + p.Memsz, Offset: p.Off &^ 0xfff}
		}
	}
	syms, err := f.DynamicSymbols()
	if err != nil {
		return event.Module{}, 0, err
	}
	for _, s := range syms {
		if s.Name == "malloc" {
			return mod, base + s.Value, nil
		}
	}
	return event.Module{}, 0, fmt.Errorf("no malloc in %s", path)
}
