package query

import (
	"bufio"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"github.com/heapscope/heapscope/analyze"
	"github.com/heapscope/heapscope/internal/cachedir"
	"github.com/heapscope/heapscope/internal/safefile"
)

// The windowed index on disk: its columns written once, after they are
// built, into a cache folder, and read by a later Open of the same trace
// instead of being built again.
//
// A file is named by a hash of what it was built from: the trace's path,
// device, inode, size and modification time, and the processes selected;
// a changed trace gets another name. It is written mode 0600 as an
// unnamed file named once whole (createIndexFile). It is used only if it
// is a regular file of this user's, not writable by others, and whole:
// its checksum (CRC-32C of every byte before it) right, every offset and
// count checked, every row checked to point inside the index (a bad file
// is built again, never a panic nor a wrong answer: a flipped bit that
// leaves the rows in range changes the checksum). The folder keeps the
// most recently used files up to a limit (trimCache).
//
// Layout (little-endian, native structs; x86-64 only, as heapscope):
//
//	magic "HSIDX\x00\x00\x07", counts (events, rows, stacks, ends, groups,
//	unmatched frees), the row chunks (28 bytes a row), the end chunks (4
//	bytes), the groups' summaries (48 bytes per 256 events), the heap
//	after the last event, the groups of whole times (index and times), the
//	big sizes, the unmatched frees and their times, the threads, the rows'
//	threads past the first 65535, the exits (count and sequence numbers),
//	the rows' weights of a sampled trace (count, then chunks of 8 bytes a
//	row), the checksum (a word: the CRC-32C of the bytes before it), and
//	the magic again.

const diskMagic = "HSIDX\x00\x00\x07"

// castagnoli is the checksum's table (hash/crc32 computes it with SSE 4.2).
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ErrBadIndexFile is wrapped by the errors of a cache file that cannot be
// used; Open then builds the index again.
var ErrBadIndexFile = errors.New("query: unusable index file")

// DefaultCacheDir is heapscope's folder for index files:
// $XDG_CACHE_HOME/heapscope/index, else ~/.cache/heapscope/index.
func DefaultCacheDir() (string, error) {
	d, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(d, "heapscope", "index"), nil
}

// cacheName returns the index file's path for the trace at path.
func cacheName(dir, path string, sel analyze.Processes) (string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", err
	}
	var st syscall.Stat_t
	if err := syscall.Stat(abs, &st); err != nil {
		return "", err
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00%d\x00%d\x00%d\x00%d.%d\x00%s", diskMagic, abs, st.Dev, st.Ino, st.Size, st.Mtim.Sec, st.Mtim.Nsec, sel)
	return filepath.Join(dir, hex.EncodeToString(h.Sum(nil)[:16])+".hsi"), nil
}

// ownDir makes dir (mode 0700) and checks that it is a folder of this
// user's, not a symbolic link, not writable by others.
func ownDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !fi.IsDir() || !ok || int(st.Uid) != os.Geteuid() || fi.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("%s: not a folder of this user's, or writable by others: %w", dir, ErrBadIndexFile)
	}
	return nil
}

// diskWriter writes little-endian words and raw columns, and sums them.
type diskWriter struct {
	w   *bufio.Writer
	crc uint32
	err error
}

func (d *diskWriter) u64(v uint64) {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], v)
	d.raw(b[:])
}

func (d *diskWriter) raw(b []byte) {
	if d.err == nil {
		d.crc = crc32.Update(d.crc, castagnoli, b)
		_, d.err = d.w.Write(b)
	}
}

func rawBytes[T any](s []T) []byte {
	if len(s) == 0 {
		return nil
	}
	var t T
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), len(s)*int(unsafe.Sizeof(t)))
}

// pad8 is the padding after n bytes to a multiple of 8.
func pad8(n int) []byte { return make([]byte, (8-n%8)%8) }

// writeCache writes x's columns to file (see createIndexFile), then trims
// the cache folder to its limit (see trimCache).
func (x *Index) writeCache(file string) error {
	dir := filepath.Dir(file)
	if err := ownDir(dir); err != nil {
		return err
	}
	if err := createIndexFile(file, x.writeColumns); err != nil {
		return err
	}
	// A bad value is reported, and the default limit kept.
	limit, err := ParseCacheMax(os.Getenv(CacheMaxEnv))
	return errors.Join(err, trimCache(dir, file, limit))
}

