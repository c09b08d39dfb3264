package query

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// openCached builds path's index with the index files in dir and waits
// until its file is written.
func openCached(t *testing.T, path, dir string) (x *Index, read bool) {
	t.Helper()
	return openCachedMap(t, path, dir, MapAuto)
}

// openCachedMap is openCached with the index file read or mapped as m says.
func openCachedMap(t *testing.T, path, dir string, m IndexMap) (x *Index, read bool) {
	t.Helper()
	x, err := Build(path, Options{CacheDir: dir, IndexMap: m})
	if err != nil {
		t.Fatal(err)
	}
	if err := x.WaitSaved(); err != nil {
		t.Fatal(err)
	}
	_, read = x.CacheFile()
	return x, read
}

// sameAnswers checks that y answers as x: the whole trace, windows, an
// instant, a thread, the timeline.
func sameAnswers(t *testing.T, x, y *Index) {
	t.Helper()
	if x.Events() != y.Events() || x.Blocks() != y.Blocks() || x.Start() != y.Start() || x.End() != y.End() {
		t.Fatalf("events %d/%d, blocks %d/%d, span %d-%d / %d-%d", x.Events(), y.Events(), x.Blocks(), y.Blocks(), x.Start(), x.End(), y.Start(), y.End())
	}
	span := x.End() - x.Start()
	for _, f := range []Filter{{}, {From: x.Start() + span/3, To: x.Start() + 2*span/3}, {At: x.Start() + span/2}, {TID: 10}, {From: x.Start() + span/2, PID: 2}} {
		a, b := x.Window(f), y.Window(f)
		if !reflect.DeepEqual(a, b) {
			t.Errorf("window %+v differs", f)
		}
		if !reflect.DeepEqual(x.Timeline(a.Span, 300), y.Timeline(b.Span, 300)) {
			t.Errorf("timeline of %+v differs", f)
		}
	}
}

// The index is written once beside heapscope's other files and mapped by
// the next Open of the same trace, which answers the same; a changed
// trace is indexed again.
func TestIndexFileReused(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cache")
	path := filepath.Join(t.TempDir(), "random.hst")
	writeRandomTrace(t, path, 1)
	x, read := openCached(t, path, dir)
	if read {
		t.Fatal("the first open read an index file")
	}
	file, _ := x.CacheFile()
	fi, err := os.Lstat(file)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 || !fi.Mode().IsRegular() {
		t.Errorf("index file %s: mode %v", file, fi.Mode())
	}
	if d, err := os.Lstat(dir); err != nil || d.Mode().Perm() != 0o700 {
		t.Errorf("cache folder: %v, %v", d, err)
	}
	y, read := openCached(t, path, dir)
	if !read {
		t.Fatal("the second open built the index again")
	}
	sameAnswers(t, x, y)

	// Another trace at the same path: not answered from the old file.
	writeRandomTrace(t, path, 2)
	z, read := openCached(t, path, dir)
	if read {
		t.Fatal("a changed trace was answered from the index of the old one")
	}
	if z.Events() == x.Events() && reflect.DeepEqual(z.Window(Filter{}).Total, x.Window(Filter{}).Total) {
		t.Error("the new trace answers as the old")
	}
}

