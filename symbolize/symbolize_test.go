package symbolize

import (
	"debug/elf"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/heapscope/heapscope/buildid"
	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/internal/testutil"
)

// want is an expected frame: function and the line of a source marker.
type want struct {
	function string
	marker   string
}

func checkFrames(t *testing.T, got []Frame, src string, m event.Module, addr uint64, wants ...want) {
	t.Helper()
	if len(got) != len(wants) {
		t.Fatalf("%#x: %d frames %v, want %d", addr, len(got), got, len(wants))
	}
	for i, w := range wants {
		f := got[i]
		line := marker(t, src, w.marker)
		if f.Function != w.function || f.File != src || f.Line != line {
			t.Errorf("%#x frame %d: %s %s:%d, want %s %s:%d", addr, i, f.Function, f.File, f.Line, w.function, src, line)
		}
		if f.Inlined != (i < len(wants)-1) {
			t.Errorf("%#x frame %d: Inlined %v", addr, i, f.Inlined)
		}
		if f.Module != m.Path || f.Address != addr || f.Offset != addr-m.Start+m.Offset {
			t.Errorf("%#x frame %d: module %s offset %#x address %#x, want %s %#x %#x",
				addr, i, f.Module, f.Offset, f.Address, m.Path, addr-m.Start+m.Offset, addr)
		}
	}
}

// TestInline resolves a stack through a static function into which two
// always_inline functions were inlined, built -O2, in a running process: a
// PIE, a classic executable (its addresses are its file offsets plus
// 0x400000) and a static one.
func TestInline(t *testing.T) {
	for _, o := range []testutil.Options{{}, {Flags: []string{"-no-pie"}}, {Static: true}} {
		bin := testutil.MustBuild(t, "symbolize_inline", o)
		src, _ := testutil.Source("symbolize_inline", o)
		w := run(t, bin)
		s := w.symbolizer(Options{})

		m := w.module(t, w.pcs[0])
		checkFrames(t, s.Frames(uint32(w.pid), w.pcs[0]), src, m, w.pcs[0],
			want{"alloc_inner", "alloc_site"}, want{"alloc_outer", "call_inner"}, want{"make_buffer", "call_outer"})
		checkFrames(t, s.Frames(uint32(w.pid), w.pcs[1]), src, m, w.pcs[1], want{"run_workload", "call_static"})
		checkFrames(t, s.Frames(uint32(w.pid), w.pcs[2]), src, m, w.pcs[2], want{"main", "call_run"})
		// Stack: the frames of each address, in order.
		stack := s.Stack(uint32(w.pid), w.pcs[:3])
		var names []string
		for _, f := range stack {
			names = append(names, f.Function)
		}
		if got := strings.Join(names, " "); got != "alloc_inner alloc_outer make_buffer run_workload main" {
			t.Errorf("%v: Stack: %s", o, got)
		}

		if ws := s.Warnings(); len(ws) > 0 {
			t.Errorf("%v: warnings: %q", o, ws)
		}
		s.Close()

		// NoInlines: the function the code is in, at the innermost line.
		s = w.symbolizer(Options{NoInlines: true})
		checkFrames(t, s.Frames(uint32(w.pid), w.pcs[0]), src, m, w.pcs[0], want{"make_buffer", "alloc_site"})
		s.Close()
	}
}