// writeColumns writes x's columns in the layout above.
func (x *Index) writeColumns(w io.Writer) error {
	d := &diskWriter{w: bufio.NewWriterSize(w, 1<<20)}
	d.raw([]byte(diskMagic))
	for _, n := range []int{x.evs.len(), x.rows.len(), len(x.stacks), x.ends.len(), len(x.evs.groups), len(x.unmatched)} {
		d.u64(uint64(n))
	}
	for _, c := range x.rows.chunks {
		d.raw(rawBytes(c))
	}
	for _, c := range x.ends.chunks {
		d.raw(rawBytes(c))
	}
	d.raw(rawBytes(x.evs.groups))
	d.u64(x.evs.endLive)
	d.u64(uint64(x.evs.endBlocks))
	wide := make([]int32, 0, len(x.evs.wide))
	for g := range x.evs.wide {
		wide = append(wide, g)
	}
	sort.Slice(wide, func(i, j int) bool { return wide[i] < wide[j] })
	for _, g := range wide {
		d.u64(uint64(g))
		d.raw(rawBytes(x.evs.wide[g]))
	}
	d.u64(math64)
	rows := make([]uint32, 0, len(x.big))
	for r := range x.big {
		rows = append(rows, r)
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i] < rows[j] })
	d.u64(uint64(len(rows)))
	for _, r := range rows {
		d.u64(uint64(r))
		d.u64(x.big[r])
	}
	d.raw(rawBytes(x.unmatched))
	d.raw(pad8(4 * len(x.unmatched)))
	d.raw(rawBytes(x.unmatchedDT))
	d.raw(pad8(4 * len(x.unmatchedDT)))
	d.u64(uint64(len(x.threads)))
	d.raw(rawBytes(x.threads))
	d.raw(pad8(4 * len(x.threads)))
	rows = rows[:0]
	for r := range x.bigThread {
		rows = append(rows, r)
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i] < rows[j] })
	d.u64(uint64(len(rows)))
	for _, r := range rows {
		d.u64(uint64(r))
		d.u64(uint64(x.bigThread[r]))
	}
	d.u64(uint64(len(x.exits)))
	d.raw(rawBytes(x.exits))
	d.raw(pad8(4 * len(x.exits)))
	d.u64(uint64(x.weights.len()))
	for _, c := range x.weights.chunks {
		d.raw(rawBytes(c))
	}
	d.u64(uint64(d.crc))
	d.raw([]byte(diskMagic))
	if d.err == nil {
		d.err = d.w.Flush()
	}
	return d.err
}

// createIndexFile makes file, mode 0600, of what write writes, and gives
// it its name only once whole (safefile: an unnamed file, or where the
// file system has none a temporary name, renamed over file), so that a
// serve killed while writing leaves nothing behind, or a temporary file
// that trimCache sweeps. Whatever is at its name in the folder (a file
// found bad, a link) is replaced, never written through. Not flushed to
// disk first: a file lost to a crash is built again.
func createIndexFile(file string, write func(io.Writer) error) error {
	f, err := safefile.Create(file, true)
	if err != nil {
		return err
	}
	defer f.Close()
	defer f.Discard()
	if err := write(f); err != nil {
		return err
	}
	if err := f.Commit(); err != nil {
		return fmt.Errorf("naming the index file %s: %w", file, err)
	}
	return f.Close()
}

// CacheMaxEnv names the environment variable that sets the bytes of index
// files a cache folder keeps (see ParseCacheMax, trimCache).
const CacheMaxEnv = "HEAPSCOPE_INDEX_CACHE_MAX"

// defaultCacheMax is the bytes of index files a cache folder keeps unless
// CacheMaxEnv says otherwise: about four indexes of a trace of 20 M heap
// events (537 MB, bench/RESULTS-serve.md), so that the few traces one goes
// back to open without a build, and no more, since a build costs only
// seconds. trimCache lowers it on a filling disk.
const defaultCacheMax = 2 << 30

// ParseCacheMax parses a size in bytes, with an optional suffix K, M, G or
// T (powers of 1024), the value of HEAPSCOPE_INDEX_CACHE_MAX; "" is -1,
// the default (see trimCache). 0 keeps only the index file just written.
func ParseCacheMax(s string) (int64, error) {
	n, err := cachedir.ParseSize(s)
	if err != nil {
		return -1, fmt.Errorf("index cache size %q: want bytes, or a number with K, M, G or T: %w", s, ErrBadOption)
	}
	return n, nil
}

