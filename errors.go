package heapscope

import (
	"errors"

	"github.com/heapscope/heapscope/internal/errs"
)

// The errors heapscope returns wrap one of these; test them with errors.Is.
var (
	// ErrAlreadyExists: a live session already has the name. The message
	// names the owner's pid.
	ErrAlreadyExists = errs.ErrAlreadyExists
	// ErrNameTooLong: the session name is over MaxNameLen characters.
	ErrNameTooLong = errs.ErrNameTooLong
	// ErrInvalidFlags: an invalid property value or combination: a
	// *PropertyError (from Validate, Start, Launch) says which.
	ErrInvalidFlags = errs.ErrInvalidFlags
	// ErrOutOfMemory: the session's buffers cannot be had.
	ErrOutOfMemory = errs.ErrOutOfMemory
	// ErrAccessDenied: the provider needs privileges the caller lacks; the
	// message says which.
	ErrAccessDenied = errs.ErrAccessDenied
	// ErrNoSuchProcess: a PID names no running process.
	ErrNoSuchProcess = errs.ErrNoSuchProcess
	// ErrNotRunning: no live session has the name.
	ErrNotRunning = errs.ErrNotRunning
	// ErrUnavailable: the provider cannot work on this system (no eBPF
	// support, no uprobes, ...).
	ErrUnavailable = errs.ErrUnavailable
	// ErrCannotStop: a process could not be stopped to read its memory (a
	// leak scan, a census): another tracer holds it, a thread would not
	// stop, or it exec'd meanwhile. It was left running.
	ErrCannotStop = errs.ErrCannotStop
	// ErrNotSupported: the census of a heap found an allocator it cannot
	// read (jemalloc, tcmalloc, mimalloc, ...); the message names it.
	ErrNotSupported = errs.ErrNotSupported
	// ErrNoLayout: the census cannot confirm where glibc keeps its heap's
	// structures (no debug file for the libc, a statically linked or
	// stripped libc, a glibc version it does not know); the message says
	// what is missing.
	ErrNoLayout = errs.ErrNoLayout
	// ErrProtocol: a session answered in another ControlProtocol than
	// this program's: another version of heapscope runs it.
	ErrProtocol = errors.New("session speaks another control protocol")
)
