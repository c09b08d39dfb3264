// Package proc reads what heapscope needs to know about a process from /proc:
// its state, executable, command line and memory mappings, and the build-id
// of the files it maps.
package proc

import (
	"bufio"
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/heapscope/heapscope/buildid"
	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/internal/errs"
)

// Root is the procfs mount point. Tests never change it; it exists so the
// paths below read as what they are.
const Root = "/proc"

func path(pid int, name string) string {
	return Root + "/" + strconv.Itoa(pid) + "/" + name
}

// wrap turns a "not exist" error on /proc/PID into ErrNoSuchProcess and a
// permission error into ErrAccessDenied.
func wrap(pid int, err error) error {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("pid %d: %w", pid, errs.ErrNoSuchProcess)
	case errors.Is(err, fs.ErrPermission):
		return fmt.Errorf("pid %d: %w: %v", pid, errs.ErrAccessDenied, err)
	}
	return fmt.Errorf("pid %d: %w", pid, err)
}

// Stat is the part of /proc/PID/stat heapscope uses.
type Stat struct {
	PID       int
	Comm      string
	State     byte // R, S, D, Z (zombie), T (stopped), t (traced), X (dead), ...
	PPID      int
	StartTime uint64 // clock ticks after boot: with PID, identifies a process across PID reuse
}

// ReadStat reads /proc/PID/stat.
func ReadStat(pid int) (Stat, error) {
	b, err := os.ReadFile(path(pid, "stat"))
	if err != nil {
		return Stat{}, wrap(pid, err)
	}
	return parseStat(pid, b)
}

func parseStat(pid int, b []byte) (Stat, error) {
	// comm is in parentheses and may itself hold spaces and parentheses:
	// the last ')' ends it.
	open, close := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if open < 0 || close < open {
		return Stat{}, fmt.Errorf("pid %d: malformed stat %q", pid, b)
	}
	st := Stat{PID: pid, Comm: string(b[open+1 : close])}
	f := strings.Fields(string(b[close+1:]))
	// f[0] is field 3 (state); field 4 is ppid; field 22 is starttime.
	if len(f) < 20 || len(f[0]) != 1 {
		return Stat{}, fmt.Errorf("pid %d: malformed stat %q", pid, b)
	}
	st.State = f[0][0]
	st.PPID, _ = strconv.Atoi(f[1])
	st.StartTime, _ = strconv.ParseUint(f[19], 10, 64)
	return st, nil
}

// Alive reports whether pid names a process that has not exited. Unlike
// kill(pid, 0) it is false for zombies.
func Alive(pid int) bool {
	st, err := ReadStat(pid)
	return err == nil && st.State != 'Z' && st.State != 'X'
}

// Exe returns the path of the process's executable.
func Exe(pid int) (string, error) {
	p, err := os.Readlink(path(pid, "exe"))
	if err != nil {
		return "", wrap(pid, err)
	}
	return strings.TrimSuffix(p, " (deleted)"), nil
}

// Cmdline returns the process's argv, without empty arguments at its end:
// a program that writes its title over its argv (redis, nginx, postgres)
// fills the rest of the area with NULs, which would read as dozens of
// empty arguments. (So a program given empty last arguments shows
// without them.)
func Cmdline(pid int) ([]string, error) {
	b, err := os.ReadFile(path(pid, "cmdline"))
	if err != nil {
		return nil, wrap(pid, err)
	}
	b = bytes.TrimRight(b, "\x00")
	if len(b) == 0 {
		return nil, nil
	}
	return strings.Split(string(b), "\x00"), nil
}

// Mapping is one line of /proc/PID/maps.
type Mapping struct {
	Start, End uint64
	Perms      string // "r-xp" and so on
	Offset     uint64
	Dev        string
	Inode      uint64
	Path       string // "" for anonymous mappings; "[heap]", "[stack]", ... for special ones
}

// Exec reports whether the mapping is executable.
func (m Mapping) Exec() bool { return len(m.Perms) > 2 && m.Perms[2] == 'x' }

// File reports whether the mapping is backed by a file.
func (m Mapping) File() bool { return m.Inode != 0 && strings.HasPrefix(m.Path, "/") }

// ReadMaps reads /proc/PID/maps.
func ReadMaps(pid int) ([]Mapping, error) {
	b, err := os.ReadFile(path(pid, "maps"))
	if err != nil {
		return nil, wrap(pid, err)
	}
	return ParseMaps(b)
}