// indexFiles are the names of index files (cacheName) and of their
// temporary files (safefile's, and an older serve's): the only names
// trimCache removes.
var indexFiles = cachedir.Names{
	File: regexp.MustCompile(`^[0-9a-f]{32}\.hsi$`),
	Temp: regexp.MustCompile(`^(\.[0-9a-f]{32}\.hsi|[0-9a-f]{32}\.hsi)\.tmp-[0-9a-f]{16}$`),
}

// trimCache removes index files from dir, least recently used first (by
// modification time, which loadCache renews), until those left hold at
// most limit bytes, but never keep, the file just written; and removes
// temporary files older than an hour (see cachedir.Trim). A limit below 0
// is the default: defaultCacheMax, or a quarter of the file system's free
// space (counting the index files as free) when that is less.
func trimCache(dir, keep string, limit int64) error {
	return cachedir.Trim(dir, indexFiles, keep, limit, defaultCacheMax)
}

// math64 ends a list of chunk indices.
const math64 = ^uint64(0)

// diskReader reads an index file, checking every length, and sums what it
// reads, in order.
type diskReader struct {
	f         *os.File
	off, size int64
	crc       uint32
	err       error
	// mem, when not nil, is the file mapped (size bytes): the row and end
	// chunks are views of it rather than copies (see IndexMap).
	mem []byte
}

// into fills b from the file.
func (d *diskReader) into(b []byte) {
	if d.err != nil {
		return
	}
	if int64(len(b)) > d.size-d.off {
		d.err = fmt.Errorf("truncated at %d: %w", d.off, ErrBadIndexFile)
		return
	}
	if d.mem != nil {
		copy(b, d.mem[d.off:])
	} else if _, err := d.f.ReadAt(b, d.off); err != nil {
		d.err = err
		return
	}
	d.crc = crc32.Update(d.crc, castagnoli, b)
	d.off += int64(len(b))
}

func (d *diskReader) take(n int) []byte {
	if d.err != nil || n < 0 || int64(n) > d.size-d.off {
		d.err = fmt.Errorf("truncated at %d: %w", d.off, ErrBadIndexFile)
		return nil
	}
	b := make([]byte, n)
	d.into(b)
	return b
}

func (d *diskReader) u64() uint64 {
	b := d.take(8)
	if b == nil {
		return 0
	}
	return binary.LittleEndian.Uint64(b)
}

// sliceOf views b (from make: 8-aligned) as n Ts.
func sliceOf[T any](b []byte, n int) []T {
	if n == 0 || len(b) < n*int(unsafe.Sizeof(*new(T))) {
		return make([]T, n)
	}
	return unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(b))), n)
}

// readChunk reads a column's chunk into the arena, or, from a mapped
// file, returns the mapping's bytes as the chunk.
func readChunk[T any](d *diskReader, a *arena) []T {
	if d.mem != nil {
		n := int64(chunkLen * unsafe.Sizeof(*new(T)))
		if d.err != nil || n > d.size-d.off || d.off%8 != 0 {
			if d.err == nil {
				d.err = fmt.Errorf("chunk at %d: %w", d.off, ErrBadIndexFile)
			}
			return nil
		}
		b := d.mem[d.off : d.off+n : d.off+n]
		d.crc = crc32.Update(d.crc, castagnoli, b)
		d.off += n
		return unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(b))), chunkLen)
	}
	c := newChunk[T](a)
	d.into(rawBytes(c))
	return c
}

// IndexMap says whether an index file is read into memory or mapped.
type IndexMap int

const (
	// MapAuto maps an index file larger than a quarter of the memory
	// available (MemAvailable in /proc/meminfo, or what the process's
	// memory cgroup leaves it when that is less), and reads a smaller one.
	MapAuto IndexMap = iota
	// MapAlways maps every index file.
	MapAlways
	// MapNever reads every index file into memory.
	MapNever
)

// ParseIndexMap parses "auto", "always" or "never" ("" is auto), the
// values of serve's HEAPSCOPE_INDEX_MAP.
func ParseIndexMap(s string) (IndexMap, error) {
	switch s {
	case "", "auto":
		return MapAuto, nil
	case "always":
		return MapAlways, nil
	case "never":
		return MapNever, nil
	}
	return MapAuto, fmt.Errorf("index map %q: want auto, always or never: %w", s, ErrBadOption)
}

