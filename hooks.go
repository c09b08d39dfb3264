package heapscope

import "github.com/heapscope/heapscope/event"

// Call is one call to an allocation function, as a hook receives it.
type Call struct {
	event.Event
	// Frames is the call stack, innermost first, as return addresses; nil
	// when no stack was taken for this kind of event.
	Frames []uint64
	// Unmatched is set on a free (or the old block of a realloc) of an
	// address the session never saw allocated since hooks were installed:
	// normal for blocks allocated before tracing began, and counted in
	// Stats.Unmatched, never an error.
	Unmatched bool
}

// Hooks receive every event of a session live. A nil field means no hook
// for that kind.
// The *Call is only valid during the call. A hook must not call SetHooks or
// Stop of its own session.
type Hooks struct {
	OnAlloc   func(*Call) // allocations, and mmap when traced
	OnRealloc func(*Call)
	OnFree    func(*Call) // frees, and munmap when traced
	// OnWarning receives each warning the session has for its user (a
	// traced program's allocator it cannot see, an exec it cannot follow),
	// as it arises; each is kept in the trace too. The traced program's
	// own streams are never written to: a front end prints these.
	OnWarning func(event.Warning)
}