// TestAgainstReferences compares every frame of the workloads' stacks, in
// the executable and in libc (through libc6-dbg), with binutils' addr2line and
// LLVM's llvm-symbolizer. Each frame must match one of them exactly; they
// disagree with each other in places (addr2line 2.40 gives the unit's file
// for code from a header in DWARF 5; llvm-symbolizer names some functions by
// another symbol at their address, like cfree for __libc_free), which the
// test logs.
func TestAgainstReferences(t *testing.T) {
	for _, c := range []struct {
		name string
		o    testutil.Options
	}{
		{"symbolize_inline", testutil.Options{}},
		{"symbolize_inline", testutil.Options{Opt: "3", NoFramePointers: true}},
		{"symbolize_cxx", testutil.Options{CXX: true}},
	} {
		w := run(t, testutil.MustBuild(t, c.name, c.o))
		s := w.symbolizer(Options{})
		addrs := append([]uint64(nil), w.pcs...)
		for _, a := range w.syms {
			addrs = append(addrs, a+1) // a function's first instruction
		}
		// One run of each tool per file.
		byFile := map[string][]uint64{}
		for _, a := range addrs {
			m := w.module(t, a)
			byFile[m.Path] = append(byFile[m.Path], a)
		}
		for file, addrs := range byFile {
			var vas []uint64
			for _, a := range addrs {
				vas = append(vas, fileVaddr(t, file, w.module(t, a), a-1))
			}
			gnus, llvms := addr2line(t, file, vas...), llvmSymbolizer(t, file, vas...)
			for i, a := range addrs {
				gnu, llvm := gnus[i], llvms[i]
				got := refFrames(s.Frames(uint32(w.pid), a))
				if !reflect.DeepEqual(got, gnu) && !reflect.DeepEqual(got, llvm) {
					t.Errorf("%s %v: %#x (%s+%#x):\n got %v\naddr2line %v\nllvm-symbolizer %v",
						c.name, c.o, a, file, vas[i], got, gnu, llvm)
				} else if !reflect.DeepEqual(gnu, llvm) {
					t.Logf("%s+%#x: addr2line %v, llvm-symbolizer %v, heapscope %v", file, vas[i], gnu, llvm, got)
				}
			}
		}
		s.Close()
	}
}

// TestCXX checks demangled C++ names, from DWARF linkage names.
func TestCXX(t *testing.T) {
	o := testutil.Options{CXX: true}
	bin := testutil.MustBuild(t, "symbolize_cxx", o)
	src, _ := testutil.Source("symbolize_cxx", o)
	w := run(t, bin)
	s := w.symbolizer(Options{})
	defer s.Close()
	pid := uint32(w.pid)
	m := w.module(t, w.pcs[0])
	checkFrames(t, s.Frames(pid, w.pcs[0]), src, m, w.pcs[0], want{"ns::Widget::make(int)", "make"})
	checkFrames(t, s.Frames(pid, w.pcs[2]), src, m, w.pcs[2], want{"main", "main"})
	plus := s.Frames(pid, w.pcs[1])
	if len(plus) != 1 || !strings.Contains(plus[0].Function, "ns::Widget::operator+<long>(long) const") ||
		plus[0].Line != marker(t, src, "plus") {
		t.Errorf("operator+: %+v", plus)
	}

	raw := w.symbolizer(Options{NoDemangle: true})
	defer raw.Close()
	if f := raw.Frames(pid, w.pcs[0]); f[0].Function != "_ZN2ns6Widget4makeEi" {
		t.Errorf("NoDemangle: %q", f[0].Function)
	}
}

// TestLibcMalloc resolves glibc's malloc, as the process's own dynamic linker
// finds it, to malloc.c through the separate debug file of libc6-dbg.
func TestLibcMalloc(t *testing.T) {
	w := run(t, testutil.MustBuild(t, "symbolize_inline", testutil.Options{}))
	s := w.symbolizer(Options{})
	defer s.Close()
	for _, name := range []string{"malloc", "free", "calloc", "realloc"} {
		addr := w.syms[name]
		m := w.module(t, addr+1)
		if !strings.Contains(filepath.Base(m.Path), "libc.so") {
			t.Fatalf("%s at %#x is in %s", name, addr, m.Path)
		}
		dbg := filepath.Join(DefaultDebugDir, ".build-id", m.BuildID[:2], m.BuildID[2:]+".debug")
		if _, err := os.Stat(dbg); err != nil {
			t.Fatalf("libc6-dbg is not installed: %v", err)
		}
		f := s.Frames(uint32(w.pid), addr+1)
		last := f[len(f)-1]
		if filepath.Base(last.File) != "malloc.c" || last.Line <= 0 || !strings.Contains(last.Function, name) {
			t.Errorf("%s: %+v", name, f)
		}
	}
	if ws := s.Warnings(); len(ws) > 0 {
		t.Errorf("warnings: %q", ws)
	}
}

