package tracefile

import (
	"fmt"
	"os"

	"github.com/heapscope/heapscope/internal/safefile"
)

// ErrUnsafePath is wrapped (with errs.ErrAccessDenied) by the error of a
// Create whose path names a symbolic link or a file of another user, and
// Options.Replace is not set. Something other than a regular file is never
// replaced.
var ErrUnsafePath = safefile.ErrUnsafePath

// A trace file is never written through an existing name: it is made afresh
// by package safefile (mode 0600: it holds command lines and addresses), as
// an unnamed file in its folder or under a temporary name there, then
// renamed over the path. rename replaces a symbolic link, never follows it,
// and leaves the inode a planted file had (and anyone's descriptor or hard
// link to it) untouched. Until the rename the path is not touched at all,
// so a session that fails to start (Options.Hold) neither creates nor
// removes anything, even if heapscope is killed.

// pendingFile is a trace file made new, until commit gives it its name.
type pendingFile struct {
	f    *os.File // named path, for messages
	sf   *safefile.File
	path string
	done bool // committed
}

// createPending makes a new, empty file to become path (see
// safefile.Create).
func createPending(path string, replace bool) (*pendingFile, error) {
	sf, err := safefile.Create(path, replace)
	if err != nil {
		return nil, fmt.Errorf("tracefile: %w", err)
	}
	return &pendingFile{f: sf.File, sf: sf, path: path}, nil
}

// named reports whether the file has its name.
func (p *pendingFile) named() bool { return p.done }

// commit gives the file its name, replacing what was there.
func (p *pendingFile) commit() error {
	if p.done {
		return nil
	}
	if err := p.sf.Commit(); err != nil {
		return fmt.Errorf("tracefile: %w", err)
	}
	p.done = true
	return nil
}

// discard removes a file never committed.
func (p *pendingFile) discard() {
	if !p.done {
		p.sf.Discard()
	}
}