// An index file that is cut short, damaged, not a file of this user's, or
// a symbolic link, is not used: the index is built again (and the file
// written again), with the same answers, and nothing panics.
func TestIndexFileBad(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cache")
	path := filepath.Join(t.TempDir(), "random.hst")
	writeRandomTrace(t, path, 3)
	x, _ := openCached(t, path, dir)
	file, _ := x.CacheFile()
	good, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	// The first row's stack, past the header.
	rowOff := len(diskMagic) + 6*8 + int(unsafe.Offsetof(rowRec{}.stack))
	damage := map[string]func() error{
		"truncated": func() error { return os.WriteFile(file, good[:len(good)/2], 0o600) },
		"empty":     func() error { return os.WriteFile(file, nil, 0o600) },
		"row": func() error {
			b := append([]byte(nil), good...)
			b[rowOff], b[rowOff+1], b[rowOff+2] = 0xff, 0xff, 0x7f
			return os.WriteFile(file, b, 0o600)
		},
		"thread": func() error {
			b := append([]byte(nil), good...)
			o := len(diskMagic) + 6*8 + int(unsafe.Offsetof(rowRec{}.thread))
			b[o], b[o+1] = 0xfe, 0xff
			return os.WriteFile(file, b, 0o600)
		},
		"end": func() error {
			// The first end, past the rows' chunks: a row out of range.
			b := append([]byte(nil), good...)
			o := len(diskMagic) + 6*8 + (x.Blocks()+chunkLen-1)/chunkLen*chunkLen*int(unsafe.Sizeof(rowRec{}))
			b[o+3] = 0x7f
			return os.WriteFile(file, b, 0o600)
		},
		"count": func() error {
			b := append([]byte(nil), good...)
			b[len(diskMagic)+8] ^= 0x40 // the rows
			return os.WriteFile(file, b, 0o600)
		},
		"open to others": func() error {
			if err := os.WriteFile(file, good, 0o600); err != nil {
				return err
			}
			return os.Chmod(file, 0o644)
		},
		"symlink": func() error {
			other := filepath.Join(t.TempDir(), "planted")
			if err := os.WriteFile(other, good, 0o600); err != nil {
				return err
			}
			os.Remove(file)
			return os.Symlink(other, file)
		},
	}
	if os.Geteuid() == 0 {
		damage["another user's"] = func() error {
			if err := os.WriteFile(file, good, 0o600); err != nil {
				return err
			}
			return os.Chown(file, 65534, 65534)
		}
	}
	for name, f := range damage {
		for _, m := range []IndexMap{MapNever, MapAlways} {
			t.Run(fmt.Sprintf("%s/map%d", name, m), func(t *testing.T) {
				os.Remove(file)
				if err := f(); err != nil {
					t.Fatal(err)
				}
				y, read := openCachedMap(t, path, dir, m)
				if read {
					t.Fatal("a bad index file was used")
				}
				sameAnswers(t, x, y)
				fi, err := os.Lstat(file)
				if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o600 {
					t.Fatalf("the index file was not written again: %v, %v", fi, err)
				}
				if _, read := openCachedMap(t, path, dir, m); !read {
					t.Error("the index file written again is not used")
				}
			})
		}
	}
}

// With IndexMap MapAlways the index is built in a file of the cache
// folder, and its index file is mapped when read: both answer as the index
// built in memory and as the file read into memory (windows, timelines,
// flame graphs of every cost, peaks, the window's report); on a trace of
// several chunks of rows, so that every chunk is a view of a mapping. The
// rows are file pages: the process maps a file of the cache folder (the
// unnamed one, then the index file) at least as large as the rows.
func TestIndexFileMapped(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cache")
	path := filepath.Join(t.TempDir(), "random.hst")
	writeRandomTraceN(t, path, 5, 3*chunkLen)
	inMem, err := Build(path, Options{IndexMap: MapAlways}) // no cache folder: in memory
	if err != nil {
		t.Fatal(err)
	}
	if none, err := Open(path, Options{NoIndex: true, IndexMap: MapAlways}); err != nil || none.Mapped() {
		t.Fatalf("without an index: %v, mapped", err)
	}
	if inMem.Mapped() || inMem.rows.len() <= chunkLen {
		t.Fatalf("mapped %v, %d rows: want in memory, several chunks", inMem.Mapped(), inMem.rows.len())
	}
	rowBytes := int64(inMem.rows.len()) * int64(unsafe.Sizeof(rowRec{}))
	spilled, read := openCachedMap(t, path, dir, MapAlways)
	if read || !spilled.Mapped() {
		t.Fatalf("read %v, mapped %v: want built in a file", read, spilled.Mapped())
	}
	if got := mappedFrom(t, dir+"/"); got < rowBytes {
		t.Errorf("built in a file: %d bytes of %s mapped, want at least the rows' %d", got, dir, rowBytes)
	}
	mapped, read := openCachedMap(t, path, dir, MapAlways)
	if !read || !mapped.Mapped() {
		t.Fatalf("read %v, mapped %v: want the file mapped", read, mapped.Mapped())
	}
	if file, _ := mapped.CacheFile(); mappedFrom(t, file) < rowBytes {
		t.Errorf("%s: %d bytes mapped, want at least the rows' %d", file, mappedFrom(t, file), rowBytes)
	}
	readIn, read := openCachedMap(t, path, dir, MapNever)
	if !read || readIn.Mapped() {
		t.Fatalf("read %v, mapped %v: want the file read", read, readIn.Mapped())
	}
	for _, y := range []*Index{spilled, mapped, readIn} {
		sameAnswers(t, inMem, y)
		sameViews(t, inMem, y)
	}
	// Unmapped when the indexes are collected: a new open maps the file
	// again and answers the same.
	spilled, mapped, readIn = nil, nil, nil
	runtime.GC()
	runtime.GC()
	again, _ := openCachedMap(t, path, dir, MapAlways)
	sameViews(t, inMem, again)
}