// TestStripped checks that a stripped executable still gives its .dynsym
// names (with -rdynamic) and module+offset elsewhere, while libc's frames
// resolve as before.
func TestStripped(t *testing.T) {
	dyn := run(t, testutil.MustBuild(t, "symbolize_inline", testutil.Options{Flags: []string{"-s", "-rdynamic"}}))
	s := dyn.symbolizer(Options{})
	defer s.Close()
	pid := uint32(dyn.pid)
	m := dyn.module(t, dyn.pcs[1])
	if f := s.Frames(pid, dyn.pcs[1]); len(f) != 1 || f[0].Function != "run_workload" || f[0].File != "" ||
		f[0].Module != m.Path || f[0].Offset != dyn.pcs[1]-m.Start+m.Offset {
		t.Errorf("run_workload from .dynsym: %+v", f)
	}
	// make_buffer is static: in no symbol table of a stripped binary.
	if f := s.Frames(pid, dyn.pcs[0]); len(f) != 1 || f[0].Function != "" || f[0].Module != m.Path ||
		f[0].Offset != dyn.pcs[0]-m.Start+m.Offset || f[0].Address != dyn.pcs[0] {
		t.Errorf("static function of a stripped binary: %+v", f)
	}
	// The return address in __libc_start_call_main, in libc.
	libc := s.Frames(pid, dyn.pcs[3])
	if l := libc[len(libc)-1]; l.Function == "" || l.Line == 0 || !strings.Contains(l.Module, "libc.so") {
		t.Errorf("libc frame: %+v", libc)
	}

	plain := run(t, testutil.MustBuild(t, "symbolize_inline", testutil.Options{Flags: []string{"-s"}}))
	s2 := plain.symbolizer(Options{})
	defer s2.Close()
	for _, pc := range plain.pcs[:3] {
		m := plain.module(t, pc)
		if f := s2.Frames(uint32(plain.pid), pc); len(f) != 1 || f[0].Function != "" || f[0].Module != m.Path ||
			f[0].Offset != pc-m.Start+m.Offset {
			t.Errorf("%#x in a stripped binary: %+v", pc, f)
		}
	}
}

// splitDebug copies bin to dir/name, moves its DWARF and symbols to
// dir/name.debug and strips the copy, leaving a .gnu_debuglink to it.
func splitDebug(t *testing.T, bin, dir, name string) (stripped, debug string) {
	t.Helper()
	stripped, debug = filepath.Join(dir, name), filepath.Join(dir, name+".debug")
	copyFile(t, bin, stripped)
	command(t, "objcopy", "--only-keep-debug", stripped, debug)
	command(t, "objcopy", "--strip-all", "--add-gnu-debuglink="+debug, stripped)
	return stripped, debug
}

// TestDebugLink finds a separate debug file by .gnu_debuglink, next to the
// executable, checked by build-id or, when there is none, by CRC.
func TestDebugLink(t *testing.T) {
	for _, c := range []struct {
		name string
		o    testutil.Options
	}{
		{"with build-id", testutil.Options{}},
		{"CRC only", testutil.Options{Flags: []string{"-Wl,--build-id=none"}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			src, _ := testutil.Source("symbolize_inline", c.o)
			bin := testutil.MustBuild(t, "symbolize_inline", c.o)
			stripped, debug := splitDebug(t, bin, t.TempDir(), "app")
			w := run(t, stripped)
			m := w.module(t, w.pcs[0])
			if id, _ := buildid.File(stripped); id != m.BuildID || (c.o.Flags != nil) != (id == "") {
				t.Fatalf("build-id %q, module %q", id, m.BuildID)
			}
			s := w.symbolizer(Options{})
			checkFrames(t, s.Frames(uint32(w.pid), w.pcs[1]), src, m, w.pcs[1], want{"run_workload", "call_static"})
			s.Close()

			// A debug file that is not the right one is refused.
			other := testutil.MustBuild(t, "symbolize_cxx", testutil.Options{CXX: true, Flags: c.o.Flags})
			copyFile(t, other, debug)
			s = w.symbolizer(Options{})
			if f := s.Frames(uint32(w.pid), w.pcs[1]); len(f) != 1 || f[0].File != "" {
				t.Errorf("frames from the wrong debug file: %+v", f)
			}
			if ws := s.Warnings(); len(ws) != 2 || !strings.Contains(ws[0], "app.debug") || !strings.Contains(ws[1], "no symbols") {
				t.Errorf("warnings: %q", ws)
			}
			s.Close()
		})
	}
}

