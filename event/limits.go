package event

import (
	"fmt"
	"time"
)

// The limits every part of heapscope shares: the session's properties, the
// providers, the trace file and the analysis side check against these, and
// the C and BPF sides define the same numbers (internal/preload's and
// internal/ebpf's tests check their headers against them).
const (
	// MaxFrames is the deepest stack recorded: the kernel's
	// perf_event_max_stack default, and the interposer's too.
	MaxFrames = 127
	// MaxSample is the largest sampling size in bytes: one sample per TiB
	// allocated (the BPF draw multiplies it by a number below 2^21 in 64
	// bits).
	MaxSample = 1 << 40
	// DefaultFlushInterval bounds how long a captured event waits before
	// it reaches the file and the hooks, unless a session says otherwise.
	DefaultFlushInterval = time.Second
)

// StackKinds are the kinds a stack may be taken for, with NoStacks: what
// a configuration's stack set may hold.
const StackKinds = NoStacks | AllKinds

// CheckStacks returns an error wrapping ErrInvalidFlags when s holds
// anything but the kinds of StackKinds.
func CheckStacks(s KindSet) error {
	if s&^StackKinds != 0 {
		return fmt.Errorf("unknown kinds %#x in stack set %#x: %w", uint8(s&^StackKinds), uint8(s), ErrInvalidFlags)
	}
	return nil
}
