package heapscope

import (
	"time"
)

// UnwindStatus is what a session's unwind tables (Unwind Tables or DWARF,
// built from each file's .eh_frame by package unwind) cost so far.
type UnwindStatus struct {
	Files     int           `json:"files"`             // tables made: built, or read from the cache
	Bytes     int64         `json:"bytes"`             // their total size
	BuildTime time.Duration `json:"build_ns"`          // time spent making them, summed over files
	Failures  int           `json:"failures"`          // files that got no table
	Modules   []UnwindTable `json:"modules,omitempty"` // per file, where the provider keeps them (eBPF)
}

// UnwindTable is one file's unwind table.
type UnwindTable struct {
	Path      string        `json:"path"`
	Entries   int           `json:"entries"`
	Bytes     int64         `json:"bytes"`
	BuildTime time.Duration `json:"build_ns"`
	Error     string        `json:"error,omitempty"` // why it has none: it unwinds by frame pointer
}

// unwindReporter is a backend that walks stacks with unwind tables.
type unwindReporter interface {
	unwindStatus() *UnwindStatus
}

func (b *preloadBackend) unwindStatus() *UnwindStatus {
	st := b.c.TableStats()
	if st.Files == 0 && st.Failures == 0 {
		return nil
	}
	return &UnwindStatus{Files: st.Files, Bytes: st.Bytes, BuildTime: st.Time, Failures: st.Failures}
}

func (b *ebpfBackend) unwindStatus() *UnwindStatus {
	tables := b.t.UnwindTables()
	if len(tables) == 0 {
		return nil
	}
	var u UnwindStatus
	for _, t := range tables {
		m := UnwindTable{Path: t.Path, Entries: t.Entries, Bytes: int64(t.Bytes), BuildTime: t.BuildTime}
		if t.Err != nil {
			m.Error = t.Err.Error()
			u.Failures++
		} else {
			u.Files++
			u.Bytes += m.Bytes
			u.BuildTime += m.BuildTime
		}
		u.Modules = append(u.Modules, m)
	}
	return &u
}
