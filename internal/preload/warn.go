//go:build linux && amd64

// Warnings: what heapscope has to tell its user about a traced process.

package preload

import (
	"debug/elf"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/heapscope/heapscope/event"
)

// The codes of the collector's warnings (event.Warning.Code).
const (
	// WarnAllocatorUnseen: the executable has an allocator of its own
	// that the interposer does not see (FindPrivateAllocator).
	WarnAllocatorUnseen = "allocator-unseen"
	// WarnDeepbind: the program opened a library with RTLD_DEEPBIND; the
	// flag was dropped so that the library's allocations are traced.
	WarnDeepbind = "deepbind-dropped"
	// WarnSetID: a traced process exec'd a set-user-ID or set-group-ID
	// program (or one with file capabilities), which the dynamic loader
	// runs without LD_PRELOAD: it is not traced.
	WarnSetID = "setid-untraced"
)

// warn is the one way the collector says something to the user about the
// image p (nil: the session): it hands the warning to Config.OnWarning
// (heapscope prints it on its own output, never on the traced program's)
// and keeps it in the trace, as an event.Warning note after p's Process
// record. It runs in the pump.
func (c *Collector) warn(p *proc, code, text string) {
	w := event.Warning{Time: monoNow(), Code: code, Text: text}
	if p != nil {
		w.PID, w.Time = p.pid, max(w.Time, p.lastTime)
	}
	if c.cfg.OnWarning != nil {
		c.cfg.OnWarning(w)
	}
	if p != nil && !p.started {
		p.notes = append(p.notes, w)
		return
	}
	c.flushBatch()
	c.sinkCall(c.sink.Note(w))
}

const setIDText = "which is set-user-ID, set-group-ID or has file capabilities: the dynamic loader ignores LD_PRELOAD for it, and it is not traced (trace it with --provider ebpf)"

// note acts on a NOTE message of image p (code, the process it is about,
// a path). The path is the traced process's word: it is quoted, never
// opened. An exec is said once the image's connections close (when the exec
// happened), unless the image said it failed first.
func (c *Collector) note(p *proc, code, pid uint32, path string) {
	switch code {
	case noteDeepbind:
		c.warn(p, WarnDeepbind, "dlopen with RTLD_DEEPBIND: the flag was dropped so that the library's allocations are traced")
	case noteSetidExec:
		if pid != p.pid { // a vfork child: its exec follows at once
			c.warn(p, WarnSetID, fmt.Sprintf("its child %d exec'd %q, %s", pid, path, setIDText))
			return
		}
		p.execNote = fmt.Sprintf("exec'd %q, %s", path, setIDText)
	case noteExecFailed:
		if pid == p.pid {
			p.execNote = ""
		}
	case noteSetidSpawn:
		c.warn(p, WarnSetID, fmt.Sprintf("spawned %q (pid %d), %s", path, pid, setIDText))
	}
}

// privateCache remembers FindPrivateAllocator's answers by file identity:
// a build runs the same compiler thousands of times.
var privateCache struct {
	sync.Mutex
	m map[fileID]*PrivateAllocator // nil: none
}

type fileID struct {
	dev, ino   uint64
	size, time int64
}

// privateAllocatorOf reads the executable process pid runs (through
// /proc/PID/exe: never a path the process names, which could be a FIFO or
// a device) for an allocator the interposer does not see; nil if none or
// unreadable.
func privateAllocatorOf(pid uint32) *PrivateAllocator {
	f, err := os.OpenFile("/proc/"+strconv.FormatUint(uint64(pid), 10)+"/exe", os.O_RDONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil
	}
	defer f.Close()
	var st unix.Stat_t
	if unix.Fstat(int(f.Fd()), &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil
	}
	id := fileID{st.Dev, st.Ino, st.Size, st.Mtim.Nano()}
	privateCache.Lock()
	a, ok := privateCache.m[id]
	privateCache.Unlock()
	if ok {
		return a
	}
	ef, err := elf.NewFile(f)
	if err == nil {
		if found, yes := privateAllocator(ef); yes {
			a = &found
		}
		ef.Close()
	}
	privateCache.Lock()
	if privateCache.m == nil || len(privateCache.m) > 4096 {
		privateCache.m = map[fileID]*PrivateAllocator{}
	}
	privateCache.m[id] = a
	privateCache.Unlock()
	return a
}

// progName is how a warning names the program of p: its argv[0], else its
// executable's base name.
func progName(p *proc) string {
	if len(p.argv) > 0 && p.argv[0] != "" {
		return p.argv[0]
	}
	return filepath.Base(p.exe)
}
