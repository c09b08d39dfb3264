package query

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"os"
	"path/filepath"
	"testing"
)

// FuzzIndexFile feeds loadCache index files changed at will, their
// checksum made right again so that what the checksum guards is reached:
// a file that loads must answer without panicking, and one that does not
// must fail with ErrBadIndexFile. (serve reads index files of the user's
// own from its cache folder; another process of that user's could write
// one.)
func FuzzIndexFile(f *testing.F) {
	dir := filepath.Join(f.TempDir(), "cache")
	path := filepath.Join(f.TempDir(), "random.hst")
	writeRandomTraceN(f, path, 7, 300)
	x, err := Build(path, Options{CacheDir: dir})
	if err != nil {
		f.Fatal(err)
	}
	if err := x.WaitSaved(); err != nil {
		f.Fatal(err)
	}
	file, _ := x.CacheFile()
	good, err := os.ReadFile(file)
	if err != nil {
		f.Fatal(err)
	}
	nstacks := len(x.stacks)
	// The file is megabytes (its columns come in chunks of 64 Ki rows): the
	// fuzzer changes where and how it is damaged, not the bytes whole.
	f.Add(uint32(0), uint64(0), uint32(0))
	f.Add(uint32(60), uint64(0xff), uint32(0))
	f.Add(uint32(8), uint64(1), uint32(len(good)/2))
	work := filepath.Join(f.TempDir(), "fuzz.idx")
	f.Fuzz(func(t *testing.T, at uint32, xor uint64, cut uint32) {
		b := append([]byte(nil), good...)
		if cut > 0 {
			b = b[:int(cut)%len(b)]
		}
		if len(b) >= 8 {
			o := int(at) % (len(b) - 7)
			binary.LittleEndian.PutUint64(b[o:], binary.LittleEndian.Uint64(b[o:])^xor)
		}
		if n := len(b) - len(diskMagic) - 8; n >= 0 {
			binary.LittleEndian.PutUint64(b[n:], uint64(crc32.Checksum(b[:n], castagnoli)))
		}
		if err := os.WriteFile(work, b, 0o600); err != nil {
			t.Fatal(err)
		}
		for _, m := range []IndexMap{MapNever, MapAlways} {
			c, err := loadCache(work, nstacks, m)
			if err != nil {
				if !errors.Is(err, ErrBadIndexFile) {
					t.Fatalf("map %d: %v, want ErrBadIndexFile", m, err)
				}
				continue
			}
			// As Build does with a file it loads: the columns go into the
			// index of the trace's first pass (each file's replace the
			// last's).
			y := x
			y.publish(c)
			span := y.End() - y.Start()
			for _, flt := range []Filter{{}, {From: y.Start() + span/3, To: y.Start() + 2*span/3}, {At: y.Start() + span/2}, {TID: 10}} {
				w := y.Window(flt)
				y.Timeline(w.Span, 50)
			}
		}
	})
}
