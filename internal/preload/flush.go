//go:build linux && amd64

// Flush requests and the Stats records.

package preload

import (
	"time"

	"github.com/heapscope/heapscope/event"
)

// flushReq is a Flush in progress: the heads it waits for.
type flushReq struct {
	done     chan error
	targets  map[*ring]uint64
	deadline time.Time
}

func (c *Collector) forgetFlushTarget(r *ring) {
	for _, f := range c.flushes {
		delete(f.targets, r)
	}
}

// serviceFlushes completes the flushes whose rings are drained to the heads
// they saw; one still waiting after flushPatience forces its processes out.
func (c *Collector) serviceFlushes() {
	kept := c.flushes[:0]
	for _, f := range c.flushes {
		done := true
		for r, h := range f.targets {
			if !r.broken && r.pos < h {
				done = false
				break
			}
		}
		if !done && time.Now().After(f.deadline) {
			for _, p := range c.procs {
				if p.older == nil {
					c.drain(p, true)
				}
			}
			done = true
		}
		if done {
			f.done <- c.sinkErr
			continue
		}
		kept = append(kept, f)
	}
	c.flushes = kept
}

// maybeStats sends a Stats record once a second when anything changed, and
// keeps Stats() current.
func (c *Collector) maybeStats(final bool) {
	s := event.Stats{Delivered: c.delivered}
	s.Lost[event.LostBufferFull] = c.lost
	s.Lost[event.LostOther] = c.broken
	s.Time = monoNow()
	c.statsMu.Lock()
	c.stats = s
	c.statsMu.Unlock()
	changed := s.Delivered != c.lastStats.Delivered || s.Lost != c.lastStats.Lost
	if final || (changed && time.Since(c.statsAt) >= statsInterval) {
		c.statsAt = time.Now()
		c.lastStats = s
		c.sinkCall(c.sink.Stats(s))
	}
}