// TestBuildIDDir finds a debug file under a debug root by build-id, and uses
// it even when the file at the module's path is another build, or is gone.
func TestBuildIDDir(t *testing.T) {
	o := testutil.Options{}
	src, _ := testutil.Source("symbolize_inline", o)
	bin := testutil.MustBuild(t, "symbolize_inline", o)
	dir := t.TempDir()
	stripped, debug := splitDebug(t, bin, dir, "app")
	w := run(t, stripped)
	m := w.module(t, w.pcs[0])
	root := t.TempDir()
	copyFile(t, debug, filepath.Join(root, ".build-id", m.BuildID[:2], m.BuildID[2:]+".debug"))
	os.Remove(debug) // so that only the build-id path can find it

	check := func(name string, s *Symbolizer, wantWarning string) {
		t.Helper()
		checkFrames(t, s.Frames(uint32(w.pid), w.pcs[0]), src, m, w.pcs[0],
			want{"alloc_inner", "alloc_site"}, want{"alloc_outer", "call_inner"}, want{"make_buffer", "call_outer"})
		checkFrames(t, s.Frames(uint32(w.pid), w.pcs[2]), src, m, w.pcs[2], want{"main", "call_run"})
		ws := strings.Join(s.Warnings(), "\n")
		if wantWarning == "" && ws != "" || !strings.Contains(ws, wantWarning) {
			t.Errorf("%s: warnings %q, want %q", name, ws, wantWarning)
		}
	}
	s := w.symbolizer(Options{DebugDirs: []string{root}})
	check("debug dir", s, "")
	s.Close()

	// The file at the path is now another program: its build-id differs.
	copyFile(t, testutil.MustBuild(t, "symbolize_cxx", testutil.Options{CXX: true}), stripped)
	s = w.symbolizer(Options{DebugDirs: []string{root}})
	check("replaced", s, "not the traced file's "+m.BuildID)
	s.Close()
	// Without the debug file, nothing of the other program is used.
	s = w.symbolizer(Options{})
	if f := s.Frames(uint32(w.pid), w.pcs[0]); len(f) != 1 || f[0].Function != "" || f[0].Module != m.Path {
		t.Errorf("frames from a file with another build-id: %+v", f)
	}
	if ws := strings.Join(s.Warnings(), "\n"); !strings.Contains(ws, "not the traced file's "+m.BuildID) {
		t.Errorf("no build-id warning: %q", ws)
	}
	s.Close()

	// The file is gone.
	os.Remove(stripped)
	s = w.symbolizer(Options{DebugDirs: []string{root}})
	check("missing", s, "no such file")
	s.Close()
}

// TestMissing: a module whose file is missing gives module+offset, an address
// outside every module gives only the address; neither disappears.
func TestMissing(t *testing.T) {
	s := New(Options{})
	defer s.Close()
	s.AddModule(event.Module{PID: 7, Start: 0x400000, End: 0x500000, Offset: 0x1000, Path: "/nonexistent/app", BuildID: "0123abcd"})
	f := s.Frames(7, 0x401234)
	if !reflect.DeepEqual(f, []Frame{{Module: "/nonexistent/app", Offset: 0x2234, Address: 0x401234}}) {
		t.Errorf("missing file: %+v", f)
	}
	for _, c := range []struct {
		pid  uint32
		addr uint64
	}{{7, 0x600000}, {7, 0x400000}, {7, 0}, {8, 0x401234}} {
		if f := s.Frames(c.pid, c.addr); !reflect.DeepEqual(f, []Frame{{Address: c.addr}}) {
			t.Errorf("pid %d %#x: %+v", c.pid, c.addr, f)
		}
	}
	// The return address just past the end is the last call of the module.
	if f := s.Frames(7, 0x500000); len(f) != 1 || f[0].Module != "/nonexistent/app" {
		t.Errorf("end of module: %+v", f)
	}
	ws := s.Warnings()
	if len(ws) != 2 || !strings.Contains(ws[0], "/nonexistent/app") || !strings.Contains(ws[1], "0123abcd") {
		t.Errorf("warnings: %q", ws)
	}
}