// mappedFrom returns the bytes the process maps of files whose paths
// begin with prefix.
func mappedFrom(t *testing.T, prefix string) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 6 || !strings.HasPrefix(f[5], prefix) {
			continue
		}
		var lo, hi int64
		if _, err := fmt.Sscanf(f[0], "%x-%x", &lo, &hi); err != nil {
			t.Fatal(err)
		}
		n += hi - lo
	}
	return n
}

// sameViews checks that y's flame graphs, in both directions and for
// every cost, and window reports answer as x's, for a few windows.
func sameViews(t *testing.T, x, y *Index) {
	t.Helper()
	span := x.End() - x.Start()
	for _, f := range []Filter{{}, {From: x.Start() + span/4, To: x.Start() + span/2, At: x.Start() + span/3}, {From: x.Start() + span/2, TID: 20}} {
		a, b := x.Window(f), y.Window(f)
		for c := Cost(0); c < numCosts; c++ {
			for _, inv := range []bool{false, true} {
				if !reflect.DeepEqual(x.Flame(a, c, inv, 0, 0), y.Flame(b, c, inv, 0, 0)) {
					t.Errorf("window %+v: flame graph of cost %d (inverted %v) differs", f, c, inv)
				}
			}
		}
		pa, okA := x.Peak(a.Span)
		pb, okB := y.Peak(b.Span)
		if okA != okB || !reflect.DeepEqual(pa, pb) {
			t.Errorf("window %+v: peak differs", f)
		}
		if !reflect.DeepEqual(comparable(x.WindowReport(a).Document(0)), comparable(y.WindowReport(b).Document(0))) {
			t.Errorf("window %+v: report (sites) differs", f)
		}
	}
}

// A block's lifetime kept in its row is the time between its two events in
// the event column: a window's lifetimes are those of its blocks.
func TestRowLifetimes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "random.hst")
	writeRandomTrace(t, path, 4)
	x := build(t, path)
	span := x.End() - x.Start()
	for _, f := range []Filter{{}, {From: x.Start() + span/4, To: x.Start() + span/2}} {
		res := x.Window(f)
		var want Lifetimes
		for i := 0; i < x.rows.len(); i++ {
			r := x.rows.at(i)
			if r.flags&(fNoBlock|fCont) != 0 || int64(r.alloc) < res.Span.S0 || int64(r.alloc) >= res.Span.S1 {
				continue
			}
			if r.end == never || r.exited() {
				want.Live++ // never freed
				continue
			}
			want.Buckets[bits.Len64(uint64(x.evs.time(int(r.end))-x.evs.time(int(r.alloc))))]++
		}
		if res.Lifetime != want {
			t.Errorf("window %+v: lifetimes %v, from the event column %v", f, res.Lifetime, want)
		}
	}
}

