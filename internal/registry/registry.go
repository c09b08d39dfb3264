// Package registry keeps the table of live heap-tracing sessions, so that
// names are unique and a session can be found by name from any process.
//
// Each live session owns an entry file in the registry directory, named by a
// hash of its case-folded name and its owner's uid, and holds an exclusive
// flock on it for its whole life. The kernel drops the lock when the owner
// dies, however it dies, so a dead owner's entry never holds its name: the
// next Acquire takes it over.
//
// Each user has a registry of their own, a folder only they can write
// (root's is /run/heapscope/sessions), and names are unique per user. An
// entry is trusted only if its file belongs to the caller or to root, and
// the session's socket is found from the entry's own name, never from what
// the entry says; control.Call then checks the peer's credentials. Entries
// of other users, which a shared folder (HEAPSCOPE_RUN_DIR) may hold, are
// invisible.
package registry

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/heapscope/heapscope/internal/errs"
)

// MaxNameLen is the longest session name, in characters (as ETW's).
const MaxNameLen = 1024

// DirEnv names the environment variable that overrides the registry directory.
const DirEnv = "HEAPSCOPE_RUN_DIR"

// RootDir is root's registry.
const RootDir = "/run/heapscope/sessions"

// Dir returns the caller's registry directory, made if need be and checked:
// $HEAPSCOPE_RUN_DIR if set; for root, RootDir; for other users
// $XDG_RUNTIME_DIR/heapscope, else heapscope-UID in the system's temporary
// directory. The folder must be a directory, not a symbolic link, and the
// caller's (made 0700); a shared $HEAPSCOPE_RUN_DIR may instead be root's
// and, if others may write it, sticky like /tmp. Anything else fails with
// ErrAccessDenied rather than fall back to a folder others control.
//
// The name in the temporary directory is known to everyone: another user
// may make it first, to deny the caller every session. Then the registry
// is a folder in the caller's home that no one else can make
// (homeFallback), and stays there once made, so that every process of the
// caller agrees; without a home, Dir fails naming who holds the name.
func Dir() (string, error) {
	if d := os.Getenv(DirEnv); d != "" {
		return d, checkDir(d, true)
	}
	euid := os.Geteuid()
	if euid == 0 {
		if err := os.MkdirAll(filepath.Dir(RootDir), 0o755); err != nil {
			return "", fmt.Errorf("session registry: %w", err)
		}
		return RootDir, checkDir(RootDir, false)
	}
	if x := os.Getenv("XDG_RUNTIME_DIR"); x != "" && filepath.IsAbs(x) && checkDir(x, false) == nil {
		d := filepath.Join(x, "heapscope")
		return d, checkDir(d, false)
	}
	home, herr := homeFallback(euid)
	if herr == nil && ownFolder(home) {
		return home, checkDir(home, false) // made when d was taken: kept
	}
	d := filepath.Join(os.TempDir(), "heapscope-"+strconv.Itoa(euid))
	err := checkDir(d, false)
	if err == nil || !errors.Is(err, errs.ErrAccessDenied) {
		return d, err
	}
	if herr == nil {
		herr = os.MkdirAll(home, 0o700)
	}
	if herr != nil {
		return "", fmt.Errorf("%w, and there is no folder of yours to use instead (%v): have it removed, or set XDG_RUNTIME_DIR or %s", err, herr, DirEnv)
	}
	return home, checkDir(home, false)
}

