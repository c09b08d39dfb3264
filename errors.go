package heapscope

import "github.com/heapscope/heapscope/internal/errs"

// The errors heapscope returns wrap one of these; test them with errors.Is.
// They mirror the seeds' error codes.
var (
	// ErrAlreadyExists: a live session already has the name (ETW's
	// ERROR_ALREADY_EXISTS). The message names the owner's pid.
	ErrAlreadyExists = errs.ErrAlreadyExists
	// ErrNameTooLong: the session name is over 1024 characters.
	ErrNameTooLong = errs.ErrNameTooLong
	// ErrInvalidFlags: an invalid property value or combination (ETW's
	// ERROR_INVALID_FLAGS). The message says which.
	ErrInvalidFlags = errs.ErrInvalidFlags
	// ErrOutOfMemory: the session's buffers cannot be had (ETW's
	// ERROR_OUT_OF_MEMORY).
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
)
