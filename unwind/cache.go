package unwind

import (
	"bytes"
	"debug/elf"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// ErrUntrusted: a cache folder or file is not owned by this user, or others
// can write it.
var ErrUntrusted = errors.New("unwind: untrusted cache")

// Cache keeps built tables on disk by build-id, so that a file is parsed
// once, not once per process or per session.
type Cache struct {
	dir string
}

// maxTableFile bounds what Get reads (a table of 4 GiB of code would need
// far less).
const maxTableFile = 256 << 20

// OpenCache opens (creating it 0700) the cache folder dir; "" means
// heapscope/unwind in the user's cache folder. The folder must belong to
// this user and be writable by no one else.
func OpenCache(dir string) (*Cache, error) {
	if dir == "" {
		base, err := os.UserCacheDir()
		if err != nil {
			return nil, fmt.Errorf("unwind: cache: %w", err)
		}
		dir = filepath.Join(base, "heapscope", "unwind")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("unwind: cache: %w", err)
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return nil, fmt.Errorf("unwind: cache: %w", err)
	}
	if err := trusted(fi, true); err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	return &Cache{dir: dir}, nil
}

// Dir is the cache's folder.
func (c *Cache) Dir() string { return c.dir }

func trusted(fi fs.FileInfo, dir bool) error {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return ErrUntrusted
	}
	if int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("%w: owned by uid %d", ErrUntrusted, st.Uid)
	}
	if fi.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("%w: mode %v", ErrUntrusted, fi.Mode().Perm())
	}
	if dir != fi.IsDir() || (!dir && !fi.Mode().IsRegular()) {
		return fmt.Errorf("%w: %v is not the expected kind of file", ErrUntrusted, fi.Mode().Type())
	}
	return nil
}

// builderRevision names the builder's rules in cache file names: a
// builder that derives different entries from the same CFI bumps it, so
// that tables built by an older one are not reused.
const builderRevision = 1

func (c *Cache) path(buildID []byte) string {
	return filepath.Join(c.dir, fmt.Sprintf("%s.v%d.b%d.hsuw", hex.EncodeToString(buildID), version, builderRevision))
}

// Get returns the cached table of the file with this build-id, or an error
// wrapping fs.ErrNotExist. The file is opened without following symlinks
// and checked for its owner before it is read.
func (c *Cache) Get(buildID []byte) (*Table, error) {
	if len(buildID) == 0 {
		return nil, fmt.Errorf("unwind: cache: no build-id: %w", fs.ErrNotExist)
	}
	p := c.path(buildID)
	fd, err := syscall.Open(p, syscall.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("unwind: cache: %w", &fs.PathError{Op: "open", Path: p, Err: err})
	}
	f := os.NewFile(uintptr(fd), p)
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("unwind: cache: %w", err)
	}
	if err := trusted(fi, false); err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxTableFile))
	if err != nil {
		return nil, fmt.Errorf("unwind: cache: %w", err)
	}
	t := new(Table)
	if err := t.UnmarshalBinary(b); err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	if !bytes.Equal(t.BuildID, buildID) {
		return nil, fmt.Errorf("%s: %w: build-id differs", p, ErrBadTable)
	}
	return t, nil
}

// Put stores t under its build-id: written 0600 to a new file (O_EXCL),
// then renamed into place, so a reader never sees half a table.
func (c *Cache) Put(t *Table) error {
	if len(t.BuildID) == 0 {
		return nil // nothing to key it by
	}
	b, err := t.MarshalBinary()
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(c.dir, ".tmp-*") // O_CREATE|O_EXCL, 0600
	if err != nil {
		return fmt.Errorf("unwind: cache: %w", err)
	}
	tmp := f.Name()
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, c.path(t.BuildID))
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("unwind: cache: %w", err)
	}
	return nil
}

// Load returns the table of the ELF file at path: from the cache when its
// build-id is there, else built and stored. A file without a build-id is
// built every time. A table built but not stored is returned with the error.
func (c *Cache) Load(path string) (*Table, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, fmt.Errorf("unwind: %w", err)
	}
	id := BuildID(f)
	f.Close()
	if len(id) > 0 {
		if t, err := c.Get(id); err == nil {
			return t, nil
		}
	}
	t, err := Build(path)
	if err != nil {
		return nil, err
	}
	if len(id) > 0 && bytes.Equal(t.BuildID, id) {
		if err := c.Put(t); err != nil {
			return t, err
		}
	}
	return t, nil
}
