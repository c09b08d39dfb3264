package tracefile

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/heapscope/heapscope/internal/errs"
)

// ErrUnsafePath is wrapped (with errs.ErrAccessDenied) by the error of a
// Create whose path names a symbolic link, something other than a regular
// file, or a file of another user, and Options.Replace is not set.
var ErrUnsafePath = errors.New("not replaced without being told to")

// A trace file is never written through an existing name: it is made afresh
// (O_CREAT|O_EXCL|O_NOFOLLOW, mode 0600: it holds command lines and
// addresses) under a temporary name in its folder, then renamed over the
// path. rename replaces a symbolic link, never follows it, and leaves the
// inode a planted file had (and anyone's descriptor or hard link to it)
// untouched. Until the rename the path is not touched at all, so a session
// that fails to start (Options.Hold) neither creates nor removes anything.

// checkTarget refuses a path that names something a trace should not
// replace unasked: a symbolic link, a file of another user (root's trace
// would go into a planted file, or replace a file its owner keeps), or
// something other than a regular file, which is never replaced.
func checkTarget(path string, replace bool) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("tracefile: %w", err)
	}
	var what string
	st, _ := fi.Sys().(*syscall.Stat_t)
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		what = "a symbolic link"
	case !fi.Mode().IsRegular():
		return fmt.Errorf("tracefile: %s exists and is not a regular file (%v): %w", path, fi.Mode().Type(), errs.ErrAccessDenied)
	case st != nil && int(st.Uid) != os.Geteuid():
		what = fmt.Sprintf("a file of uid %d", st.Uid)
	default:
		return nil
	}
	if replace {
		return nil
	}
	return fmt.Errorf("tracefile: %s is %s: %w: %w", path, what, ErrUnsafePath, errs.ErrAccessDenied)
}

// pendingFile is a trace file made under a temporary name, until commit
// gives it its own.
type pendingFile struct {
	f    *os.File // named path, for messages
	tmp  string   // where it is until committed
	path string
}

// createPending makes a new, empty file to become path, after checking path
// with checkTarget.
func createPending(path string, replace bool) (*pendingFile, error) {
	if err := checkTarget(path, replace); err != nil {
		return nil, err
	}
	dir, base := filepath.Split(path)
	if len(base) > 200 {
		base = base[:200] // leave room for the suffix within NAME_MAX
	}
	for range 100 {
		var r [8]byte
		rand.Read(r[:])
		tmp := filepath.Join(dir, "."+base+".tmp-"+hex.EncodeToString(r[:]))
		fd, err := unix.Open(tmp, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if errors.Is(err, unix.EEXIST) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("tracefile: creating %s: %w", path, &fs.PathError{Op: "open", Path: tmp, Err: err})
		}
		return &pendingFile{f: os.NewFile(uintptr(fd), path), tmp: tmp, path: path}, nil
	}
	return nil, fmt.Errorf("tracefile: creating %s: no free temporary name: %w", path, fs.ErrExist)
}

// commit gives the file its name, replacing what was there.
func (p *pendingFile) commit() error {
	if p.tmp == "" {
		return nil
	}
	if err := os.Rename(p.tmp, p.path); err != nil {
		return fmt.Errorf("tracefile: %w", err)
	}
	p.tmp = ""
	return nil
}

// discard removes a file never committed.
func (p *pendingFile) discard() {
	if p.tmp != "" {
		os.Remove(p.tmp)
		p.tmp = ""
	}
}
