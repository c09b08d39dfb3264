package tracefile

import (
	"errors"
	"fmt"
)

// The errors a Reader returns wrap one of these; test them with errors.Is.
var (
	// ErrCorrupt means the file is not a heapscope trace, or holds bytes that
	// contradict the format.
	ErrCorrupt = errors.New("corrupt trace file")
	// ErrTruncated means the file ends before its header does. (A file cut
	// after its header is not an error: the reader recovers every complete
	// chunk and says what was lost in Warnings.)
	ErrTruncated = errors.New("truncated trace file")
	// ErrClosed is returned by the methods of a closed Writer or Reader.
	ErrClosed = errors.New("trace file closed")
)

// FormatError says where a file departs from the format and what was
// expected there. It wraps ErrCorrupt or ErrTruncated.
type FormatError struct {
	Path     string
	Offset   int64  // byte offset in the file
	Where    string // within what, e.g. "chunk 3 timeline, addresses stream byte 812"; may be empty
	Expected string
	Err      error // ErrCorrupt or ErrTruncated
}

func (e *FormatError) Error() string {
	where := ""
	if e.Where != "" {
		where = " (" + e.Where + ")"
	}
	return fmt.Sprintf("%s: %v at byte %d%s: expected %s", e.Path, e.Err, e.Offset, where, e.Expected)
}

func (e *FormatError) Unwrap() error { return e.Err }
