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
	// ErrProtocol: a session answered in another ControlProtocol than
	// this program's: another version of heapscope runs it.
	ErrProtocol = errors.New("session speaks another control protocol")
)
