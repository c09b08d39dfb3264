package symbolize

import (
	"debug/elf"
	"fmt"
	"testing"

	"github.com/heapscope/heapscope/buildid"
	"github.com/heapscope/heapscope/event"
)

// benchTarget maps the executable segment of a real file as ld.so would, at
// a made-up base, and spreads n return addresses over it.
func benchTarget(tb testing.TB, path string, n int) (event.Module, []uint64) {
	tb.Helper()
	f, err := elf.Open(path)
	if err != nil {
		tb.Skipf("%s: %v", path, err)
	}
	defer f.Close()
	id, _ := buildid.File(path)
	const page, base = 4096, 0x7f0000000000
	for _, p := range f.Progs {
		if p.Type != elf.PT_LOAD || p.Flags&elf.PF_X == 0 {
			continue
		}
		m := event.Module{
			PID: 1, Path: path, BuildID: id,
			Start:  base + p.Vaddr&^(page-1),
			End:    base + (p.Vaddr+p.Memsz+page-1)&^(page-1),
			Offset: p.Off &^ (page - 1),
		}
		addrs := make([]uint64, n)
		text := base + p.Vaddr
		for i := range addrs {
			// A multiplicative hash spreads them without a pattern.
			addrs[i] = text + 1 + uint64(i)*0x9E3779B1%p.Filesz
		}
		return m, addrs
	}
	tb.Skipf("%s: no executable segment", path)
	return event.Module{}, nil
}

// The files the benchmarks resolve in: libc with its libc6-dbg DWARF (zlib
// compressed, DWARF 5), and Python, stripped: .dynsym only.
var benchFiles = []struct{ name, path string }{
	{"libc", "/lib/x86_64-linux-gnu/libc.so.6"},
	{"libpython3.11", "/usr/lib/x86_64-linux-gnu/libpython3.11.so.1.0"},
	{"python3.11", "/usr/bin/python3.11"},
}

const benchAddrs = 10000

// BenchmarkCold resolves distinct addresses with a new Symbolizer each time:
// opening the files, reading their symbols and DWARF, decoding the units and
// functions the addresses fall in. 10,000 addresses over libc's text touch
// nearly every function in it; a trace's few hundred touch a fraction.
func BenchmarkCold(b *testing.B) {
	for _, f := range benchFiles {
		for _, n := range []int{300, benchAddrs} {
			b.Run(fmt.Sprintf("%s/%d", f.name, n), func(b *testing.B) {
				m, addrs := benchTarget(b, f.path, n)
				var resolved int
				for b.Loop() {
					s := New(Options{})
					s.AddModule(m)
					for _, a := range addrs {
						if s.Frames(1, a)[0].Function != "" {
							resolved++
						}
					}
					s.Close()
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(addrs)), "ns/addr")
				b.ReportMetric(float64(resolved)/float64(b.N*len(addrs)), "named/addr")
			})
		}
	}
}

// BenchmarkPrefetch is BenchmarkCold with the addresses resolved in one
// batch, as a report does: each file's DWARF is read in one pass.
func BenchmarkPrefetch(b *testing.B) {
	for _, f := range benchFiles {
		for _, n := range []int{300, benchAddrs} {
			b.Run(fmt.Sprintf("%s/%d", f.name, n), func(b *testing.B) {
				m, addrs := benchTarget(b, f.path, n)
				for b.Loop() {
					s := New(Options{})
					s.AddModule(m)
					s.Prefetch(1, addrs)
					s.Close()
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(addrs)), "ns/addr")
			})
		}
	}
}

// BenchmarkFirst is the cost of the first address of a file: what laziness
// saves when a trace has few addresses in a large library.
func BenchmarkFirst(b *testing.B) {
	for _, f := range benchFiles {
		b.Run(f.name, func(b *testing.B) {
			m, addrs := benchTarget(b, f.path, benchAddrs)
			for b.Loop() {
				s := New(Options{})
				s.AddModule(m)
				s.Frames(1, addrs[len(addrs)/2])
				s.Close()
			}
		})
	}
}

// BenchmarkWarm resolves the same 10,000 addresses again: the per-address
// cache a report relies on when stacks share frames.
func BenchmarkWarm(b *testing.B) {
	for _, f := range benchFiles {
		b.Run(f.name, func(b *testing.B) {
			m, addrs := benchTarget(b, f.path, benchAddrs)
			s := New(Options{})
			defer s.Close()
			s.AddModule(m)
			for _, a := range addrs {
				s.Frames(1, a)
			}
			for b.Loop() {
				for _, a := range addrs {
					s.Frames(1, a)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(addrs)), "ns/addr")
		})
	}
}
