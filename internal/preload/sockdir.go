//go:build linux && amd64

package preload

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// A collector's socket lives in a private directory (0700) in the temporary
// directory, named sockDirPrefix plus a random suffix. The collector holds
// an flock on the directory for as long as it runs, so that a directory
// left behind by a collector that was killed (SIGKILL runs no cleanup) is
// known by its lock being free and its socket refusing connections, and
// removed by the next collector of the same user.
const sockDirPrefix = "heapscope-preload-"

// staleEmptyAge is how old a directory without a socket must be to be
// removed: a younger one may belong to a collector between creating it and
// locking it.
const staleEmptyAge = time.Minute

// makeSockDir creates and locks a new socket directory. The caller closes
// lock after removing dir.
func makeSockDir() (dir string, lock int, err error) {
	dir, err = os.MkdirTemp("", sockDirPrefix)
	if err != nil {
		return "", -1, fmt.Errorf("preload: %w", err)
	}
	lock, err = unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err == nil {
		err = unix.Flock(lock, unix.LOCK_EX|unix.LOCK_NB)
	}
	if err != nil {
		if lock >= 0 {
			unix.Close(lock)
		}
		os.Remove(dir)
		return "", -1, fmt.Errorf("preload: locking %s: %w", dir, err)
	}
	return dir, lock, nil
}

// cleanStaleSockDirs removes the socket directories in parent that belong
// to this user and to no running collector. Entries of other users, and
// anything that is not a plain directory, are left alone.
func cleanStaleSockDirs(parent string) {
	names, err := filepath.Glob(filepath.Join(parent, sockDirPrefix+"*"))
	if err != nil {
		return
	}
	for _, dir := range names {
		removeIfStale(dir)
	}
}

func removeIfStale(dir string) {
	var st unix.Stat_t
	if unix.Lstat(dir, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR || int(st.Uid) != os.Geteuid() {
		return
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return
	}
	defer unix.Close(fd)
	var fst unix.Stat_t
	if unix.Fstat(fd, &fst) != nil || fst.Dev != st.Dev || fst.Ino != st.Ino {
		return // replaced meanwhile
	}
	if unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB) != nil {
		return // a running collector holds it
	}
	dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return
	}
	f := os.NewFile(uintptr(dup), dir)
	entries, err := f.Readdirnames(-1)
	f.Close()
	if err != nil {
		return
	}
	hasSock := false
	for _, e := range entries {
		if e == "sock" {
			hasSock = true
		}
	}
	if !hasSock && time.Since(time.Unix(fst.Mtim.Unix())) < staleEmptyAge {
		return // perhaps a collector that has not locked it yet
	}
	if hasSock && listening(filepath.Join(dir, "sock")) {
		return // a collector that takes no lock (an older heapscope) runs there
	}
	// Only what a collector puts there: its socket. Removed through the
	// directory's descriptor, so nothing is followed.
	for _, e := range entries {
		if strings.ContainsRune(e, '/') {
			continue
		}
		unix.Unlinkat(fd, e, 0)
	}
	if err := unix.Rmdir(dir); err != nil && !errors.Is(err, unix.ENOENT) {
		return
	}
}

// listening reports whether something accepts connections on the socket
// at path: only a refused connection says that no one does.
func listening(path string) bool {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return true
	}
	defer unix.Close(fd)
	err = unix.Connect(fd, &unix.SockaddrUnix{Name: path})
	return !errors.Is(err, unix.ECONNREFUSED)
}
