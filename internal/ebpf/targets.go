package ebpf

import (
	"bufio"
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/internal/ebpf/sites"
	"github.com/heapscope/heapscope/internal/proc"
)

// target is one file whose allocator functions are probed in a process.
type target struct {
	path  string // as the process sees it
	open  string // as this process can open it
	heap  event.Heap
	sites []sites.Site
}

// findTargets returns the files to probe in pid: the executable, the C
// library and the C++ runtime, as mapped. A process held at its exec, when
// only the executable and the dynamic loader are mapped, gets the libraries
// the loader will map, found by asking it (ld.so --list).
func findTargets(pid int) ([]target, error) {
	maps, err := proc.ReadMaps(pid)
	if err != nil {
		return nil, err
	}
	exe, err := proc.Exe(pid)
	if err != nil {
		return nil, err
	}
	root := fmt.Sprintf("/proc/%d/root", pid)

	var paths []string
	seen := map[string]bool{}
	add := func(p string) {
		if !seen[p] {
			seen[p] = true
			paths = append(paths, p)
		}
	}
	// How this process opens each file: through the process's root, or
	// its mapping when that is not the file (see proc.MappedFile).
	opens := map[string]string{}
	open := func(p string) string {
		if o, ok := opens[p]; ok {
			return o
		}
		return root + p
	}
	for _, m := range maps {
		if m.Exec() && m.File() {
			add(m.Path)
			if _, ok := opens[m.Path]; !ok {
				opens[m.Path] = proc.MappedFile(pid, m)
			}
		}
	}
	if !seen[exe] {
		add(exe)
	}
	if libs, err := pendingLibraries(pid, root, exe, open(exe), seen); err != nil {
		return nil, err
	} else {
		for _, l := range libs {
			add(l)
		}
	}

	var targets []target
	for _, p := range paths {
		open := open(p)
		heap, own, ok := classify(open, p, exe)
		if !ok {
			continue
		}
		ss, err := findSites(open, own)
		if err != nil {
			return nil, fmt.Errorf("pid %d: %s: %w", pid, p, err)
		}
		if len(ss) > 0 {
			targets = append(targets, target{path: p, open: open, heap: heap, sites: ss})
		}
	}
	return targets, nil
}

// classify says whether a mapped file is one whose allocator functions are
// probed, the heap its C allocator stands for, and whether it is an
// allocator of its own (see sites.FindOwn): the executable (a static
// binary, or one with its own malloc), the C library, any file whose C++
// operator new and delete it may define (the C++ runtime), and jemalloc,
// tcmalloc and mimalloc, as a shared library (linked or preloaded) or
// linked into the executable. Of the files, only the executable is opened
// here, to read its symbols.
func classify(open, path, exe string) (heap event.Heap, own, ok bool) {
	base := filepath.Base(path)
	switch {
	case strings.HasPrefix(base, "libc.so"), strings.HasPrefix(base, "libc-"):
		return event.HeapLibc, false, true
	case strings.HasPrefix(base, "libstdc++.so"), strings.HasPrefix(base, "libc++.so"), strings.HasPrefix(base, "libc++abi.so"):
		return event.HeapLibc, false, true
	case strings.HasPrefix(base, "libjemalloc.so"):
		return event.HeapJemalloc, true, true
	case strings.HasPrefix(base, "libtcmalloc"):
		return event.HeapTcmalloc, true, true
	case strings.HasPrefix(base, "libmimalloc"):
		return event.HeapMimalloc, true, true
	case path != exe:
		return 0, false, false
	}
	if f, err := elf.Open(open); err == nil {
		defer f.Close()
		if h, found := sites.Identify(f); found {
			return h, true, true
		}
	}
	return event.HeapExe, false, true
}

func findSites(path string, own bool) ([]sites.Site, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	find := sites.Find
	if own {
		find = sites.FindOwn
	}
	ss, err := find(f)
	if errors.Is(err, sites.ErrNotELF64) {
		return nil, nil
	}
	return ss, err
}

// pendingLibraries returns the shared libraries a process held at its exec
// will load, when it is such a process: a dynamic executable none of whose
// libraries is mapped yet. It asks the program's own dynamic loader, with
// the process's library path and preloads, what it would map.
func pendingLibraries(pid int, root, exe, openExe string, mapped map[string]bool) ([]string, error) {
	f, err := elf.Open(openExe)
	if err != nil {
		return nil, fmt.Errorf("pid %d: %w", pid, err)
	}
	defer f.Close()
	interp := ""
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			b := make([]byte, p.Filesz)
			if _, err := p.ReadAt(b, 0); err != nil {
				return nil, fmt.Errorf("pid %d: reading PT_INTERP: %w", pid, err)
			}
			interp = string(bytes.TrimRight(b, "\x00"))
		}
	}
	needed, _ := f.ImportedLibraries()
	if interp == "" || len(needed) == 0 {
		return nil, nil // static, or needs nothing
	}
	for p := range mapped {
		if p != exe && filepath.Base(p) != filepath.Base(interp) && !strings.HasPrefix(filepath.Base(p), "ld-") {
			return nil, nil // the loader has already run
		}
	}

	env := []string{"LC_ALL=C"}
	if b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ"); err == nil {
		for _, kv := range strings.Split(string(b), "\x00") {
			if strings.HasPrefix(kv, "LD_LIBRARY_PATH=") || strings.HasPrefix(kv, "LD_PRELOAD=") {
				env = append(env, kv)
			}
		}
	}
	cmd := exec.Command(root+interp, "--list", root+exe)
	cmd.Env = env
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("pid %d: resolving the libraries of %s with %s --list: %w", pid, exe, interp, err)
	}
	return parseLdList(out), nil
}

// parseLdList extracts the library paths from `ld.so --list` output:
//
//	libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f...)
//	/lib64/ld-linux-x86-64.so.2 (0x00007f...)
func parseLdList(out []byte) []string {
	var libs []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if _, after, ok := strings.Cut(line, "=> "); ok {
			line = after
		}
		path, _, _ := strings.Cut(line, " (")
		if strings.HasPrefix(path, "/") {
			libs = append(libs, path)
		}
	}
	return libs
}
