package symbolize

import (
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// openFile opens p for reading if it is a regular file. A module's path
// comes from the traced process (a loader's l_name), which may name a FIFO
// (an open for reading waits for a writer, for ever) or a device (an open
// acts on it): the path is first looked at through an O_PATH descriptor,
// which opens nothing, and only a regular file is opened, through that
// descriptor and without blocking, so that what was checked is what is
// read.
func openFile(p string) (*os.File, error) {
	pfd, err := unix.Open(p, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: p, Err: err}
	}
	defer unix.Close(pfd)
	var st unix.Stat_t
	if err := unix.Fstat(pfd, &st); err != nil {
		return nil, &os.PathError{Op: "fstat", Path: p, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, fmt.Errorf("%s: not a regular file (mode %#o)", p, st.Mode&unix.S_IFMT)
	}
	const flags = unix.O_RDONLY | unix.O_NONBLOCK | unix.O_CLOEXEC | unix.O_NOCTTY
	fd, err := unix.Open("/proc/self/fd/"+strconv.Itoa(pfd), flags, 0)
	if err == unix.ENOENT { // no /proc: open the path, and check what it gave
		if fd, err = unix.Open(p, flags, 0); err == nil {
			var st2 unix.Stat_t
			if unix.Fstat(fd, &st2) != nil || st2.Dev != st.Dev || st2.Ino != st.Ino {
				unix.Close(fd)
				return nil, fmt.Errorf("%s: changed while it was opened", p)
			}
		}
	}
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: p, Err: err}
	}
	return os.NewFile(uintptr(fd), p), nil
}
