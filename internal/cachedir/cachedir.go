// Package cachedir keeps heapscope's cache folders (serve's index files,
// the unwind tables) within bounds, by one set of rules: the least
// recently used files go first until the rest fit a limit, temporary
// files a killed writer left are swept, and nothing is removed but a
// regular file of the caller's whose name says it is the cache's, directly
// in a folder of the caller's that others cannot write, never through a
// symbolic link.
package cachedir

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// ErrUntrusted is wrapped by the error of a folder that is not the
// caller's, or that others can write.
var ErrUntrusted = errors.New("not a folder of this user's, or writable by others")

// Names says which files of a folder are the cache's.
type Names struct {
	File *regexp.Regexp // a cache file
	Temp *regexp.Regexp // a file being written, or one a killed writer left
}

// StaleTemp is the age past which a temporary file is taken for one a
// killed writer left: a cache file is written in seconds.
const StaleTemp = time.Hour

// Trim removes cache files from dir, least recently used first (by
// modification time: a reader renews it with Touch), until those left hold
// at most limit bytes, but never keep, the file just written; and removes
// temporary files older than StaleTemp. A limit below 0 is the default:
// def, or a quarter of the file system's free space (counting the cache
// files as free) when that is less, so that the cache gives way on a
// filling disk.
func Trim(dir string, n Names, keep string, limit, def int64) error {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("trimming the cache %s: %w", dir, err)
	}
	d := os.NewFile(uintptr(fd), dir)
	defer d.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	if int(st.Uid) != os.Geteuid() || st.Mode&0o022 != 0 {
		return fmt.Errorf("%s: %w", dir, ErrUntrusted)
	}
	names, err := d.Readdirnames(-1)
	if err != nil {
		return err
	}
	type file struct {
		name  string
		size  int64
		mtime time.Time
	}
	var files []file
	var total int64
	var errs []error
	remove := func(name string) bool {
		err := unix.Unlinkat(fd, name, 0)
		if err != nil && !errors.Is(err, unix.ENOENT) { // ENOENT: another process removed it
			errs = append(errs, fmt.Errorf("removing %s: %w", filepath.Join(dir, name), err))
			return false
		}
		return true
	}
	for _, name := range names {
		temp := n.Temp != nil && n.Temp.MatchString(name)
		if !temp && !n.File.MatchString(name) || unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW) != nil ||
			st.Mode&unix.S_IFMT != unix.S_IFREG || int(st.Uid) != os.Geteuid() {
			continue
		}
		f := file{name, st.Size, time.Unix(st.Mtim.Unix())}
		if temp {
			if time.Since(f.mtime) > StaleTemp {
				remove(name)
			}
			continue
		}
		total += f.size
		if name != filepath.Base(keep) {
			files = append(files, f)
		}
	}
	if limit < 0 {
		limit = def
		var fs unix.Statfs_t
		if unix.Fstatfs(fd, &fs) == nil {
			limit = min(limit, (int64(fs.Bavail)*fs.Bsize+total)/4)
		}
	}
	slices.SortFunc(files, func(a, b file) int { return cmp.Or(a.mtime.Compare(b.mtime), strings.Compare(a.name, b.name)) })
	for _, f := range files {
		if total <= limit {
			break
		}
		if remove(f.name) {
			total -= f.size
		}
	}
	return errors.Join(errs...)
}

// Touch marks file used now, for Trim's order; it never follows a link.
func Touch(file string) {
	now := []unix.Timespec{{Nsec: unix.UTIME_NOW}, {Nsec: unix.UTIME_NOW}}
	unix.UtimesNanoAt(unix.AT_FDCWD, file, now, unix.AT_SYMLINK_NOFOLLOW)
}

// ErrBadSize is wrapped by ParseSize's errors.
var ErrBadSize = errors.New("want bytes, or a number with K, M, G or T")

// ParseSize parses a size in bytes, with an optional suffix K, M, G or T
// (powers of 1024), the value of a cache limit's variable; "" is -1, the
// default (see Trim).
func ParseSize(s string) (int64, error) {
	if s == "" {
		return -1, nil
	}
	num, shift := s, 0
	if i := strings.Index("KMGT", strings.ToUpper(s[len(s)-1:])); i >= 0 {
		num, shift = s[:len(s)-1], 10*(i+1)
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n < 0 || n > math.MaxInt64>>shift {
		return -1, fmt.Errorf("cache size %q: %w", s, ErrBadSize)
	}
	return n << shift, nil
}