// homeFallback is the registry of a user whose folder in the temporary
// directory another user took: heapscope/sessions-HOST in their cache
// folder ($XDG_CACHE_HOME, else ~/.cache; the home from the password
// database without $HOME), named by the host since a home may be shared
// by several machines. The home must be an existing folder of the user's,
// and the path short enough for the sockets beside the entries.
func homeFallback(euid int) (string, error) {
	cache := os.Getenv("XDG_CACHE_HOME")
	home := os.Getenv("HOME")
	if home == "" {
		u, err := user.LookupId(strconv.Itoa(euid))
		if err != nil {
			return "", fmt.Errorf("no home: %w", err)
		}
		home = u.HomeDir
	}
	var st syscall.Stat_t
	if err := syscall.Stat(home, &st); err != nil {
		return "", fmt.Errorf("home %s: %w", home, err)
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFDIR || int(st.Uid) != euid {
		return "", fmt.Errorf("home %s is not a folder of yours", home)
	}
	if !filepath.IsAbs(cache) {
		cache = filepath.Join(home, ".cache")
	}
	host, _ := os.Hostname()
	if len(host) > 32 {
		host = host[:32]
	}
	d := filepath.Join(cache, "heapscope", "sessions-"+host)
	// sun_path holds 107 bytes: DIR/<32 hex>-<uid>.sock.
	if n := len(d) + len("/-.sock") + 32 + len(strconv.Itoa(euid)); n > 107 {
		return "", fmt.Errorf("%s is too long a path for the sessions' sockets", d)
	}
	return d, nil
}

// ownFolder reports whether dir is a folder of the caller's, not a
// symbolic link.
func ownFolder(dir string) bool {
	fi, err := os.Lstat(dir)
	if err != nil || !fi.IsDir() {
		return false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && int(st.Uid) == os.Geteuid()
}

// whose names the user of uid: "uid 1001 (bob)".
func whose(uid uint32) string {
	if u, err := user.LookupId(strconv.FormatUint(uint64(uid), 10)); err == nil {
		return fmt.Sprintf("uid %d (%s)", uid, u.Username)
	}
	return fmt.Sprintf("uid %d", uid)
}

// checkDir makes dir (0700) if it is missing, and checks it is a folder the
// caller owns, private to them (a loose mode of their own is tightened), or,
// when shared is allowed, root's and sticky if others may write it.
func checkDir(dir string, shared bool) error {
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("session registry: %w", err)
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("session registry: %w", err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	euid := uint32(os.Geteuid())
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		return fmt.Errorf("session registry %s is a symbolic link of %s: %w", dir, whose(st.Uid), errs.ErrAccessDenied)
	case !fi.IsDir():
		return fmt.Errorf("session registry %s is not a folder (it is %s's): %w", dir, whose(st.Uid), errs.ErrAccessDenied)
	case st.Uid == euid:
		if !shared && fi.Mode().Perm()&0o077 != 0 {
			if err := os.Chmod(dir, 0o700); err != nil {
				return fmt.Errorf("session registry: %w", err)
			}
		}
		return nil
	case shared && st.Uid == 0 && (fi.Mode().Perm()&0o022 == 0 || fi.Mode()&fs.ModeSticky != 0):
		return nil
	}
	return fmt.Errorf("session registry %s belongs to %s, not to you (uid %d): %w", dir, whose(st.Uid), euid, errs.ErrAccessDenied)
}

// Info is what an entry says about its session.
type Info struct {
	Name     string    `json:"name"`
	Owner    int       `json:"owner"`  // pid of the process that runs the session
	Socket   string    `json:"socket"` // the control socket
	Provider string    `json:"provider"`
	Started  time.Time `json:"started"`
	// UID is the owner of the entry file: the user the session runs as,
	// whatever the entry says. Set by Lookup and List.
	UID int `json:"-"`
}

// CheckName validates a session name.
func CheckName(name string) error {
	switch n := utf8.RuneCountInString(name); {
	case name == "":
		return fmt.Errorf("empty session name: %w", errs.ErrInvalidFlags)
	case n > MaxNameLen:
		return fmt.Errorf("session name of %d characters, at most %d: %w", n, MaxNameLen, errs.ErrNameTooLong)
	case strings.ContainsRune(name, 0):
		return fmt.Errorf("session name holds a NUL: %w", errs.ErrInvalidFlags)
	}
	return nil
}

// key maps a name and its owner to its entry's file name: names compare
// case-insensitively, may be longer than a file name can be, and are
// unique per user.
func key(name string, uid int) string {
	h := sha256.Sum256([]byte(strings.ToLower(name)))
	return hex.EncodeToString(h[:16]) + "-" + strconv.Itoa(uid)
}

// Entry is a session's hold on its name. Release it when the session ends.
type Entry struct {
	f    *os.File
	path string
	Info Info
}

// SocketPath returns where the control socket of the caller's session
// named name lives.
func SocketPath(dir, name string) string {
	return filepath.Join(dir, key(name, os.Geteuid())+".sock")
}

// socketOf is the socket beside an entry file.
func socketOf(entryPath string) string {
	return strings.TrimSuffix(entryPath, ".session") + ".sock"
}

// Acquire registers a session under info.Name in dir, or fails with
// ErrAlreadyExists naming the live owner's pid.
func Acquire(dir string, info Info) (*Entry, error) {
	if err := CheckName(info.Name); err != nil {
		return nil, err
	}
	if err := checkDir(dir, true); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, key(info.Name, os.Geteuid())+".session")
	for attempt := 0; ; attempt++ {
		f, err := lockEntry(path)
		if err == nil {
			info.UID = os.Geteuid()
			return writeEntry(f, path, info)
		}
		// errStale: the file was removed between our open and our lock (its
		// owner released it, or List cleaned it up), or was planted by
		// another user and removed: try again on a new one.
		if errors.Is(err, errStale) && attempt < 10 {
			continue
		}
		if errors.Is(err, syscall.EWOULDBLOCK) {
			owner := "another process"
			if other, err := readInfo(path); err == nil {
				owner = fmt.Sprintf("pid %d", other.Owner)
			}
			return nil, fmt.Errorf("session %q is running in %s: %w", info.Name, owner, errs.ErrAlreadyExists)
		}
		return nil, fmt.Errorf("session registry: %w", err)
	}
}

var errStale = errors.New("entry removed while locking")

// openEntry opens an entry file without following a link or blocking on a
// fifo, and returns it with its owner, or an error for anything but a
// regular file.
func openEntry(path string, flags int) (*os.File, uint32, error) {
	fd, err := unix.Open(path, flags|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, 0, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return nil, 0, fmt.Errorf("%s is not a regular file: %w", path, errs.ErrAccessDenied)
	}
	return os.NewFile(uintptr(fd), path), st.Uid, nil
}

// lockEntry opens and exclusively locks the entry file at path, making sure
// the file locked is still the one at path and is the caller's. A file of
// another user there was planted (entry names carry their owner's uid): it
// is removed if it can be, else the name cannot be had.
func lockEntry(path string) (*os.File, error) {
	f, uid, err := openEntry(path, unix.O_RDWR|unix.O_CREAT)
	if err != nil {
		if !errors.Is(err, errs.ErrAccessDenied) && !errors.Is(err, unix.ELOOP) {
			return nil, err
		}
		return nil, removePlanted(path, err)
	}
	if int(uid) != os.Geteuid() {
		f.Close()
		return nil, removePlanted(path, fmt.Errorf("%s belongs to uid %d: %w", path, uid, errs.ErrAccessDenied))
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, err
	}
	var held, now syscall.Stat_t
	if syscall.Fstat(int(f.Fd()), &held) != nil || syscall.Lstat(path, &now) != nil ||
		held.Ino != now.Ino || held.Dev != now.Dev {
		f.Close()
		return nil, errStale
	}
	return f, nil
}

// removePlanted removes what another user left at the caller's entry path
// (a link, a fifo, a file of theirs), or returns why the name cannot be had.
func removePlanted(path string, why error) error {
	if err := os.Remove(path); err != nil {
		return fmt.Errorf("%w (and it cannot be removed: %v)", why, err)
	}
	os.Remove(socketOf(path))
	return errStale
}

func writeEntry(f *os.File, path string, info Info) (*Entry, error) {
	// The lock is ours: whatever the file held belonged to a dead owner.
	b, err := json.Marshal(info)
	if err == nil {
		err = f.Truncate(0)
	}
	if err == nil {
		_, err = f.WriteAt(append(b, '\n'), 0)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("session registry: write %s: %w", path, err)
	}
	return &Entry{f: f, path: path, Info: info}, nil
}

// Release removes the entry and gives up the name.
func (e *Entry) Release() error {
	if e == nil || e.f == nil {
		return nil
	}
	// Remove while still holding the lock, so no one takes the name over a
	// file we are about to delete.
	err := os.Remove(e.path)
	if cerr := e.f.Close(); err == nil {
		err = cerr
	}
	e.f = nil
	return err
}

// trusted reports whether an entry of uid may be believed by the caller:
// its own, or root's.
func trusted(uid uint32) bool { return uid == 0 || int(uid) == os.Geteuid() }

// readInfo reads a trusted entry. Its socket is the one beside it, whatever
// it says.
func readInfo(path string) (Info, error) {
	var info Info
	// An owner writes its entry just after locking it: allow it a moment.
	for i := 0; ; i++ {
		f, uid, err := openEntry(path, unix.O_RDONLY)
		if err != nil {
			return info, err
		}
		if !trusted(uid) {
			f.Close()
			return info, fmt.Errorf("%s belongs to uid %d: %w", path, uid, errs.ErrAccessDenied)
		}
		b, err := io.ReadAll(io.LimitReader(f, 1<<16))
		f.Close()
		if err == nil {
			if err = json.Unmarshal(b, &info); err == nil {
				info.Socket, info.UID = socketOf(path), int(uid)
				return info, nil
			}
		}
		if i == 20 {
			return info, err
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// live reports whether a trusted entry file is held by a live owner.
func live(path string) bool {
	f, uid, err := openEntry(path, unix.O_RDONLY)
	if err != nil {
		return false
	}
	defer f.Close()
	if !trusted(uid) {
		return false
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB); err != nil {
		return errors.Is(err, syscall.EWOULDBLOCK)
	}
	// We got the lock: nobody holds this file. If it is still the one at
	// path, its owner died: clean up what is the caller's to clean.
	var held, now syscall.Stat_t
	if int(uid) == os.Geteuid() && syscall.Fstat(int(f.Fd()), &held) == nil && syscall.Lstat(path, &now) == nil &&
		held.Ino == now.Ino && held.Dev == now.Dev {
		os.Remove(path)
		os.Remove(socketOf(path))
	}
	return false
}

// Lookup finds the live session named name (case-insensitively): the
// caller's, else root's.
func Lookup(dir, name string) (Info, error) {
	if err := CheckName(name); err != nil {
		return Info{}, err
	}
	for _, uid := range []int{os.Geteuid(), 0} {
		path := filepath.Join(dir, key(name, uid)+".session")
		if !live(path) {
			continue
		}
		info, err := readInfo(path)
		if err != nil {
			return Info{}, fmt.Errorf("session %q: registry entry unreadable: %w", name, err)
		}
		return info, nil
	}
	return Info{}, fmt.Errorf("session %q: %w", name, errs.ErrNotRunning)
}

// List returns the live sessions of the caller and of root in dir, sorted
// by name. Entries of dead owners are removed on the way; entries of other
// users are skipped.
func List(dir string) ([]Info, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.session"))
	if err != nil {
		return nil, err
	}
	var infos []Info
	for _, p := range paths {
		if !live(p) {
			continue
		}
		if info, err := readInfo(p); err == nil {
			infos = append(infos, info)
		}
	}
	sort.Slice(infos, func(i, j int) bool { return strings.ToLower(infos[i].Name) < strings.ToLower(infos[j].Name) })
	return infos, nil
}