// ErrBadOption is wrapped by the errors of an option's value that cannot
// be used.
var ErrBadOption = errors.New("query: bad option")

// mapFile says whether an index file of size bytes is mapped under m.
func mapFile(m IndexMap, size int64) bool {
	switch m {
	case MapAlways:
		return true
	case MapNever:
		return false
	}
	avail, ok := memAvailable()
	return ok && size > avail/4
}

// memAvailable returns the memory this process can still use, in bytes:
// MemAvailable of /proc/meminfo, or less when the process's memory cgroup
// (v2 memory.max, v1 memory.limit_in_bytes) leaves less, as in a
// container: its limit less its usage.
func memAvailable() (int64, bool) {
	avail, ok := meminfoAvailable()
	if left, cok := cgroupLeft("/proc/self/cgroup", "/sys/fs/cgroup"); cok && (!ok || left < avail) {
		return left, true
	}
	return avail, ok
}

// meminfoAvailable returns MemAvailable of /proc/meminfo, in bytes.
func meminfoAvailable() (int64, bool) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "MemAvailable:"); ok {
			f := strings.Fields(rest)
			if len(f) == 2 && f[1] == "kB" {
				if kb, err := strconv.ParseInt(f[0], 10, 64); err == nil {
					return kb << 10, true
				}
			}
		}
	}
	return 0, false
}

// cgroupLeft returns what the memory cgroup of the process whose
// /proc/PID/cgroup is at procCgroup leaves it (limit less usage), with the
// cgroup file systems under root; false when it has no limit or none can
// be read. Version 2's unified hierarchy ("0::/path") and version 1's
// memory controller ("N:memory:/path", mounted at root/memory) are read.
func cgroupLeft(procCgroup, root string) (int64, bool) {
	b, err := os.ReadFile(procCgroup)
	if err != nil {
		return 0, false
	}
	read := func(file string) (int64, bool) {
		b, err := os.ReadFile(file)
		if err != nil {
			return 0, false
		}
		n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		return n, err == nil // "max" (no limit) does not parse
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 || strings.Contains(f[2], "..") {
			continue
		}
		var limit, usage int64
		var lok, uok bool
		switch {
		case f[0] == "0" && f[1] == "":
			for _, dir := range []string{filepath.Join(root, f[2]), filepath.Join(root, "unified", f[2])} {
				if limit, lok = read(filepath.Join(dir, "memory.max")); lok {
					usage, uok = read(filepath.Join(dir, "memory.current"))
					break
				}
			}
		case slices.Contains(strings.Split(f[1], ","), "memory"):
			dir := filepath.Join(root, "memory", f[2])
			limit, lok = read(filepath.Join(dir, "memory.limit_in_bytes"))
			usage, uok = read(filepath.Join(dir, "memory.usage_in_bytes"))
			// Version 1 says "no limit" with a huge number.
			lok = lok && limit < 1<<60
		}
		if lok && uok {
			return max(limit-usage, 0), true
		}
	}
	return 0, false
}

