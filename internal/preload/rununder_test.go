package preload

import (
	"os/exec"
	"testing"

	"github.com/heapscope/heapscope/event"
)

// runUnder runs cmd to its end under a new Collector of cfg that hands its
// events to sink, reports the exit and closes the collector, failing the
// test on any error; it returns the closed collector, for its Stats.
func runUnder(t testing.TB, cfg Config, sink event.Sink, cmd *exec.Cmd) *Collector {
	t.Helper()
	c, err := New(cfg, sink)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Prepare(cmd); err != nil {
		c.Close()
		t.Fatal(err)
	}
	if err := cmd.Run(); err != nil {
		c.Close()
		t.Fatal(err)
	}
	reportExit(c, cmd)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	return c
}
