package unwind

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// A flipped bit anywhere in a cache file (the table's header, build-id,
// entries, the trailer) makes Get refuse it, and Load builds the table
// again and stores a good file; never a table with a wrong entry. Issue
// 27 #12: corrupted unwind tables gave wrong stacks.
func TestCacheBitFlips(t *testing.T) {
	c, _ := tempCache(t)
	p := debianFile(t, "/usr/bin/sqlite3")
	tab, err := c.Load(p)
	if err != nil {
		t.Fatal(err)
	}
	file := c.path(tab.BuildID)
	good, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(file, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	used := 0
	for o := 0; o < len(good); o += max(1, len(good)/3000) {
		if _, err := f.WriteAt([]byte{good[o] ^ 1<<(o%8)}, int64(o)); err != nil {
			t.Fatal(err)
		}
		if got, err := c.Get(tab.BuildID); err == nil {
			used++
			if used <= 5 {
				t.Errorf("a bit flipped at byte %d of %d: the table was used (entries the same: %v)", o, len(good), reflect.DeepEqual(got.Entries, tab.Entries))
			}
		} else if !errors.Is(err, ErrBadTable) {
			t.Errorf("a bit flipped at byte %d: %v, want ErrBadTable", o, err)
		}
		if _, err := f.WriteAt(good[o:o+1], int64(o)); err != nil {
			t.Fatal(err)
		}
	}
	if used > 0 {
		t.Errorf("%d damaged files were used", used)
	}
	// Damaged: built again and stored whole.
	if _, err := f.WriteAt([]byte{good[len(good)/2] ^ 0x10}, int64(len(good)/2)); err != nil {
		t.Fatal(err)
	}
	again, err := c.Load(p)
	if err != nil || !reflect.DeepEqual(again.Entries, tab.Entries) {
		t.Fatalf("Load of a damaged cache file: %v", err)
	}
	if got, err := c.Get(tab.BuildID); err != nil || !reflect.DeepEqual(got.Entries, tab.Entries) {
		t.Errorf("the file stored again: %v", err)
	}
}

// The cache keeps its most recently used tables up to
// HEAPSCOPE_UNWIND_CACHE_MAX bytes (a table read counts as used), never
// fewer than the one just stored, and sweeps the temporary files killed
// writers left; it removes nothing else. Issue 27 #12: the unwind cache
// grew without limit and kept .tmp-* files for ever.
func TestCacheTrimmed(t *testing.T) {
	c, dir := tempCache(t)
	table := func(i int) *Table {
		return &Table{BuildID: []byte{0xb0, byte(i)}, Entries: []Entry{{Addr: 0, Kind: KindRSP, CFAOffset: 8}, {Addr: uint32(16 * (i + 1))}}}
	}
	size := func() int64 {
		b, _ := table(0).MarshalBinary()
		return int64(len(b) + 8)
	}()
	old := time.Now().Add(-2 * time.Hour)
	leftovers := map[string]bool{ // name: kept
		".tmp-123456789": false, // an older heapscope's, killed
		"." + strings.Repeat("ab", 20) + ".v1.b1.hsuw.tmp-0123456789abcdef": false, // safefile's, killed
		"notes.txt": true,
	}
	for name := range leftovers {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		os.Chtimes(filepath.Join(dir, name), old, old)
	}
	young := ".tmp-987654321" // being written
	if err := os.WriteFile(filepath.Join(dir, young), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	leftovers[young] = true

	t.Setenv(CacheMaxEnv, fmt.Sprint(2*size))
	for i := range 3 {
		if err := c.Put(table(i)); err != nil {
			t.Fatal(err)
		}
		// Written in order, a second apart for the order of their times.
		at := time.Now().Add(time.Duration(i-10) * time.Second)
		os.Chtimes(c.path(table(i).BuildID), at, at)
		if i == 0 {
			continue
		}
		if _, err := c.Get(table(0).BuildID); err != nil { // table 0 used again
			t.Fatalf("table 0 after %d more: %v", i, err)
		}
	}
	for i, want := range []bool{true, false, true} {
		if _, err := os.Lstat(c.path(table(i).BuildID)); (err == nil) != want {
			t.Errorf("table %d kept %v, want %v (limit of two tables; 0 used last, 2 just written)", i, err == nil, want)
		}
	}
	for name, want := range leftovers {
		if _, err := os.Lstat(filepath.Join(dir, name)); (err == nil) != want {
			t.Errorf("%s kept %v, want %v", name, err == nil, want)
		}
	}
	// A limit of 0 keeps only the table just stored.
	t.Setenv(CacheMaxEnv, "0")
	if err := c.Put(table(5)); err != nil {
		t.Fatal(err)
	}
	for i, want := range map[int]bool{0: false, 2: false, 5: true} {
		if _, err := os.Lstat(c.path(table(i).BuildID)); (err == nil) != want {
			t.Errorf("limit 0: table %d kept %v, want %v", i, err == nil, want)
		}
	}
}
