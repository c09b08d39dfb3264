package query

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// arena holds the index's columns outside the Go heap, in anonymous
// mappings advised to use transparent huge pages. The columns are most of
// the index (about 600 MB for 20 M events) and written once, in order:
// touching fresh memory a 4 KiB page at a time cost the build more than
// half of its time on this machine (a page fault per 4 KiB in a VM); huge
// pages take a fault per 2 MiB. The garbage collector has nothing to scan
// in them either. The mappings are unmapped when the Index that owns the
// arena is collected (see newArena); when mapping fails, chunks come from
// the Go heap.
type arena struct {
	mu      sync.Mutex
	regions [][]byte
	free    []byte // the rest of the newest region
	// file, when not nil, backs the regions (see newFileArena); size is
	// its length.
	file *os.File
	size int64
}

// newFileArena returns an arena whose regions are shared mappings of an
// unnamed file in dir (O_TMPFILE, mode 0600: no name to open, removed
// with its last descriptor): its memory is page cache, which the kernel
// writes back and drops when memory is short, rather than the process's
// anonymous memory. For an index whose rows do not fit in memory; slower
// to fill than newArena's (no huge pages). dir must be checked by ownDir.
func newFileArena[T any](owner *T, dir string) (*arena, error) {
	fd, err := unix.Open(dir, unix.O_RDWR|unix.O_TMPFILE|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("a file for the index's rows in %s: %w", dir, err)
	}
	a := &arena{file: os.NewFile(uintptr(fd), filepath.Join(dir, "(index rows)"))}
	runtime.AddCleanup(owner, func(a *arena) { a.release() }, a)
	return a, nil
}

// arenaRegion is the size of one mapping: a few chunks of every column.
const arenaRegion = 32 << 20

// newArena returns an arena whose mappings are released when owner is
// collected. Nothing may use the arena's memory after that: its chunks are
// reached only through owner.
func newArena[T any](owner *T) *arena {
	a := &arena{}
	runtime.AddCleanup(owner, func(a *arena) { a.release() }, a)
	return a
}

// chunk returns n bytes aligned to 8, zeroed, or nil when no memory could
// be mapped.
func (a *arena) chunk(n int) []byte {
	if a == nil {
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	n = (n + 7) &^ 7
	if len(a.free) < n {
		size := max(arenaRegion, n)
		var mem []byte
		var err error
		if a.file != nil {
			mem, err = a.fileRegion(size)
		} else {
			mem, err = syscall.Mmap(-1, 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANONYMOUS)
		}
		if err != nil {
			return nil
		}
		// Advice only: without huge pages the memory works as well.
		_ = syscall.Madvise(mem, madvHugepage)
		a.regions = append(a.regions, mem)
		a.free = mem
	}
	b := a.free[:n:n]
	a.free = a.free[n:]
	return b
}

// madvHugepage is MADV_HUGEPAGE (not in package syscall).
const madvHugepage = 14

// fileRegion grows a's file by size bytes (zeros) and maps them shared.
// The blocks are allocated first (fallocate, not a sparse truncate): a
// full disk is then an error here, which leaves the chunk to the Go heap,
// rather than a SIGBUS when a page is written.
func (a *arena) fileRegion(size int) ([]byte, error) {
	if err := unix.Fallocate(int(a.file.Fd()), 0, a.size, int64(size)); err != nil {
		return nil, err
	}
	mem, err := syscall.Mmap(int(a.file.Fd()), a.size, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return nil, err
	}
	a.size += int64(size)
	return mem, nil
}

func (a *arena) release() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, r := range a.regions {
		syscall.Munmap(r)
	}
	a.regions, a.free = nil, nil
	if a.file != nil {
		a.file.Close()
		a.file = nil
	}
}

// newChunk returns a chunk of chunkLen Ts from a, or from the Go heap. T
// must hold no pointers: the collector does not see the arena's memory.
func newChunk[T any](a *arena) []T {
	var t T
	if b := a.chunk(chunkLen * int(unsafe.Sizeof(t))); b != nil {
		return unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(b))), chunkLen)
	}
	return make([]T, chunkLen)
}
