//go:build linux && amd64

package preload

import (
	"fmt"
	"time"

	"github.com/heapscope/heapscope/internal/errs"
)

// FlushProcess delivers to the sink every event that process pid, which
// the caller has stopped (every thread of it: a heap scan holds it),
// published before the call, and returns once they are in. Unlike Flush it
// does not wait for a thread that was stopped in the middle of writing a
// record (a stopped thread finishes none): that record comes after the
// process runs again, behind records of its other threads with later
// times.
func (c *Collector) FlushProcess(pid int) error {
	c.settle(uint32(pid), settleMax)
	done := make(chan error, 1)
	if !c.enqueue(request{kind: reqFlushProcess, pid: uint32(pid), done: done}) {
		return fmt.Errorf("preload: collector closed: %w", errs.ErrNotRunning)
	}
	return <-done
}

// settleMax bounds FlushProcess's wait for the messages the process sent
// before it stopped (see settle).
const settleMax = 5 * time.Second

// flushProcess drains every image of the request's process, older ones
// first, up to what they published.
func (c *Collector) flushProcess(r *request) {
	for _, p := range c.procs {
		if p.pid == r.pid {
			c.drain(p, true)
		}
	}
	r.done <- c.sinkErr
}
