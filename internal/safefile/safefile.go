// Package safefile creates the files heapscope writes for its user (trace
// files, reports, exports) by one set of rules, since heapscope often runs
// as root in folders other users can write:
//
//   - a file is made afresh, mode 0600 whatever the umask, never opened
//     through an existing name: as an unnamed file (O_TMPFILE) in the
//     target's folder, or where the file system has none, under a new
//     temporary name (O_CREAT|O_EXCL|O_NOFOLLOW);
//   - it takes its name only when Commit says so, by rename, which replaces
//     a symbolic link rather than following it and leaves the inode a
//     planted file had (and anyone's descriptor or hard link to it)
//     untouched; until then the target is not touched at all, so a writer
//     killed midway (Ctrl-C, SIGKILL) leaves the old file or nothing;
//   - a target that is a symbolic link or another user's file is refused
//     unless the caller says to replace it; one that is not a regular file
//     is never replaced.
package safefile

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/heapscope/heapscope/internal/errs"
)

// ErrUnsafePath is wrapped (with errs.ErrAccessDenied) by the error of a
// Create whose target is a symbolic link or a file of another user, when
// replace is false.
var ErrUnsafePath = errors.New("not replaced without being told to")

// CheckTarget refuses a path that names something heapscope should not
// replace unasked: a symbolic link, a file of another user (root's output
// would replace a file its owner keeps, or one planted for root to fill),
// or something other than a regular file, which is never replaced. A
// missing path, or a regular file of the caller's, is fine.
func CheckTarget(path string, replace bool) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var what string
	st, _ := fi.Sys().(*syscall.Stat_t)
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		what = "a symbolic link"
	case !fi.Mode().IsRegular():
		return fmt.Errorf("%s exists and is not a regular file (%v): %w", path, fi.Mode().Type(), errs.ErrAccessDenied)
	case st != nil && int(st.Uid) != os.Geteuid():
		what = fmt.Sprintf("a file of uid %d", st.Uid)
	default:
		return nil
	}
	if replace {
		return nil
	}
	return fmt.Errorf("%s is %s: %w: %w", path, what, ErrUnsafePath, errs.ErrAccessDenied)
}

// File is a new file that becomes its path at Commit. Its name (Name) is
// the path, for messages; until Commit it has none on disk, or a temporary
// one.
type File struct {
	*os.File
	path string
	tmp  string // the temporary name, when not an unnamed file
	done bool   // committed or discarded
	err  error  // why Commit failed: the file cannot be named any more
}

// Create makes a new, empty file to become path, after CheckTarget(path,
// replace). It is open for reading and writing.
func Create(path string, replace bool) (*File, error) {
	if err := CheckTarget(path, replace); err != nil {
		return nil, err
	}
	dir := filepath.Dir(path)
	fd, err := unix.Open(dir, unix.O_RDWR|unix.O_TMPFILE|unix.O_CLOEXEC, 0o600)
	if err == nil && noTmpfile {
		unix.Close(fd)
		err = unix.EOPNOTSUPP
	}
	if err == nil {
		// The mode is given whatever the umask: a umask of 0 would
		// otherwise still give 0600, but one that clears the owner's bits
		// would not.
		unix.Fchmod(fd, 0o600)
		return &File{File: os.NewFile(uintptr(fd), path), path: path}, nil
	}
	// No unnamed files here (some file systems): a temporary name.
	for range 100 {
		tmp := tempName(path)
		fd, err := unix.Open(tmp, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if errors.Is(err, unix.EEXIST) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("creating %s: %w", path, &fs.PathError{Op: "open", Path: tmp, Err: err})
		}
		unix.Fchmod(fd, 0o600)
		return &File{File: os.NewFile(uintptr(fd), path), path: path, tmp: tmp}, nil
	}
	return nil, fmt.Errorf("creating %s: no free temporary name: %w", path, fs.ErrExist)
}

// noTmpfile makes Create use a temporary name, as on a file system without
// unnamed files (for tests).
var noTmpfile bool

// tempName is a new name beside path: ".NAME.tmp-" and 16 hex digits.
func tempName(path string) string {
	dir, base := filepath.Split(path)
	if len(base) > 200 {
		base = base[:200] // leave room for the suffix within NAME_MAX
	}
	var r [8]byte
	rand.Read(r[:])
	return filepath.Join(dir, "."+base+".tmp-"+hex.EncodeToString(r[:]))
}

// Commit gives the file its path, replacing what was there (a symbolic
// link is replaced, never followed). The file stays open. Committing twice
// does nothing; once Commit has failed, it fails again.
func (f *File) Commit() error {
	if f.err != nil || f.done {
		return f.err
	}
	if f.tmp == "" {
		// An unnamed file gets a temporary name first (linkat cannot
		// replace a name), then the path by rename, which can.
		tmp, err := f.link()
		if err != nil {
			f.err = fmt.Errorf("naming %s: %w", f.path, err)
			return f.err
		}
		f.tmp = tmp
	}
	if err := os.Rename(f.tmp, f.path); err != nil {
		os.Remove(f.tmp)
		f.tmp, f.done, f.err = "", true, err
		return err
	}
	f.tmp, f.done = "", true
	return nil
}

// link names the unnamed file under a new temporary name beside its path.
func (f *File) link() (string, error) {
	fd := int(f.Fd())
	for range 100 {
		tmp := tempName(f.path)
		// By its descriptor's name in /proc, which linkat follows to the
		// unnamed file; linking the descriptor itself (AT_EMPTY_PATH)
		// needs CAP_DAC_READ_SEARCH, so it comes second.
		err := unix.Linkat(unix.AT_FDCWD, "/proc/self/fd/"+strconv.Itoa(fd), unix.AT_FDCWD, tmp, unix.AT_SYMLINK_FOLLOW)
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.EPERM) {
			err = unix.Linkat(fd, "", unix.AT_FDCWD, tmp, unix.AT_EMPTY_PATH)
		}
		if errors.Is(err, unix.EEXIST) {
			continue
		}
		if err != nil {
			return "", &fs.PathError{Op: "link", Path: tmp, Err: err}
		}
		return tmp, nil
	}
	return "", fmt.Errorf("no free temporary name: %w", fs.ErrExist)
}

// Discard removes a file never committed (an unnamed one needs nothing);
// the file stays open. After Commit it does nothing.
func (f *File) Discard() {
	if f.done {
		return
	}
	if f.tmp != "" {
		os.Remove(f.tmp)
		f.tmp = ""
	}
	f.done = true
}

// Write makes path of what write writes: a new file (Create), flushed to
// disk and committed only once write and the close succeed, so that an
// error, an interrupt or a kill midway leaves what path held before.
func Write(path string, replace bool, write func(io.Writer) error) error {
	f, err := Create(path, replace)
	if err != nil {
		return err
	}
	err = write(f)
	if err == nil {
		err = f.Sync()
	}
	if err == nil {
		err = f.Commit()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	f.Discard()
	return err
}