// TestSysroot symbolizes a process's modules as if on another machine: the
// executable is only found under the sysroot.
func TestSysroot(t *testing.T) {
	o := testutil.Options{}
	src, _ := testutil.Source("symbolize_inline", o)
	bin := testutil.MustBuild(t, "symbolize_inline", o)
	w := run(t, bin)
	root := t.TempDir()
	copyFile(t, bin, filepath.Join(root, "opt/app/bin/app"))
	m := w.module(t, w.pcs[0])
	for i := range w.mods {
		if w.mods[i].Path == bin {
			w.mods[i].Path = "/opt/app/bin/app"
		}
	}
	m.Path = "/opt/app/bin/app"

	s := w.symbolizer(Options{Sysroot: root})
	defer s.Close()
	checkFrames(t, s.Frames(uint32(w.pid), w.pcs[1]), src, m, w.pcs[1], want{"run_workload", "call_static"})
	host := w.symbolizer(Options{})
	defer host.Close()
	if f := host.Frames(uint32(w.pid), w.pcs[1]); len(f) != 1 || f[0].Function != "" || f[0].Module != m.Path {
		t.Errorf("without the sysroot: %+v", f)
	}

	// libc is not in the sysroot, but its debug file is found by build-id
	// in the host's debug root, and gives what the host's libc gives.
	for _, pc := range []uint64{w.pcs[3], w.syms["malloc"] + 1} {
		got, ref := s.Frames(uint32(w.pid), pc), host.Frames(uint32(w.pid), pc)
		if !reflect.DeepEqual(got, ref) || ref[0].Line == 0 {
			t.Errorf("libc from its debug file alone: %+v, from the file: %+v", got, ref)
		}
	}
}

// TestSharedObjects: the same library in two processes is loaded once, and
// resolves the same in both.
func TestSharedObjects(t *testing.T) {
	bin := testutil.MustBuild(t, "symbolize_inline", testutil.Options{})
	a, b := run(t, bin), run(t, bin)
	s := New(Options{})
	defer s.Close()
	ids := map[string]bool{}
	for _, w := range []*workload{a, b} {
		for _, m := range w.mods {
			s.AddModule(m)
			ids[m.BuildID] = true
		}
	}
	fa, fb := s.Frames(uint32(a.pid), a.syms["malloc"]+1), s.Frames(uint32(b.pid), b.syms["malloc"]+1)
	if fa[0].Function == "" || fa[0].Function != fb[0].Function || fa[0].Line != fb[0].Line {
		t.Errorf("malloc in two processes: %+v, %+v", fa, fb)
	}
	s.Frames(uint32(a.pid), a.pcs[0])
	s.Frames(uint32(b.pid), b.pcs[0])
	if len(s.objs) != 2 {
		t.Errorf("%d objects loaded for 2 files", len(s.objs))
	}
	// A second lookup is served from the cache.
	if again := s.Frames(uint32(a.pid), a.syms["malloc"]+1); &again[0] != &fa[0] {
		t.Error("second lookup not cached")
	}
}