// ParseMaps parses the text of a maps file.
func ParseMaps(b []byte) ([]Mapping, error) {
	var maps []Mapping
	err := eachLine(b, func(line string) error {
		m, err := parseMapsLine(line)
		maps = append(maps, m)
		return err
	})
	if err != nil {
		return nil, err
	}
	return maps, nil
}

// eachLine calls fn with each line of b that is not empty (of up to 1 MiB:
// a path may be long), up to the first error.
func eachLine(b []byte, fn func(line string) error) error {
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		if line := sc.Text(); line != "" {
			if err := fn(line); err != nil {
				return err
			}
		}
	}
	return sc.Err()
}

func parseMapsLine(line string) (Mapping, error) {
	// address perms offset dev inode [path]; the path may hold spaces.
	var m Mapping
	rest := line
	field := func() string {
		rest = strings.TrimLeft(rest, " ")
		i := strings.IndexByte(rest, ' ')
		if i < 0 {
			f := rest
			rest = ""
			return f
		}
		f := rest[:i]
		rest = rest[i+1:]
		return f
	}
	addr, perms, off, dev, inode := field(), field(), field(), field(), field()
	lo, hi, ok := strings.Cut(addr, "-")
	var err1, err2, err3, err4 error
	m.Start, err1 = strconv.ParseUint(lo, 16, 64)
	m.End, err2 = strconv.ParseUint(hi, 16, 64)
	m.Offset, err3 = strconv.ParseUint(off, 16, 64)
	m.Inode, err4 = strconv.ParseUint(inode, 10, 64)
	if !ok || err1 != nil || err2 != nil || err3 != nil || err4 != nil || len(perms) != 4 {
		return Mapping{}, fmt.Errorf("malformed maps line %q", line)
	}
	m.Perms, m.Dev = perms, dev
	m.Path = strings.TrimSuffix(strings.TrimLeft(rest, " "), " (deleted)")
	return m, nil
}

// MappedFile returns a path by which this process can open the file of
// mapping m of pid: the path the maps give, under /proc/PID/root, when that
// is the mapped file (the same device and inode); otherwise
// /proc/PID/map_files/START-END, which is the mapped file whatever the
// namespaces (a process chrooted in a mount namespace of its own has paths
// in its maps that are neither this process's nor its own). Opening the
// latter needs CAP_SYS_ADMIN.
func MappedFile(pid int, m Mapping) string {
	p := path(pid, "root") + m.Path
	var st unix.Stat_t
	if err := unix.Stat(p, &st); err == nil && st.Ino == m.Inode && devString(st.Dev) == m.Dev {
		return p
	}
	return fmt.Sprintf("%s/%x-%x", path(pid, "map_files"), m.Start, m.End)
}

// devString formats a device number as /proc/PID/maps does.
func devString(dev uint64) string {
	return fmt.Sprintf("%02x:%02x", unix.Major(dev), unix.Minor(dev))
}

// Modules returns the executable file mappings of a process as module
// records, with their build-ids. Files are read as OpenMapped opens them, so
// that processes in other mount namespaces are described by their own
// files, and a FIFO or device the process put in a mapped file's place is
// never opened.
func Modules(pid int, now int64) ([]event.Module, error) {
	maps, err := ReadMaps(pid)
	if err != nil {
		return nil, err
	}
	ids := map[string]string{}
	var mods []event.Module
	for _, m := range maps {
		if !m.Exec() || !m.File() {
			continue
		}
		id, ok := ids[m.Path]
		if !ok {
			id = mappedBuildID(pid, m)
			ids[m.Path] = id
		}
		mods = append(mods, event.Module{
			PID: uint32(pid), Time: now, Start: m.Start, End: m.End, Offset: m.Offset,
			Path: m.Path, BuildID: id,
		})
	}
	return mods, nil
}

// mappedBuildID returns the build-id of the file of mapping m, or "".
func mappedBuildID(pid int, m Mapping) string {
	f, err := OpenMapped(pid, m)
	if err != nil {
		return ""
	}
	defer f.Close()
	ef, err := elf.NewFile(f)
	if err != nil {
		return ""
	}
	id, _ := buildid.ELF(ef)
	return id
}

// Children returns the processes whose parent is pid, in order: read from
// each process's stat (a process that ends meanwhile is left out).
func Children(pid int) ([]int, error) {
	ents, err := os.ReadDir(Root)
	if err != nil {
		return nil, err
	}
	var kids []int
	for _, e := range ents {
		c, err := strconv.Atoi(e.Name())
		if err != nil || c == pid {
			continue
		}
		if st, err := ReadStat(c); err == nil && st.PPID == pid {
			kids = append(kids, c)
		}
	}
	sort.Ints(kids)
	return kids, nil
}
