package unwind

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"syscall"

	"github.com/heapscope/heapscope/internal/cachedir"
	"github.com/heapscope/heapscope/internal/safefile"
)

// ErrUntrusted: a cache folder or file is not owned by this user, or others
// can write it.
var ErrUntrusted = errors.New("unwind: untrusted cache")

// Cache keeps built tables on disk by build-id, so that a file is parsed
// once, not once per process or per session. A cache file is the table
// (MarshalBinary) and a trailer: the CRC-32C of the table and the magic
// "HSUC", so that a damaged file is built again rather than give wrong
// stacks. Files are written as safefile writes them (a writer killed
// midway leaves nothing), and the folder keeps the most recently used up
// to a limit (see Put).
type Cache struct {
	dir string
}

// trailer ends a cache file: the table's CRC-32C (4 bytes, little-endian)
// and this magic.
const trailerMagic = "HSUC"

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// CacheMaxEnv names the environment variable that sets the bytes of
// tables a cache folder keeps: bytes, or with K, M, G or T.
const CacheMaxEnv = "HEAPSCOPE_UNWIND_CACHE_MAX"

// defaultCacheMax is the bytes of tables a folder keeps unless CacheMaxEnv
// says otherwise (or a quarter of the free space, if less): the tables of
// about a thousand libraries of libpython's size (600 KB).
const defaultCacheMax = 512 << 20

// cacheFiles are the names of cache files and of safefile's and older
// versions' temporary files: the only names Put's trim removes.
var cacheFiles = cachedir.Names{
	File: regexp.MustCompile(`^[0-9a-f]+\.v[0-9]+\.b[0-9]+\.hsuw$`),
	Temp: regexp.MustCompile(`^(\.[0-9a-f]+\.v[0-9]+\.b[0-9]+\.hsuw\.tmp-[0-9a-f]{16}|\.tmp-[0-9]+)$`),
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
	n := len(b) - 4 - len(trailerMagic)
	if n < 0 || string(b[n+4:]) != trailerMagic || binary.LittleEndian.Uint32(b[n:]) != crc32.Checksum(b[:n], castagnoli) {
		return nil, fmt.Errorf("%s: %w: checksum", p, ErrBadTable)
	}
	t := new(Table)
	if err := t.UnmarshalBinary(b[:n]); err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	if !bytes.Equal(t.BuildID, buildID) {
		return nil, fmt.Errorf("%s: %w: build-id differs", p, ErrBadTable)
	}
	cachedir.Touch(p) // used: kept longest by Put's trim
	return t, nil
}

// Put stores t under its build-id, with its checksum: a new file, 0600,
// named once whole (safefile), so a reader never sees half a table and a
// writer killed midway leaves nothing. Then the folder is trimmed: the
// least recently used tables (written or read) are removed until the rest
// hold at most $HEAPSCOPE_UNWIND_CACHE_MAX bytes (default 512 MiB, or a
// quarter of the free space if less), and temporary files older than an
// hour with them.
func (c *Cache) Put(t *Table) error {
	if len(t.BuildID) == 0 {
		return nil // nothing to key it by
	}
	b, err := t.MarshalBinary()
	if err != nil {
		return err
	}
	b = binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
	b = append(b, trailerMagic...)
	p := c.path(t.BuildID)
	// Whatever is at the name in the folder of ours is replaced, never
	// written through.
	if err := safefile.Write(p, true, func(w io.Writer) error { _, err := w.Write(b); return err }); err != nil {
		return fmt.Errorf("unwind: cache: %w", err)
	}
	// A bad value is reported, and the default limit kept.
	limit, err := cachedir.ParseSize(os.Getenv(CacheMaxEnv))
	if err != nil {
		err = fmt.Errorf("unwind: %s: %w", CacheMaxEnv, err)
	}
	return errors.Join(err, cachedir.Trim(c.dir, cacheFiles, p, limit, defaultCacheMax))
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
