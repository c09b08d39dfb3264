package proc

import (
	"errors"
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// ErrNotRegular is the error of OpenMapped and OpenInRoot for a path that
// is not a regular file (a FIFO, a device, a directory, a symbolic link).
var ErrNotRegular = errors.New("not a regular file")

// OpenMapped opens for reading the file of mapping m of pid, a path a
// traced process chose (it may have put a FIFO or a device there since it
// mapped a file, or mapped a device): through /proc/PID/map_files, which
// is the mapped object itself, else /proc/PID/root and m's path, not
// following a symbolic link at its end. Either way the object is first
// looked at without being opened (O_PATH), and opened, without blocking
// (O_NONBLOCK), only when it is a regular file with m's device and inode:
// opening a FIFO or a device would wait for a writer, or act on the
// device.
func OpenMapped(pid int, m Mapping) (*os.File, error) {
	mf := fmt.Sprintf("%s/%x-%x", path(pid, "map_files"), m.Start, m.End)
	f, err := openRegular(mf, 0, func(st *unix.Stat_t) bool { return st.Ino == m.Inode && devString(st.Dev) == m.Dev })
	if err == nil || errors.Is(err, ErrNotRegular) {
		return f, err
	}
	return openRegular(path(pid, "root")+m.Path, unix.O_NOFOLLOW, func(st *unix.Stat_t) bool {
		return st.Ino == m.Inode && devString(st.Dev) == m.Dev
	})
}

// OpenInRoot opens for reading the regular file name (an absolute path a
// traced process named: a dynamic loader's l_name), on the terms of
// OpenMapped: the file of the mapping that starts at base (a shared
// object's first segment, at its load address), else name resolved in
// pid's root (OpenIn).
func OpenInRoot(pid int, name string, base uint64) (*os.File, error) {
	maps, err := ReadMaps(pid)
	if err != nil {
		return nil, err
	}
	for _, m := range maps {
		if m.File() && m.Start == base && m.Offset == 0 {
			return OpenMapped(pid, m)
		}
	}
	root, err := OpenRoot(pid)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	return OpenIn(root, name)
}

// OpenRoot opens pid's root directory as a descriptor that names it
// (O_PATH), in which OpenIn resolves the paths the process gives, also
// once it has exited.
func OpenRoot(pid int) (*os.File, error) {
	p := path(pid, "root")
	fd, err := unix.Open(p, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, wrap(pid, err)
	}
	return os.NewFile(uintptr(fd), p), nil
}

// OpenIn opens for reading the regular file name in root (from OpenRoot),
// resolved as the process would resolve it but never outside root
// (RESOLVE_IN_ROOT: a symbolic link or .. stays in it) nor through a
// /proc magic link, looked at (O_PATH, fstat) before it is opened, and
// then opened without blocking: a FIFO or device is refused, not opened.
func OpenIn(root *os.File, name string) (*os.File, error) {
	how := unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS}
	pfd, err := unix.Openat2(int(root.Fd()), name, &how)
	if errors.Is(err, unix.ENOSYS) { // before Linux 5.6: not following a last link
		pfd, err = unix.Openat(int(root.Fd()), "."+name, unix.O_PATH|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	}
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: root.Name() + name, Err: err}
	}
	defer unix.Close(pfd)
	return reopen(pfd, root.Name()+name, func(*unix.Stat_t) bool { return true })
}

// openRegular opens p read-only and non-blocking if, looked at through an
// O_PATH descriptor (which opens nothing), it is a regular file that ok
// accepts; the file is then opened through that descriptor, so that what
// was checked is what is read.
func openRegular(p string, flags int, ok func(*unix.Stat_t) bool) (*os.File, error) {
	pfd, err := unix.Open(p, unix.O_PATH|unix.O_CLOEXEC|flags, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: p, Err: err}
	}
	defer unix.Close(pfd)
	return reopen(pfd, p, ok)
}

// reopen opens the file of O_PATH descriptor pfd for reading, without
// blocking, if it is a regular file that ok accepts.
func reopen(pfd int, p string, ok func(*unix.Stat_t) bool) (*os.File, error) {
	var st unix.Stat_t
	if err := unix.Fstat(pfd, &st); err != nil {
		return nil, &os.PathError{Op: "fstat", Path: p, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, fmt.Errorf("%s: %w (mode %#o)", p, ErrNotRegular, st.Mode&unix.S_IFMT)
	}
	if !ok(&st) {
		return nil, fmt.Errorf("%s: not the file mapped there: %w", p, os.ErrNotExist)
	}
	fd, err := unix.Open("/proc/self/fd/"+strconv.Itoa(pfd), unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: p, Err: err}
	}
	return os.NewFile(uintptr(fd), p), nil
}
