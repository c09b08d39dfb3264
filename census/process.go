package census

import (
	"fmt"
	"strings"
	"time"

	"github.com/heapscope/heapscope/internal/proc"
	"github.com/heapscope/heapscope/internal/stopped"
)

// ProcessOptions tune TakeProcess.
type ProcessOptions struct {
	Options                     // how libc's debug information is found
	TakeOptions                 // what is read besides the heap
	Stop        stopped.Options // how long a stop may take
	// Tries bounds the stops TakeProcess makes to find malloc idle
	// (DefaultTries when 0).
	Tries int
	// Idle keeps only a census taken with malloc idle (Census.Busy
	// empty), stopping again while Tries allow, where otherwise a busy
	// one whose every check holds is kept: a thread in malloc or free
	// may be between its call and the change it makes, which a tracer
	// sees on one side of the stop and the census on the other.
	Idle bool
	// Stopped, when set, is called at each stop, every thread stopped,
	// before the heap is read, with the stop's number (from 1; the
	// census's Stop says which stop it was read at): for what must see
	// the process at the census's instant, such as a tracer's buffers
	// drained of the events before it.
	Stopped func(stop int)
	// WhileStopped, when set, is called with a census that will be kept,
	// finished while the process is still stopped, and the stopped
	// process: for what must read the process at the same instant (a
	// heap scan of the census's blocks). The pause then lasts through
	// Finish and WhileStopped. A census kept after malloc was busy at
	// every stop was finished after its stop, and is not passed.
	WhileStopped func(c *Census, p *stopped.Process)
}

// DefaultTries is how many times TakeProcess stops a process whose malloc
// is busy before it takes the census as it finds it.
const DefaultTries = 20

// TakeProcess takes the census of a running process: it finds its libc and
// the layout of its malloc (Open) while the process runs, stops every
// thread (internal/stopped), reads the heap (Read), lets it run again, on
// every path, and finishes the census (Finish). When a thread stopped in malloc's code or an arena was
// locked (Census.Busy), it lets the process run a moment and stops it
// again, up to Tries times; the census says so if malloc was busy at every
// stop. The census's Paused is how long its stop lasted, Stops how many it
// took.
func TakeProcess(pid int, o ProcessOptions) (*Census, error) {
	maps, err := proc.ReadMaps(pid)
	if err != nil {
		return nil, fmt.Errorf("census: %w", err)
	}
	l, err := Open(pid, maps, o.Options)
	if err != nil {
		return nil, err
	}
	tries := o.Tries
	if tries <= 0 {
		tries = DefaultTries
	}
	// A census taken while malloc was busy is kept when every check of
	// it holds (a busy thread can be in code that changes nothing yet);
	// otherwise the process runs a moment and is stopped again, and the
	// best of the censuses is kept.
	var best *Census
	for try := 1; try <= tries; try++ {
		c, err := l.takeStopped(pid, maps, o, try)
		if err != nil {
			return nil, err
		}
		c.Stops = try
		if len(c.Busy) == 0 || !o.Idle && c.settled() {
			return c, nil
		}
		if best == nil || len(c.Problems) < len(best.Problems) {
			best = c
		}
		time.Sleep(time.Duration(try) * time.Millisecond)
	}
	best.Stops = tries
	best.problem(0, 0, "malloc was busy at each of %d stops (%s): the problems above may be chunks mid-change, not corruption",
		tries, strings.Join(best.Busy, "; "))
	return best, nil
}

// settled reports whether a census is kept as it is: malloc was idle, or
// every check held.
func (c *Census) settled() bool {
	return len(c.Busy) == 0 || len(c.Problems) == 0 && c.Omitted == 0
}

// takeStopped stops the process once (the try'th stop), reads its census,
// lets it run and finishes the census.
func (l *Libc) takeStopped(pid int, maps []proc.Mapping, o ProcessOptions, try int) (*Census, error) {
	p, err := stopped.Stop(pid, o.Stop)
	if err != nil {
		return nil, fmt.Errorf("census: %w", err)
	}
	defer p.Resume()
	t := Target{PID: pid, Mem: p, Maps: p.Maps()}
	if m, ok := findLibc(t.Maps); !ok || m.Path != l.Path || !sameMapping(maps, m) {
		return nil, fmt.Errorf("census: pid %d: its libc's mappings changed while the census started (an exec?)", pid)
	}
	for _, th := range p.Threads() {
		t.Threads = append(t.Threads, Thread{TID: th.TID, FSBase: th.FSBase(), PC: th.Regs.Rip})
	}
	if o.Stopped != nil {
		o.Stopped(try)
	}
	r, err := l.Read(t, o.TakeOptions)
	var c *Census
	if err == nil && o.WhileStopped != nil {
		if c = r.Finish(); len(c.Busy) == 0 || !o.Idle && c.settled() {
			o.WhileStopped(c, p)
		}
	}
	if rerr := p.Resume(); err == nil && rerr != nil {
		// MaxPause resumed it first: what was read may not be a snapshot.
		err = fmt.Errorf("census: %w", rerr)
	}
	if err != nil {
		return nil, err
	}
	if c == nil {
		c = r.Finish()
	}
	c.Stop = try
	c.Paused = p.Paused()
	return c, nil
}

// sameMapping reports whether mapping m is in before too.
func sameMapping(before []proc.Mapping, m proc.Mapping) bool {
	for _, b := range before {
		if b.Start == m.Start && b.Path == m.Path && b.Inode == m.Inode {
			return true
		}
	}
	return false
}