// HEAPSCOPE_INDEX_MAP's values parse, and another is refused with
// ErrBadOption.
func TestParseIndexMap(t *testing.T) {
	for s, want := range map[string]IndexMap{"": MapAuto, "auto": MapAuto, "always": MapAlways, "never": MapNever} {
		if got, err := ParseIndexMap(s); err != nil || got != want {
			t.Errorf("%q: %v, %v; want %v", s, got, err, want)
		}
	}
	if _, err := ParseIndexMap("yes"); !errors.Is(err, ErrBadOption) {
		t.Errorf("yes: %v, want ErrBadOption", err)
	}
}

// cacheFiles returns the names in dir.
func cacheFiles(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range es {
		names = append(names, e.Name())
	}
	return names
}

// With HEAPSCOPE_INDEX_CACHE_MAX at two index files, writing a third
// removes the least recently used: the oldest written, as the one read
// since is used again.
func TestIndexFilesEvicted(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cache")
	traces := t.TempDir()
	writeRandomTrace(t, filepath.Join(traces, "a.hst"), 6)
	trace, err := os.ReadFile(filepath.Join(traces, "a.hst"))
	if err != nil {
		t.Fatal(err)
	}
	// Three traces alike but for their paths: three index files of a size.
	var files []string
	var size int64
	for i, name := range []string{"a.hst", "b.hst", "c.hst"} {
		path := filepath.Join(traces, name)
		if err := os.WriteFile(path, trace, 0o600); err != nil {
			t.Fatal(err)
		}
		if i == 2 {
			// a read again: used after b.
			if _, read := openCached(t, filepath.Join(traces, "a.hst"), dir); !read {
				t.Fatal("a's index file was not read")
			}
			t.Setenv(CacheMaxEnv, strconv.FormatInt(2*size, 10))
		}
		x, _ := openCached(t, path, dir)
		file, _ := x.CacheFile()
		files = append(files, file)
		fi, err := os.Stat(file)
		if err != nil {
			t.Fatal(err)
		}
		size = fi.Size()
		if i < 2 {
			// Written hours ago, a before b (mtimes written in the same
			// clock tick can be equal).
			old := time.Now().Add(-time.Duration(3-i) * time.Hour)
			if err := os.Chtimes(file, old, old); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i, want := range []bool{true, false, true} {
		if _, err := os.Stat(files[i]); (err == nil) != want {
			t.Errorf("index file %d of 3: kept %v, want %v (folder: %v)", i+1, err == nil, want, cacheFiles(t, dir))
		}
	}
}

// trimCache removes the least recently used index files until the rest
// fit the limit, and temporary files older than an hour; never the file
// just written, a younger temporary file, a symbolic link, a file of
// another name or of another user, or anything outside the folder.
func TestTrimCache(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cache")
	if err := ownDir(dir); err != nil {
		t.Fatal(err)
	}
	outside := filepath.Join(t.TempDir(), "target")
	if err := os.WriteFile(outside, make([]byte, 1000), 0o600); err != nil {
		t.Fatal(err)
	}
	idx := func(c byte) string { return strings.Repeat(string(c), 32) + ".hsi" }
	now := time.Now()
	type file struct {
		name string
		size int
		age  time.Duration
		kept bool
	}
	files := []file{
		{idx('a'), 100, 5 * time.Hour, false}, // the oldest: removed
		{idx('b'), 100, 4 * time.Hour, false}, // removed
		{idx('c'), 100, 3 * time.Hour, true},  // the rest fit: kept
		{idx('d'), 100, 2 * time.Hour, true},
		{idx('e'), 100, 6 * time.Hour, true},                                  // just written: kept, however old
		{idx('f') + ".tmp-0123456789abcdef", 100, 2 * time.Hour, false},       // a killed writer's
		{idx('f') + ".tmp-fedcba9876543210", 100, time.Minute, true},          // being written
		{"." + idx('f') + ".tmp-0123456789abcdef", 100, 2 * time.Hour, false}, // safefile's, killed
		{"." + idx('f') + ".tmp-fedcba9876543210", 100, time.Minute, true},    // safefile's, being written
		{"." + idx('f'), 100, 9 * time.Hour, true},
		{"notes.txt", 100, 9 * time.Hour, true},
		{idx('g') + ".bak", 100, 9 * time.Hour, true},
		{strings.Repeat("A", 32) + ".hsi", 100, 9 * time.Hour, true},
	}
	if os.Geteuid() == 0 {
		files = append(files, file{idx('h'), 100, 9 * time.Hour, true}) // chowned below
	}
	for _, f := range files {
		p := filepath.Join(dir, f.name)
		if err := os.WriteFile(p, make([]byte, f.size), 0o600); err != nil {
			t.Fatal(err)
		}
		if f.name == idx('h') {
			if err := os.Chown(p, 65534, 65534); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Chtimes(p, now.Add(-f.age), now.Add(-f.age)); err != nil {
			t.Fatal(err)
		}
	}
	// Links named as index files, older than all: to a file outside, and
	// to the folder's oldest file.
	for _, l := range []struct{ name, to string }{{idx('0'), outside}, {idx('1'), filepath.Join(dir, idx('a'))}} {
		if err := os.Symlink(l.to, filepath.Join(dir, l.name)); err != nil {
			t.Fatal(err)
		}
		ts := []unix.Timespec{unix.NsecToTimespec(0), unix.NsecToTimespec(0)}
		if err := unix.UtimesNanoAt(unix.AT_FDCWD, filepath.Join(dir, l.name), ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			t.Fatal(err)
		}
		files = append(files, file{name: l.name, kept: true})
	}
	if err := trimCache(dir, filepath.Join(dir, idx('e')), 300); err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if _, err := os.Lstat(filepath.Join(dir, f.name)); (err == nil) != f.kept {
			t.Errorf("%s: kept %v, want %v", f.name, err == nil, f.kept)
		}
	}
	if _, err := os.Stat(outside); err != nil {
		t.Errorf("the file outside the folder: %v", err)
	}

	// The default limit keeps files that fit it.
	if err := trimCache(dir, "", -1); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(dir, idx('c'))); err != nil {
		t.Errorf("under the default limit: %v", err)
	}

	// A folder that is a symbolic link is not trimmed.
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	if err := trimCache(link, "", 0); err == nil {
		t.Error("a linked folder was trimmed")
	}
	if _, err := os.Lstat(filepath.Join(dir, idx('c'))); err != nil {
		t.Errorf("through a linked folder: %v", err)
	}
}

// An index file is written as an unnamed file that takes its name once
// whole: a write that fails, or a writer killed in the middle, leaves
// nothing in the folder; a whole file replaces an older one. (The named
// temporary file of file systems without unnamed files is safefile's,
// tested there.)
func TestIndexFileWriteInterrupted(t *testing.T) {
	if file := os.Getenv("HEAPSCOPE_TEST_KILLED_WRITER"); file != "" {
		// The writer killed by the test below: half a file, then wait.
		createIndexFile(file, func(w io.Writer) error {
			if _, err := w.Write(make([]byte, 1<<20)); err != nil {
				return err
			}
			fmt.Println("written")
			time.Sleep(time.Hour)
			return nil
		})
		os.Exit(1)
	}
	dir := filepath.Join(t.TempDir(), "cache")
	if err := ownDir(dir); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, strings.Repeat("a", 32)+".hsi")
	errWrite := errors.New("disk full")
	failing := func(w io.Writer) error {
		w.Write([]byte("half"))
		return errWrite
	}
	for name, create := range map[string]func(string, func(io.Writer) error) error{"unnamed": createIndexFile} {
		if err := create(file, failing); !errors.Is(err, errWrite) {
			t.Errorf("%s: %v, want %v", name, err, errWrite)
		}
		if names := cacheFiles(t, dir); len(names) != 0 {
			t.Errorf("%s: a failed write left %v", name, names)
		}
		for _, content := range []string{"old", "new"} {
			if err := create(file, func(w io.Writer) error { _, err := w.Write([]byte(content)); return err }); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
		}
		if b, err := os.ReadFile(file); err != nil || string(b) != "new" {
			t.Errorf("%s: %q, %v; want new", name, b, err)
		}
		if fi, err := os.Lstat(file); err != nil || fi.Mode() != 0o600 {
			t.Errorf("%s: %v, %v; want a file of mode 0600", name, fi, err)
		}
		if names := cacheFiles(t, dir); len(names) != 1 {
			t.Errorf("%s: the folder holds %v, want the file alone", name, names)
		}
		os.Remove(file)
	}

	cmd := exec.Command(os.Args[0], "-test.run=^TestIndexFileWriteInterrupted$")
	cmd.Env = append(os.Environ(), "HEAPSCOPE_TEST_KILLED_WRITER="+file)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if line != "written\n" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("the writer said %q, %v", line, err)
	}
	during := cacheFiles(t, dir)
	cmd.Process.Kill()
	cmd.Wait()
	if len(during) != 0 {
		t.Errorf("while writing, the folder holds %v", during)
	}
	if names := cacheFiles(t, dir); len(names) != 0 {
		t.Errorf("a writer killed in the middle left %v", names)
	}
}

