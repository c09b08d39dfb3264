package unwind

import (
	"debug/elf"
	"os/exec"
	"testing"
)

func runCmd(name string, args ...string) ([]byte, error) {
	return exec.Command(name, args...).CombinedOutput()
}

// FuzzBuild feeds arbitrary bytes as an .eh_frame and as a .debug_frame:
// the builder returns a table or an error, never panics, and a table it
// returns is well formed.
func FuzzBuild(f *testing.F) {
	if ef, err := elf.Open("/usr/bin/sqlite3"); err == nil {
		if s := ef.Section(".eh_frame"); s != nil {
			if d, err := s.Data(); err == nil && len(d) > 2048 {
				f.Add(d[:2048], s.Addr)
			}
		}
		ef.Close()
	}
	f.Add([]byte{}, uint64(0))
	f.Add([]byte{0x14, 0, 0, 0, 0, 0, 0, 0, 1, 'z', 'R', 0, 1, 0x78, 0x10, 1, 0x1b, 0x0c, 7, 8, 0x90, 1, 0, 0}, uint64(0x1000))
	f.Fuzz(func(t *testing.T, data []byte, addr uint64) {
		for _, s := range [][]section{{{data: data, addr: addr}}, {{data: data, debug: true}}} {
			var eh, dbg []section
			if s[0].debug {
				dbg = s
			} else {
				eh = s
			}
			tab, err := build(eh, dbg)
			if err != nil {
				continue
			}
			b, err := tab.MarshalBinary()
			if err != nil {
				t.Fatal(err)
			}
			var back Table
			if err := back.UnmarshalBinary(b); err != nil {
				t.Fatalf("a built table does not unmarshal: %v", err)
			}
		}
	})
}

// FuzzUnmarshal: a table read from disk or a socket never panics its reader.
func FuzzUnmarshal(f *testing.F) {
	if tab, err := Build("/usr/bin/sqlite3"); err == nil {
		b, _ := tab.MarshalBinary()
		f.Add(b[:headerSize+64+16*EntrySize])
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var tab Table
		if tab.UnmarshalBinary(b) == nil {
			tab.Lookup(0x1234)
		}
	})
}
