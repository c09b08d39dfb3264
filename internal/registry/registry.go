// Package registry keeps the machine-wide table of live heap-tracing sessions,
// so that names are unique and a session can be found by name from any
// process.
//
// Each live session owns an entry file in the registry directory, named by a
// hash of its case-folded name, and holds an exclusive flock on it for its
// whole life. The kernel drops the lock when the owner dies, however it dies,
// so a dead owner's entry never holds its name: the next Acquire takes it over.
package registry

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/heapscope/heapscope/internal/errs"
)

// MaxNameLen is the longest session name, in characters (as ETW's).
const MaxNameLen = 1024

// DirEnv names the environment variable that overrides the registry directory.
const DirEnv = "HEAPSCOPE_RUN_DIR"

// Dir returns the registry directory: $HEAPSCOPE_RUN_DIR, else
// /run/heapscope/sessions when it exists or can be made, else a directory in
// the system's temporary directory.
func Dir() string {
	if d := os.Getenv(DirEnv); d != "" {
		return d
	}
	const run = "/run/heapscope/sessions"
	if err := mkdirShared(run); err == nil {
		return run
	}
	return filepath.Join(os.TempDir(), "heapscope-sessions")
}

// mkdirShared makes dir world-writable and sticky, like /tmp: any user may
// register a session, and only its owner may remove the entry.
func mkdirShared(dir string) error {
	if fi, err := os.Stat(dir); err == nil && fi.IsDir() {
		return syscall.Access(dir, 2 /* W_OK */)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return os.Chmod(dir, 0o1777|os.ModeSticky)
}

// Info is what an entry says about its session.
type Info struct {
	Name     string    `json:"name"`
	Owner    int       `json:"owner"`  // pid of the process that runs the session
	Socket   string    `json:"socket"` // the control socket
	Provider string    `json:"provider"`
	Started  time.Time `json:"started"`
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

// key maps a name to its entry's file name: names compare case-insensitively
// and may be longer than a file name can be.
func key(name string) string {
	h := sha256.Sum256([]byte(strings.ToLower(name)))
	return hex.EncodeToString(h[:16])
}

// Entry is a session's hold on its name. Release it when the session ends.
type Entry struct {
	f    *os.File
	path string
	Info Info
}

// SocketPath returns where the control socket of a session named name lives.
func SocketPath(dir, name string) string { return filepath.Join(dir, key(name)+".sock") }

// Acquire registers a session under info.Name in dir, or fails with
// ErrAlreadyExists naming the live owner's pid.
func Acquire(dir string, info Info) (*Entry, error) {
	if err := CheckName(info.Name); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("session registry %s: %w", dir, err)
	}
	path := filepath.Join(dir, key(info.Name)+".session")
	for attempt := 0; ; attempt++ {
		f, err := lockEntry(path)
		if err == nil {
			return writeEntry(f, path, info)
		}
		// errStale: the file was removed between our open and our lock (its
		// owner released it, or List cleaned it up): try again on a new one.
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

// lockEntry opens and exclusively locks the entry file at path, making sure
// the file locked is still the one at path.
func lockEntry(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, err
	}
	var held, now syscall.Stat_t
	if syscall.Fstat(int(f.Fd()), &held) != nil || syscall.Stat(path, &now) != nil ||
		held.Ino != now.Ino || held.Dev != now.Dev {
		f.Close()
		return nil, errStale
	}
	return f, nil
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

func readInfo(path string) (Info, error) {
	var info Info
	// An owner writes its entry just after locking it: allow it a moment.
	for i := 0; ; i++ {
		f, err := os.Open(path)
		if err != nil {
			return info, err
		}
		b, err := io.ReadAll(io.LimitReader(f, 1<<16))
		f.Close()
		if err == nil {
			if err = json.Unmarshal(b, &info); err == nil {
				return info, nil
			}
		}
		if i == 20 {
			return info, err
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// live reports whether an entry file is held by a live owner.
func live(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB); err != nil {
		return errors.Is(err, syscall.EWOULDBLOCK)
	}
	// We got the lock: nobody holds this file. If it is still the one at
	// path, its owner died: clean up.
	var held, now syscall.Stat_t
	if syscall.Fstat(int(f.Fd()), &held) == nil && syscall.Stat(path, &now) == nil &&
		held.Ino == now.Ino && held.Dev == now.Dev {
		os.Remove(path)
		os.Remove(strings.TrimSuffix(path, ".session") + ".sock")
	}
	return false
}

// Lookup finds the live session named name (case-insensitively).
func Lookup(dir, name string) (Info, error) {
	if err := CheckName(name); err != nil {
		return Info{}, err
	}
	path := filepath.Join(dir, key(name)+".session")
	if !live(path) {
		return Info{}, fmt.Errorf("session %q: %w", name, errs.ErrNotRunning)
	}
	info, err := readInfo(path)
	if err != nil {
		return Info{}, fmt.Errorf("session %q: registry entry unreadable: %w", name, err)
	}
	return info, nil
}

// List returns the live sessions, sorted by name. Entries of dead owners are
// removed on the way.
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