// HEAPSCOPE_INDEX_CACHE_MAX's values parse, and another is refused with
// ErrBadOption.
func TestParseCacheMax(t *testing.T) {
	for s, want := range map[string]int64{"": -1, "0": 0, "4096": 4096, "512k": 512 << 10, "3M": 3 << 20, "2G": 2 << 30, "1t": 1 << 40} {
		if got, err := ParseCacheMax(s); err != nil || got != want {
			t.Errorf("%q: %d, %v; want %d", s, got, err, want)
		}
	}
	for _, s := range []string{"G", "-1", "1.5G", "2GB", "9000000T", "lots"} {
		if _, err := ParseCacheMax(s); !errors.Is(err, ErrBadOption) {
			t.Errorf("%q: %v, want ErrBadOption", s, err)
		}
	}
}

// A flipped bit anywhere in an index file (its counts, rows, ends, groups,
// times, threads, the checksum itself) makes it unusable: the index is
// built again, never answered wrong. Issue 27 #12: 3 of 14 single-bit
// flips changed answers silently.
func TestIndexFileBitFlips(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cache")
	path := filepath.Join(t.TempDir(), "random.hst")
	writeRandomTraceN(t, path, 7, chunkLen+100)
	x, _ := openCached(t, path, dir)
	file, _ := x.CacheFile()
	good, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	// Every byte of the first and the last 512, and 1000 more spread over
	// the rest, each with a bit of its own, flipped in place and back.
	var offs []int
	for o := 0; o < len(good); o++ {
		if o < 512 || o >= len(good)-512 || o%max(len(good)/1000, 1) == 0 {
			offs = append(offs, o)
		}
	}
	f, err := os.OpenFile(file, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	used := 0
	for i, o := range offs {
		if _, err := f.WriteAt([]byte{good[o] ^ 1<<(i%8)}, int64(o)); err != nil {
			t.Fatal(err)
		}
		for _, m := range []IndexMap{MapNever, MapAlways} {
			y, err := loadCache(file, len(x.stacks), m)
			if err == nil {
				used++
				if used <= 5 {
					t.Errorf("a bit flipped at byte %d of %d (map %d): the file was used (answers the same: %v)", o, len(good), m,
						reflect.DeepEqual(x.Window(Filter{}), y.Window(Filter{})))
				}
			} else if !errors.Is(err, ErrBadIndexFile) {
				t.Errorf("a bit flipped at byte %d: %v, want ErrBadIndexFile", o, err)
			}
		}
		if _, err := f.WriteAt(good[o:o+1], int64(o)); err != nil {
			t.Fatal(err)
		}
	}
	if used > 0 {
		t.Errorf("%d of %d files with a flipped bit were used", used, 2*len(offs))
	}
	if _, err := loadCache(file, len(x.stacks), MapNever); err != nil {
		t.Errorf("the good file: %v", err)
	}
}
