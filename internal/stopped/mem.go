package stopped

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/heapscope/heapscope/internal/errs"
	"github.com/heapscope/heapscope/internal/proc"
)

// FaultError is memory that cannot be read: not mapped, mapped without read
// permission (PROT_NONE and the like), or mapped but failing to read (a
// file mapping past its file's end, a device). Test for it with errors.As.
type FaultError struct {
	Addr    uint64        // the first byte that could not be read
	Mapping *proc.Mapping // the mapping that holds Addr; nil when none does
	Err     error         // the system's error, when the read itself failed
}

func (e *FaultError) Error() string {
	switch {
	case e.Mapping == nil:
		return fmt.Sprintf("memory at %#x is not mapped", e.Addr)
	case !readable(*e.Mapping):
		return fmt.Sprintf("memory at %#x is not readable (mapping %#x-%#x %s %s)", e.Addr, e.Mapping.Start, e.Mapping.End, e.Mapping.Perms, e.Mapping.Path)
	}
	return fmt.Sprintf("reading memory at %#x (mapping %#x-%#x %s %s): %v", e.Addr, e.Mapping.Start, e.Mapping.End, e.Mapping.Perms, e.Mapping.Path, e.Err)
}

func (e *FaultError) Unwrap() error { return e.Err }

func readable(m proc.Mapping) bool { return len(m.Perms) > 0 && m.Perms[0] == 'r' }

// ReadAt reads len(b) bytes of the process's memory at address off, as
// io.ReaderAt does: fewer bytes come with an error, a *FaultError when the
// memory at off+n cannot be read. Reads go through process_vm_readv, or
// /proc/PID/mem where the kernel lacks it; the mappings read at the stop
// decide what is readable first, so that neither reads what the process
// itself could not. It is safe for concurrent use, and fails with
// ErrResumed once the process runs again.
func (p *Process) ReadAt(b []byte, off int64) (int, error) {
	if off < 0 {
		return 0, &FaultError{Addr: uint64(off)}
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.resumed {
		return 0, p.resumedErr()
	}
	addr := uint64(off)
	want, fault := p.readableSpan(addr, uint64(len(b)))
	n, err := p.mem.read(b[:want], addr)
	if err != nil {
		if errors.Is(err, unix.EFAULT) || errors.Is(err, unix.EIO) {
			return n, &FaultError{Addr: addr + uint64(n), Mapping: p.mapping(addr + uint64(n)), Err: err}
		}
		return n, err
	}
	if fault != nil {
		return n, fault
	}
	return n, nil
}

// readableSpan returns how many of the size bytes at addr lie in readable
// mappings, contiguous from addr, and the error for the first byte past
// them (nil when all are).
func (p *Process) readableSpan(addr, size uint64) (uint64, error) {
	end := addr + size
	if end < addr {
		end = ^uint64(0)
	}
	i := mapIndex(p.maps, addr)
	at := addr
	for at < end {
		if i >= len(p.maps) || p.maps[i].Start > at {
			return at - addr, &FaultError{Addr: at}
		}
		m := p.maps[i]
		if !readable(m) {
			return at - addr, &FaultError{Addr: at, Mapping: &m}
		}
		at = min(m.End, end)
		i++
	}
	return size, nil
}

// mapIndex returns the index of the first mapping that ends after addr.
func mapIndex(maps []proc.Mapping, addr uint64) int {
	lo, hi := 0, len(maps)
	for lo < hi {
		h := int(uint(lo+hi) >> 1)
		if maps[h].End <= addr {
			lo = h + 1
		} else {
			hi = h
		}
	}
	return lo
}

// mapping returns a copy of the mapping that holds addr, or nil.
func (p *Process) mapping(addr uint64) *proc.Mapping {
	i := mapIndex(p.maps, addr)
	if i < len(p.maps) && p.maps[i].Start <= addr {
		m := p.maps[i]
		return &m
	}
	return nil
}

// memReader reads another process's memory.
type memReader struct {
	pid int

	mu    sync.Mutex
	noVM  bool     // process_vm_readv is unavailable: use /proc/PID/mem
	file  *os.File // /proc/PID/mem, opened on first use
	fails bool     // the file cannot be opened
}

// read reads len(b) bytes at addr, all of them or up to the first that
// fails (the error then says why).
func (r *memReader) read(b []byte, addr uint64) (int, error) {
	r.mu.Lock()
	noVM := r.noVM
	r.mu.Unlock()
	done := 0
	for done < len(b) && !noVM {
		local := []unix.Iovec{{Base: &b[done]}}
		local[0].SetLen(len(b) - done)
		remote := []unix.RemoteIovec{{Base: uintptr(addr) + uintptr(done), Len: len(b) - done}}
		n, err := unix.ProcessVMReadv(r.pid, local, remote, 0)
		switch {
		case errors.Is(err, unix.ENOSYS) || (errors.Is(err, unix.EPERM) && done == 0):
			r.mu.Lock()
			r.noVM = true
			r.mu.Unlock()
			noVM = true
			continue
		case errors.Is(err, unix.ESRCH):
			return done, fmt.Errorf("pid %d: %w", r.pid, errs.ErrNoSuchProcess)
		case errors.Is(err, unix.EINTR):
			continue
		case err != nil:
			return done, err
		case n == 0:
			return done, unix.EFAULT
		}
		done += n
	}
	if done == len(b) {
		return done, nil
	}
	return r.readFile(b, addr, done)
}

// readFile reads the rest of b, from done on, through /proc/PID/mem.
func (r *memReader) readFile(b []byte, addr uint64, done int) (int, error) {
	r.mu.Lock()
	if r.file == nil && !r.fails {
		f, err := os.OpenFile("/proc/"+strconv.Itoa(r.pid)+"/mem", os.O_RDONLY, 0)
		if err != nil {
			r.fails = true
			r.mu.Unlock()
			if errors.Is(err, os.ErrNotExist) {
				return done, fmt.Errorf("pid %d: %w", r.pid, errs.ErrNoSuchProcess)
			}
			return done, fmt.Errorf("pid %d: %w: %v", r.pid, errs.ErrAccessDenied, err)
		}
		r.file = f
	}
	f := r.file
	r.mu.Unlock()
	if f == nil {
		return done, fmt.Errorf("pid %d: /proc/PID/mem cannot be opened: %w", r.pid, errs.ErrAccessDenied)
	}
	for done < len(b) {
		// Addresses past 2^63 do not fit an offset: they are kernel
		// addresses, which a process cannot read either.
		off := addr + uint64(done)
		if off > 1<<63-1 {
			return done, unix.EFAULT
		}
		n, err := unix.Pread(int(f.Fd()), b[done:], int64(off))
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return done, err
		}
		if n == 0 {
			return done, unix.EIO
		}
		done += n
	}
	return done, nil
}

func (r *memReader) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.file != nil {
		r.file.Close()
		r.file = nil
	}
	r.fails = true
}