// TestAddModuleReplaces: a new mapping over an old one replaces it, and
// addresses resolved before are resolved again.
func TestAddModuleReplaces(t *testing.T) {
	s := New(Options{})
	s.AddModule(event.Module{PID: 1, Start: 0x1000, End: 0x3000, Path: "/a"})
	s.AddModule(event.Module{PID: 1, Start: 0x5000, End: 0x6000, Path: "/c"})
	if f := s.Frames(1, 0x2001); f[0].Module != "/a" {
		t.Fatalf("%+v", f)
	}
	s.AddModule(event.Module{PID: 1, Start: 0x2000, End: 0x4000, Offset: 0x10, Path: "/b"})
	if f := s.Frames(1, 0x2001); f[0].Module != "/b" || f[0].Offset != 0x11 {
		t.Errorf("after remap: %+v", f)
	}
	if f := s.Frames(1, 0x1001); f[0].Module != "" {
		t.Errorf("the replaced mapping is still there: %+v", f)
	}
	if f := s.Frames(1, 0x5001); f[0].Module != "/c" {
		t.Errorf("an untouched mapping was dropped: %+v", f)
	}
}

// TestSweep compares every fifth byte of the workloads' code, offline, with
// the reference tools: line tables, inline chains and names at any address,
// not only at call sites.
func TestSweep(t *testing.T) {
	for _, c := range []struct {
		name string
		o    testutil.Options
		// A part of a file, when not the text of a workload.
		file     string
		from, to uint64
		step     uint64
	}{
		{name: "symbolize_inline", o: testutil.Options{}},
		{name: "symbolize_inline", o: testutil.Options{Opt: "3", Flags: []string{"-gdwarf-4"}}},
		{name: "symbolize_cxx", o: testutil.Options{CXX: true}},
		// glibc's malloc.c and what follows it, through libc6-dbg.
		{name: "libc", file: "/lib/x86_64-linux-gnu/libc.so.6", from: 0x96000, to: 0x9c000, step: 23},
	} {
		bin, from, to, step := c.file, c.from, c.to, c.step
		if bin == "" {
			bin = testutil.MustBuild(t, c.name, c.o)
			f, err := elf.Open(bin)
			if err != nil {
				t.Fatal(err)
			}
			text := f.Section(".text")
			f.Close()
			from, to, step = text.Addr, text.Addr+text.Size, 5
		}
		// Map the file as if at 0x10000 + its addresses (the segments of
		// both files start at file offset 0 and address 0).
		const base = 0x10000
		s := New(Options{})
		s.AddModule(event.Module{PID: 1, Start: base, End: base + to, Path: bin})
		var vas []uint64
		for va := from; va < to; va += step {
			vas = append(vas, va)
		}
		gnus, llvms := addr2line(t, bin, vas...), llvmSymbolizer(t, bin, vas...)
		bad := 0
		for i, va := range vas {
			got := refFrames(s.Frames(1, base+va+1))
			if got[0].Function == "" && got[0].File == "" {
				got = nil
			}
			gnu, llvm := gnus[i], llvms[i]
			if len(llvm) == 1 && llvm[0] == (refFrame{}) {
				llvm = nil
			}
			if !reflect.DeepEqual(got, gnu) && !reflect.DeepEqual(got, llvm) {
				if bad++; bad <= 10 {
					t.Errorf("%s %v %#x:\n got %v\naddr2line %v\nllvm-symbolizer %v", c.name, c.o, va, got, gnu, llvm)
				}
			}
		}
		if bad > 0 {
			t.Errorf("%s %v: %d of %d addresses differ from both references", c.name, c.o, bad, len(vas))
		}
		s.Close()
	}
}