// loadCache reads file into an Index holding x's columns, in an arena as
// a built index's (a click on a mapped file costs up to 1.6x the CPU time:
// bench/RESULTS-serve.md), or, when m says so, maps it: the rows and ends are then the file's pages, in
// the page cache rather than the process's memory, so that an index
// larger than the memory still opens. nstacks is the number of stacks x
// has: the file's rows must point at them.
//
// A mapped file is checked as a read one, once. The mapping is private
// and read-only; heapscope never writes an index file in place (it
// renames a new one over it), so the pages checked stay the pages read.
// What remains: another process of this user's that truncates or
// rewrites the file in place while it is mapped makes the server fail
// (SIGBUS, or a row out of range).
func loadCache(file string, nstacks int, m IndexMap) (*Index, error) {
	f, err := os.OpenFile(file, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !fi.Mode().IsRegular() || !ok || int(st.Uid) != os.Geteuid() || fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("%s: not a private file of this user's: %w", file, ErrBadIndexFile)
	}
	if fi.Size() < 2*int64(len(diskMagic)) {
		return nil, fmt.Errorf("%s: size %d: %w", file, fi.Size(), ErrBadIndexFile)
	}
	x := &Index{ready: make(chan struct{})}
	close(x.ready)
	d := &diskReader{f: f, size: fi.Size()}
	if mapFile(m, fi.Size()) && fi.Size() == int64(int(fi.Size())) {
		mem, err := syscall.Mmap(int(f.Fd()), 0, int(fi.Size()), syscall.PROT_READ, syscall.MAP_PRIVATE)
		if err != nil {
			return nil, fmt.Errorf("%s: mapping: %w", file, err)
		}
		d.mem = mem
	}
	if err := x.readCache(d, nstacks); err != nil {
		if d.mem != nil {
			syscall.Munmap(d.mem)
		}
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	// Used: the most recently of the folder's files (see trimCache).
	cachedir.Touch(file)
	if d.mem != nil {
		// Unmapped with the arena, when x is collected.
		a := x.rows.arena
		a.mu.Lock()
		a.regions = append(a.regions, d.mem)
		a.mu.Unlock()
		x.mapped = true
	}
	return x, nil
}

// readCache fills x's columns from the file d, and checks them.
func (x *Index) readCache(d *diskReader, nstacks int) error {
	tail := make([]byte, len(diskMagic))
	if d.mem != nil {
		copy(tail, d.mem[d.size-int64(len(tail)):])
	} else if _, err := d.f.ReadAt(tail, d.size-int64(len(tail))); err != nil {
		return err
	}
	if string(d.take(len(diskMagic))) != diskMagic || string(tail) != diskMagic {
		return fmt.Errorf("not an index file of this version: %w", ErrBadIndexFile)
	}
	nev, nrows, nst, nends, ngroups, nun := d.u64(), d.u64(), d.u64(), d.u64(), d.u64(), d.u64()
	if d.err != nil || nev > maxEvents || nrows > 2*maxEvents || nst != uint64(nstacks) || nends > nrows || nun > nev ||
		ngroups != (nev+groupLen-1)/groupLen {
		return fmt.Errorf("counts %d events, %d rows, %d stacks (want %d stacks), %d ends, %d groups, %d unmatched: %w",
			nev, nrows, nst, nstacks, nends, ngroups, nun, ErrBadIndexFile)
	}
	chunks := func(n uint64) int { return int((n + chunkLen - 1) / chunkLen) }
	krows, kends := chunks(nrows), chunks(nends)
	if int64(krows)*chunkLen*int64(unsafe.Sizeof(rowRec{}))+int64(kends)*chunkLen*4+int64(ngroups)*int64(unsafe.Sizeof(group{})) > d.size {
		return fmt.Errorf("%d rows, %d ends and %d groups do not fit %d bytes: %w", nrows, nends, ngroups, d.size, ErrBadIndexFile)
	}
	a := newArena(x)
	x.rows.arena, x.ends.arena, x.weights.arena = a, a, a
	for k := 0; k < krows && d.err == nil; k++ {
		x.rows.chunks = append(x.rows.chunks, readChunk[rowRec](d, a))
	}
	for k := 0; k < kends && d.err == nil; k++ {
		x.ends.chunks = append(x.ends.chunks, readChunk[uint32](d, a))
	}
	if d.err != nil {
		return d.err
	}
	x.rows.n, x.ends.n = int(nrows), int(nends)
	x.evs = events{n: int(nev), x: x}
	x.evs.groups = sliceOf[group](d.take(int(ngroups)*int(unsafe.Sizeof(group{}))), int(ngroups))
	x.evs.endLive, x.evs.endBlocks = d.u64(), uint32(d.u64())
	for g := d.u64(); d.err == nil && g != math64; g = d.u64() {
		if g >= ngroups || x.evs.wide[int32(g)] != nil {
			return fmt.Errorf("whole times of group %d of %d: %w", g, ngroups, ErrBadIndexFile)
		}
		if x.evs.wide == nil {
			x.evs.wide = map[int32][]int64{}
		}
		x.evs.wide[int32(g)] = sliceOf[int64](d.take(8*groupLen), groupLen)
	}
	nbig := d.u64()
	if nbig > nrows {
		return fmt.Errorf("%d big sizes: %w", nbig, ErrBadIndexFile)
	}
	for i := uint64(0); i < nbig && d.err == nil; i++ {
		r, size := d.u64(), d.u64()
		if x.big == nil {
			x.big = map[uint32]uint64{}
		}
		x.big[uint32(r)] = size
	}
	x.unmatched = sliceOf[uint32](d.take(4*int(nun)), int(nun))
	d.take(len(pad8(4 * int(nun))))
	x.unmatchedDT = sliceOf[uint32](d.take(4*int(nun)), int(nun))
	d.take(len(pad8(4 * int(nun))))
	nthr := d.u64()
	if nthr > manyThreads {
		return fmt.Errorf("%d threads: %w", nthr, ErrBadIndexFile)
	}
	x.threads = sliceOf[uint32](d.take(4*int(nthr)), int(nthr))
	d.take(len(pad8(4 * int(nthr))))
	nbt := d.u64()
	if nbt > nrows {
		return fmt.Errorf("%d rows of other threads: %w", nbt, ErrBadIndexFile)
	}
	for i := uint64(0); i < nbt && d.err == nil; i++ {
		r, tid := d.u64(), d.u64()
		if x.bigThread == nil {
			x.bigThread = map[uint32]uint32{}
		}
		x.bigThread[uint32(r)] = uint32(tid)
	}
	nexits := d.u64()
	if nexits > nev {
		return fmt.Errorf("%d exits: %w", nexits, ErrBadIndexFile)
	}
	x.exits = sliceOf[uint32](d.take(4*int(nexits)), int(nexits))
	d.take(len(pad8(4 * int(nexits))))
	if nw := d.u64(); nw != 0 {
		if nw != nrows || int64(chunks(nw))*chunkLen*int64(unsafe.Sizeof(weight{})) > d.size-d.off {
			return fmt.Errorf("%d weights of %d rows: %w", nw, nrows, ErrBadIndexFile)
		}
		for k := 0; k < chunks(nw) && d.err == nil; k++ {
			x.weights.chunks = append(x.weights.chunks, readChunk[weight](d, a))
		}
		x.weights.n = int(nw)
	}
	if sum := d.crc; d.u64() != uint64(sum) && d.err == nil {
		return fmt.Errorf("checksum: %w", ErrBadIndexFile)
	}
	d.take(len(diskMagic))
	if d.err != nil {
		return d.err
	}
	if d.off != d.size {
		return fmt.Errorf("%d bytes after the end: %w", d.size-d.off, ErrBadIndexFile)
	}
	for what, list := range map[string][]uint32{"unmatched free": x.unmatched, "exit": x.exits} {
		prev := uint32(0)
		for _, u := range list {
			if uint64(u) >= nev || u < prev {
				return fmt.Errorf("%s at event %d of %d: %w", what, u, nev, ErrBadIndexFile)
			}
			prev = u
		}
	}
	for g := range x.evs.groups {
		if x.evs.groups[g].peakOff >= groupLen {
			return fmt.Errorf("group %d: %w", g, ErrBadIndexFile)
		}
	}
	if err := x.checkRows(nev, nstacks); err != nil {
		return err
	}
	if err := x.checkEnds(); err != nil {
		return err
	}
	x.summarizeRows()
	return nil
}

// checkEnds checks that the ends list ended blocks in the order of their
// ends, so that a search in it finds what it looks for.
func (x *Index) checkEnds() error {
	prev := uint32(0)
	for k := 0; k < x.ends.len(); k++ {
		i := *x.ends.at(k)
		if int(i) >= x.rows.len() {
			return fmt.Errorf("end %d: row %d of %d: %w", k, i, x.rows.len(), ErrBadIndexFile)
		}
		r := x.rows.at(int(i))
		if r.end == never || r.flags&fNoBlock != 0 || r.end < prev {
			return fmt.Errorf("end %d: %w", k, ErrBadIndexFile)
		}
		prev = r.end
	}
	return nil
}

// checkRows checks that every row points inside the index, in order, so
// that no answer reads outside a column.
func (x *Index) checkRows(nev uint64, nstacks int) error {
	prev := uint32(0)
	for i := 0; i < x.rows.len(); i++ {
		r := x.rows.at(i)
		if r.alloc < prev || uint64(r.alloc) >= nev || r.stack < 0 || int(r.stack) >= nstacks ||
			r.thread != manyThreads && int(r.thread) >= len(x.threads) ||
			r.end != never && (r.end < r.alloc || uint64(r.end) >= nev || r.life == 0 && r.flags&fNoBlock != 0 || r.life > 64) {
			return fmt.Errorf("row %d: %w", i, ErrBadIndexFile)
		}
		prev = r.alloc
	}
	return nil
}
