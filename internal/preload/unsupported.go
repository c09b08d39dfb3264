//go:build !(linux && amd64)

package preload

import (
	"fmt"
	"os/exec"

	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/internal/errs"
)

// A Collector is one preload session. The interposer is built for
// linux/amd64 only; elsewhere New fails with errs.ErrUnavailable.
type Collector struct{}

var errPlatform = fmt.Errorf("preload: only linux/amd64 is supported: %w", errs.ErrUnavailable)

// New fails: the preload provider is unavailable on this platform.
func New(cfg Config, sink event.Sink) (*Collector, error) { return nil, errPlatform }

// LibraryPath fails: the preload provider is unavailable on this platform.
func LibraryPath() (string, error) { return "", errPlatform }

// Library returns "".
func (c *Collector) Library() string { return "" }

// Prepare fails.
func (c *Collector) Prepare(cmd *exec.Cmd) error { return errPlatform }

// Exited does nothing.
func (c *Collector) Exited(pid int, status, signal int) {}

// Live returns 0.
func (c *Collector) Live() int { return 0 }

// SetStacks fails.
func (c *Collector) SetStacks(event.KindSet) error { return errPlatform }

// Stacks returns 0.
func (c *Collector) Stacks() event.KindSet { return 0 }

// Flush fails.
func (c *Collector) Flush() error { return errPlatform }

// Stats returns zero stats.
func (c *Collector) Stats() event.Stats { return event.Stats{} }

// Close does nothing.
func (c *Collector) Close() error { return nil }