// TestRust demangles Rust names, legacy and v0 mangling, from a program
// rustc builds.
func TestRust(t *testing.T) {
	rustc := rustcPath(t)
	src, err := filepath.Abs("testdata/rust_frames.rs")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, c := range []struct {
		mangling string
		flags    []string
		want     string
	}{
		{"legacy", nil, "rust_frames::widget::Widget::make"}, // the hash suffix dropped
		// v0 names an inherent method through its type.
		{"v0", []string{"-C", "symbol-mangling-version=v0"}, "<rust_frames::widget::Widget>::make"},
	} {
		bin := filepath.Join(dir, "rust_frames_"+c.mangling)
		command(t, rustc, append(append([]string{"-g", "-O"}, c.flags...), "-o", bin, src)...)
		w := run(t, bin)
		s := w.symbolizer(Options{})
		addr := w.syms["make"] + 1
		f := s.Frames(uint32(w.pid), addr)
		last := f[len(f)-1]
		if last.Function != c.want || last.File != src || last.Line != marker(t, src, "rust_make") {
			t.Errorf("%s: %+v", c.mangling, f)
		}
		// The text segment of rustc's output starts a page above its file
		// offset: the conversion must use the segment, not the offset.
		m := w.module(t, addr)
		if va := fileVaddr(t, bin, m, addr-1); va == addr-1-m.Start+m.Offset {
			t.Logf("%s: address and offset coincide; the bias is not exercised", c.mangling)
		}
		raw := w.symbolizer(Options{NoDemangle: true})
		if f := raw.Frames(uint32(w.pid), addr); !isMangled(f[len(f)-1].Function) {
			t.Errorf("%s NoDemangle: %q", c.mangling, f[len(f)-1].Function)
		}
		s.Close()
		raw.Close()
	}
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// TestConcurrent resolves from several goroutines at once, while modules are
// added, and gets what one goroutine gets alone. Run with -race.
func TestConcurrent(t *testing.T) {
	w := run(t, testutil.MustBuild(t, "symbolize_inline", testutil.Options{}))
	addrs := append([]uint64(nil), w.pcs...)
	for _, a := range w.syms {
		addrs = append(addrs, a+1)
	}
	ref := w.symbolizer(Options{})
	defer ref.Close()
	want := map[uint64][]Frame{}
	for _, a := range addrs {
		want[a] = ref.Frames(uint32(w.pid), a)
	}

	s := New(Options{})
	defer s.Close()
	var wg sync.WaitGroup
	errs := make(chan string, 64)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, m := range w.mods {
				s.AddModule(m) // the same records again: replaces them with themselves
			}
			for _, a := range addrs {
				if got := s.Frames(uint32(w.pid), a); !reflect.DeepEqual(got, want[a]) && got[0].Module != "" {
					errs <- fmt.Sprintf("%#x: %+v, want %+v", a, got, want[a])
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	for _, a := range addrs {
		if got := s.Frames(uint32(w.pid), a); !reflect.DeepEqual(got, want[a]) {
			t.Errorf("%#x after: %+v, want %+v", a, got, want[a])
		}
	}
}

// TestLazy: resolving one address of libc decodes one of its units and one
// function of it, not its whole DWARF, and keeps none of its compressed
// sections whole: the unit's bytes were read in one pass over each.
func TestLazy(t *testing.T) {
	w := run(t, testutil.MustBuild(t, "symbolize_inline", testutil.Options{}))
	s := w.symbolizer(Options{})
	defer s.Close()
	addr := w.syms["malloc"] + 1
	if f := s.Frames(uint32(w.pid), addr); f[0].Line == 0 {
		t.Fatalf("malloc: %+v", f)
	}
	e := s.objs[w.module(t, addr).BuildID]
	if e == nil || e.o == nil || e.o.dw == nil {
		t.Fatal("libc's DWARF not loaded")
	}
	o := e.o
	if o.dw == nil {
		t.Fatal("libc's DWARF not loaded")
	}
	decoded := 0
	for _, u := range o.dw.units {
		for _, fn := range u.fns {
			if fn.decoded {
				decoded++
			}
		}
	}
	if len(o.dw.cus) < 1000 || len(o.dw.units) != 1 || decoded != 1 || o.dw.walked {
		t.Errorf("%d units indexed, %d decoded, %d functions decoded, walked %v", len(o.dw.cus), len(o.dw.units), decoded, o.dw.walked)
	}
	for _, sec := range []*dwSection{o.dw.info, o.dw.abbrev, o.dw.line} {
		if sec.comp == compressNone {
			t.Errorf("%s is not compressed: libc6-dbg's DWARF should be", sec.name)
		}
		if sec.all != nil || sec.passes != 1 {
			t.Errorf("%s: kept whole %v after %d passes", sec.name, sec.all != nil, sec.passes)
		}
	}
}

// TestPrefetch resolves a workload's stack and libc's allocation functions
// in one batch, and gets what Frames gets one address at a time, reading
// each of libc's compressed sections once.
func TestPrefetch(t *testing.T) {
	w := run(t, testutil.MustBuild(t, "symbolize_inline", testutil.Options{}))
	addrs := append([]uint64(nil), w.pcs...)
	for _, name := range []string{"malloc", "free", "calloc", "realloc", "strdup"} {
		if a, ok := w.syms[name]; ok {
			addrs = append(addrs, a+1, a+17)
		}
	}
	addrs = append(addrs, 1, 0) // in no module
	ref := w.symbolizer(Options{})
	defer ref.Close()
	s := w.symbolizer(Options{})
	defer s.Close()
	s.Prefetch(uint32(w.pid), addrs)
	s.Prefetch(uint32(w.pid), addrs) // again: all cached
	s.Prefetch(uint32(w.pid+1), addrs)
	for _, a := range addrs {
		if got, want := s.Frames(uint32(w.pid), a), ref.Frames(uint32(w.pid), a); !reflect.DeepEqual(got, want) {
			t.Errorf("%#x: %+v, want %+v", a, got, want)
		}
	}
	libc := s.objs[w.module(t, w.syms["malloc"]+1).BuildID]
	if libc == nil || libc.o == nil || libc.o.dw == nil {
		t.Fatal("libc's DWARF not loaded")
	}
	dw := libc.o.dw
	for _, sec := range []*dwSection{dw.info, dw.abbrev, dw.line} {
		if sec.passes != 1 || sec.all != nil {
			t.Errorf("%s: %d passes, kept whole %v", sec.name, sec.passes, sec.all != nil)
		}
	}
	if len(dw.units) < 2 {
		t.Errorf("%d of libc's units read for malloc, free, calloc, realloc and strdup", len(dw.units))
	}
}

// TestPrefetchGoesOn: a batch of units after those of the batch before
// goes on with the stream the first left open; one before them starts a
// second pass. The frames are those of a symbolizer that read nothing
// before.
func TestPrefetchGoesOn(t *testing.T) {
	const lib, base = "/lib/x86_64-linux-gnu/libc.so.6", 0x10000
	f, err := elf.Open(lib)
	if err != nil {
		t.Skip(err)
	}
	text := f.Section(".text")
	f.Close()
	m := event.Module{PID: 1, Start: base, End: base + text.Addr + text.Size, Path: lib}
	symbolizer := func() *Symbolizer {
		s := New(Options{})
		s.AddModule(m)
		return s
	}
	dwOf := func(s *Symbolizer) *dwarfInfo {
		for _, e := range s.objs {
			if e.o != nil && e.o.dw != nil {
				return e.o.dw
			}
		}
		t.Fatal("libc's DWARF not loaded")
		return nil
	}
	// The units, by header offset, from an index of them.
	probe := symbolizer()
	defer probe.Close()
	probe.Frames(1, base+text.Addr+1)
	var cus []cuRange
	seen := map[uint64]bool{}
	for _, c := range dwOf(probe).cus {
		if !seen[c.cu] && c.lo >= text.Addr && c.lo < text.Addr+text.Size {
			seen[c.cu] = true
			cus = append(cus, c)
		}
	}
	sort.Slice(cus, func(i, j int) bool { return cus[i].cu < cus[j].cu })
	if len(cus) < 100 {
		t.Fatalf("%d units indexed", len(cus))
	}
	early, late, middle := cus[len(cus)/10], cus[len(cus)*9/10], cus[len(cus)/2]

	s := symbolizer()
	defer s.Close()
	for i, c := range []cuRange{early, late, middle} {
		addr := base + c.lo + 1
		s.Prefetch(1, []uint64{addr})
		passes := dwOf(s).info.passes
		if want := []int{1, 1, 2}[i]; passes != want {
			t.Errorf("after unit %d of %d (at %#x): %d passes over .debug_info, want %d", i, len(cus), c.cu, passes, want)
		}
		ref := symbolizer()
		if got, want := s.Frames(1, addr), ref.Frames(1, addr); !reflect.DeepEqual(got, want) {
			t.Errorf("%#x: %+v, want %+v", addr, got, want)
		}
		ref.Close()
	}
}
