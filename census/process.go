package census

import (
	"fmt"

	"github.com/heapscope/heapscope/internal/proc"
	"github.com/heapscope/heapscope/internal/stopped"
)

// ProcessOptions tune TakeProcess.
type ProcessOptions struct {
	Options                     // how libc's debug information is found
	TakeOptions                 // what is read besides the heap
	Stop        stopped.Options // how long the stop may take
}

// TakeProcess takes the census of a running process: it finds its libc and
// the layout of its malloc (Open) while the process runs, stops every
// thread (internal/stopped), reads the heap (Take) and lets it run again,
// on every path. The census's Paused is how long it was stopped.
func TakeProcess(pid int, o ProcessOptions) (*Census, error) {
	maps, err := proc.ReadMaps(pid)
	if err != nil {
		return nil, fmt.Errorf("census: %w", err)
	}
	l, err := Open(pid, maps, o.Options)
	if err != nil {
		return nil, err
	}
	p, err := stopped.Stop(pid, o.Stop)
	if err != nil {
		return nil, fmt.Errorf("census: %w", err)
	}
	defer p.Resume()
	t := Target{PID: pid, Mem: p, Maps: p.Maps()}
	if m, ok := findLibc(t.Maps); !ok || m.Path != l.Path || !sameMapping(maps, t.Maps, m) {
		return nil, fmt.Errorf("census: pid %d: its libc's mappings changed while the census started (an exec?)", pid)
	}
	for _, th := range p.Threads() {
		t.Threads = append(t.Threads, Thread{TID: th.TID, FSBase: th.FSBase()})
	}
	c, err := l.Take(t, o.TakeOptions)
	if rerr := p.Resume(); err == nil && rerr != nil {
		// MaxPause resumed it first: what was read may not be a snapshot.
		err = fmt.Errorf("census: %w", rerr)
	}
	if err != nil {
		return nil, err
	}
	c.Paused = p.Paused()
	return c, nil
}

// sameMapping reports whether mapping m, found in after, is in before too.
func sameMapping(before, after []proc.Mapping, m proc.Mapping) bool {
	for _, b := range before {
		if b.Start == m.Start && b.Path == m.Path && b.Inode == m.Inode {
			return true
		}
	}
	return false
}
