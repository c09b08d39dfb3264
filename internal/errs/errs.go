// Package errs holds heapscope's sentinel errors. They live here, below every
// other package but event (which defines ErrInvalidFlags for its parsers), so that providers can return them without importing the
// top-level package; package heapscope re-exports each one.
package errs

import (
	"errors"

	"github.com/heapscope/heapscope/event"
)

// The sentinel errors. Callers test them with errors.Is; the error returned
// wraps one of these with what was being done.
var (
	ErrAlreadyExists = errors.New("session name already in use")
	ErrNameTooLong   = errors.New("session name too long")
	ErrInvalidFlags  = event.ErrInvalidFlags // defined in event, whose parsers wrap it
	ErrOutOfMemory   = errors.New("cannot allocate trace buffers")
	ErrAccessDenied  = errors.New("access denied")
	ErrNoSuchProcess = errors.New("no such process")
	ErrNotRunning    = errors.New("no such session")
	ErrUnavailable   = errors.New("provider unavailable")
	ErrCannotStop    = errors.New("cannot stop process")
	ErrNotSupported  = errors.New("allocator not supported")
	ErrNoLayout      = errors.New("allocator layout cannot be confirmed")
)
