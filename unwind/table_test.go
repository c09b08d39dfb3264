package unwind

import (
	"bytes"
	"debug/elf"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"testing"
)

const libc = "/lib/x86_64-linux-gnu/libc.so.6"

func TestMarshalRoundTrip(t *testing.T) {
	tab, err := Build(debianFile(t, libc))
	if err != nil {
		t.Fatal(err)
	}
	if len(tab.BuildID) == 0 {
		t.Fatal("libc has no build-id")
	}
	b, err := tab.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	if len(b) != tab.Size() {
		t.Fatalf("marshaled %d bytes, Size says %d", len(b), tab.Size())
	}
	var got Table
	if err := got.UnmarshalBinary(b); err != nil {
		t.Fatal(err)
	}
	tab.Stats = Stats{}
	if !reflect.DeepEqual(&got, tab) {
		t.Fatal("table differs after a round trip")
	}
	// every truncation and a few corruptions are errors, never panics
	for _, n := range []int{0, 3, headerSize - 1, headerSize, len(b) - 1} {
		if err := got.UnmarshalBinary(b[:n]); !errors.Is(err, ErrBadTable) {
			t.Errorf("%d bytes: %v, want ErrBadTable", n, err)
		}
	}
	bad := bytes.Clone(b)
	off := headerSize + pad8(len(tab.BuildID))
	copy(bad[off+EntrySize:], bad[off:off+4]) // entry 1's address = entry 0's
	if err := got.UnmarshalBinary(bad); !errors.Is(err, ErrBadTable) {
		t.Errorf("unsorted: %v, want ErrBadTable", err)
	}
}

// Adjacent identical rules are merged, so no two neighbours say the same.
func TestEntriesMerged(t *testing.T) {
	tab, err := Build(debianFile(t, libc))
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i < len(tab.Entries); i++ {
		if tab.Entries[i].sameRule(tab.Entries[i-1]) {
			t.Fatalf("entries %d and %d have the same rule: %v, %v", i-1, i, tab.Entries[i-1], tab.Entries[i])
		}
	}
	// 8 bytes an entry: a binary search takes at most ~20 steps
	if n := len(tab.Entries); n > 1<<20 {
		t.Fatalf("%d entries", n)
	}
}

// corruptEhFrame copies an ELF file and applies edit to its .eh_frame bytes.
func corruptEhFrame(t *testing.T, src string, edit func(d []byte)) string {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	f, err := elf.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	s := f.Section(".eh_frame")
	f.Close()
	if s == nil {
		t.Fatalf("%s has no .eh_frame", src)
	}
	edit(b[s.Offset : s.Offset+s.Size])
	p := filepath.Join(t.TempDir(), "bad")
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestBadCFIIsAnError(t *testing.T) {
	src := debianFile(t, "/usr/bin/sqlite3")
	cases := map[string]func(d []byte){
		"CIE version":      func(d []byte) { d[8] = 9 },
		"length past end":  func(d []byte) { d[0], d[1], d[2], d[3] = 0xf0, 0xff, 0xff, 0x7f },
		"unknown opcode":   func(d []byte) { copy(d[0x18+0x10:], []byte{0x1f, 0x1f, 0x1f, 0x1f}) },
		"restore no state": func(d []byte) { copy(d[0x18+0x10:], []byte{0x0b, 0x0b, 0x0b, 0x0b}) },
	}
	for name, edit := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := Build(corruptEhFrame(t, src, edit))
			if !errors.Is(err, ErrBadCFI) {
				t.Fatalf("got %v, want ErrBadCFI", err)
			}
		})
	}
}

func TestNoCFI(t *testing.T) {
	// a Go test binary has .debug_frame; a relocatable data file has none
	p := filepath.Join(t.TempDir(), "empty.o")
	src := filepath.Join(t.TempDir(), "e.c")
	if err := os.WriteFile(src, []byte("int x = 1;\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := runCmd("gcc", "-c", "-fno-asynchronous-unwind-tables", "-o", p, src); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	if _, err := Build(p); !errors.Is(err, ErrNoCFI) {
		t.Fatalf("got %v, want ErrNoCFI", err)
	}
}

// tempCache opens a cache in a new folder of the test's.
func tempCache(t *testing.T) (*Cache, string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "cache")
	c, err := OpenCache(dir)
	if err != nil {
		t.Fatal(err)
	}
	return c, dir
}

func TestCache(t *testing.T) {
	c, dir := tempCache(t)
	p := debianFile(t, "/usr/bin/sqlite3")
	tab, err := c.Load(p)
	if err != nil {
		t.Fatal(err)
	}
	file := c.path(tab.BuildID)
	fi, err := os.Lstat(file)
	if err != nil {
		t.Fatalf("not stored: %v", err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("stored with mode %v", fi.Mode().Perm())
	}
	got, err := c.Get(tab.BuildID)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.Entries, tab.Entries) {
		t.Fatal("cached table differs")
	}
	// a symlink in place of the file is not followed
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	b, _ := tab.MarshalBinary()
	other := filepath.Join(t.TempDir(), "elsewhere")
	if err := os.WriteFile(other, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(other, file); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(tab.BuildID); err == nil {
		t.Fatal("Get followed a symlink")
	}
	os.Remove(file)
	// a file others can write is not trusted
	if err := os.WriteFile(file, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(file, 0o666); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(tab.BuildID); !errors.Is(err, ErrUntrusted) {
		t.Fatalf("world-writable file: %v, want ErrUntrusted", err)
	}
	// a missing entry says so
	if _, err := c.Get([]byte{1, 2, 3}); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing: %v, want fs.ErrNotExist", err)
	}
	// a folder others can write is refused
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenCache(dir); !errors.Is(err, ErrUntrusted) {
		t.Fatalf("world-writable folder: %v, want ErrUntrusted", err)
	}
}

// The unwinder's cost to build: Go allocations (an upper bound on the heap it
// needs) and time, for the large files of issue 11/15 (goal < 200 ms,
// < 10 MiB). Results in bench/RESULTS-unwind.md.
func BenchmarkBuild(b *testing.B) {
	for _, p := range []string{libc, "/usr/lib/x86_64-linux-gnu/libpython3.11.so.1.0", "/usr/lib/x86_64-linux-gnu/libstdc++.so.6"} {
		b.Run(filepath.Base(p), func(b *testing.B) {
			if _, err := os.Stat(p); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			var tab *Table
			var peak uint64
			for b.Loop() {
				runtime.GC()
				var before, after runtime.MemStats
				runtime.ReadMemStats(&before)
				var err error
				tab, err = Build(p)
				if err != nil {
					b.Fatal(err)
				}
				runtime.ReadMemStats(&after)
				peak = max(peak, after.TotalAlloc-before.TotalAlloc)
			}
			b.ReportMetric(float64(tab.Size()), "table-bytes")
			b.ReportMetric(float64(len(tab.Entries)), "entries")
			b.ReportMetric(float64(peak)/(1<<20), "MiB-allocated")
		})
	}
}

func BenchmarkLookup(b *testing.B) {
	tab, err := Build(libc)
	if err != nil {
		b.Fatal(err)
	}
	n := uint64(len(tab.Entries))
	i := uint64(0)
	for b.Loop() {
		i = (i*6364136223846793005 + 1442695040888963407)
		e := tab.Entries[(i>>33)%n]
		tab.Lookup(tab.Base + uint64(e.Addr))
	}
}
