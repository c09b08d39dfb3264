package inject

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/heapscope/heapscope/internal/preload"
)

// Where the target finds the interposer. dlopen needs a path the target
// can open and map executable, and the interposer's code must be what
// heapscope embeds: no one but root (or heapscope's user, for a process of
// its own) may be able to change the file under the target.
//
//   - As root: /var/lib/heapscope/libheapscope_preload-HASH.so, a regular
//     file of root's, mode 0644, in a folder of root's, 0755, whose every
//     parent is root's and writable by no one else, so that any user's
//     process can read it and none can replace it. (Not /run, which is
//     often mounted noexec.)
//   - As another user: the file `heapscope run` uses, in the user's cache
//     folder (0700, the user's), for the user's own processes.
//
// Either is used only if the target, through its own root (/proc/PID/root:
// its mount namespace, its chroot), reaches that very file (same device
// and inode) on a mount it may execute from. Otherwise, and for a target
// in another mount namespace, the library goes through a memfd the target
// makes itself: heapscope writes the library into it through
// /proc/PID/fd/N, seals it, and the target opens /proc/self/fd/N, which no
// path, user or namespace stands between. Nothing is ever written inside
// another mount namespace's file system, whose folders its owner controls.

// RootLibDir is where root's injections put the interposer.
const RootLibDir = "/var/lib/heapscope"

// libraryFile returns the path of a file that holds img, which only root
// or this user can change, written if need be.
func libraryFile(img []byte) (string, error) {
	if os.Geteuid() != 0 {
		return preload.LibraryPath()
	}
	if err := trustedDirs(filepath.Dir(RootLibDir)); err != nil {
		return "", err
	}
	if err := os.Mkdir(RootLibDir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return "", fmt.Errorf("inject: %w", err)
	}
	if err := trustedDirs(RootLibDir); err != nil {
		return "", err
	}
	sum := sha256.Sum256(img)
	p := filepath.Join(RootLibDir, "libheapscope_preload-"+hex.EncodeToString(sum[:8])+".so")
	if sameFile(p, img) {
		return p, nil
	}
	f, err := os.CreateTemp(RootLibDir, ".libheapscope_preload-*")
	if err != nil {
		return "", fmt.Errorf("inject: %w", err)
	}
	tmp := f.Name()
	defer os.Remove(tmp)
	_, err = f.Write(img)
	if err == nil {
		err = f.Chmod(0o644)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, p)
	}
	if err != nil {
		return "", fmt.Errorf("inject: writing %s: %w", p, err)
	}
	return p, nil
}

// trustedDirs checks that dir and each of its parents is a folder (not a
// symbolic link) of root's that no one else can write.
func trustedDirs(dir string) error {
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		fi, err := os.Lstat(d)
		if err != nil {
			return fmt.Errorf("inject: %w", err)
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !fi.IsDir() || !ok || st.Uid != 0 || fi.Mode().Perm()&0o022 != 0 {
			return fmt.Errorf("inject: %s is not a folder of root's that only root can write: the interposer cannot be kept there", d)
		}
		if d == "/" {
			return nil
		}
	}
}

// sameFile reports whether p is a regular file of root's, not writable by
// others, that holds img.
func sameFile(p string, img []byte) bool {
	f, err := os.OpenFile(p, os.O_RDONLY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return false
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !fi.Mode().IsRegular() || !ok || st.Uid != 0 || fi.Mode().Perm()&0o022 != 0 || fi.Size() != int64(len(img)) {
		return false
	}
	b, err := io.ReadAll(io.LimitReader(f, int64(len(img))+1))
	return err == nil && bytes.Equal(b, img)
}

// reachable reports whether process pid, through its own root, reaches
// the file at path (the same one: device and inode) on a mount that lets
// it map code.
func reachable(pid int, path string) bool {
	var ours, theirs unix.Stat_t
	if unix.Stat(path, &ours) != nil {
		return false
	}
	there := "/proc/" + strconv.Itoa(pid) + "/root" + path
	if unix.Stat(there, &theirs) != nil || theirs.Dev != ours.Dev || theirs.Ino != ours.Ino {
		return false
	}
	var fs unix.Statfs_t
	if unix.Statfs(there, &fs) != nil || fs.Flags&unix.ST_NOEXEC != 0 {
		return false
	}
	return true
}
