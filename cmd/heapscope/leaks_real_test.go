package main

import (
	"encoding/xml"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/internal/testutil"
	"github.com/heapscope/heapscope/symbolize"
	"github.com/heapscope/heapscope/tracefile"
)

// blockSink replays a trace: the live blocks of each process (their size
// and stack) until its last verdict, the classes that verdict gave them,
// and the module records and stacks, to symbolize with.
type blockSink struct {
	event.Sink
	live    map[[2]uint64]liveBlock // pid, address
	stacks  map[[2]uint64][]uint64  // pid, stack id
	modules []event.Module
	classed []classedBlock
}

type liveBlock struct {
	size  uint64
	stack event.StackID
}

type classedBlock struct {
	pid   uint32
	size  uint64
	class event.Class
	stack []uint64
}

func (s *blockSink) Module(m event.Module) error { s.modules = append(s.modules, m); return nil }
func (s *blockSink) Stack(st event.Stack) error {
	s.stacks[[2]uint64{uint64(st.PID), uint64(st.ID)}] = append([]uint64(nil), st.Frames...)
	return nil
}

func (s *blockSink) Events(evs []event.Event) error {
	for _, e := range evs {
		k := [2]uint64{uint64(e.PID), e.Addr}
		switch e.Kind {
		case event.KindAlloc:
			if e.Addr != 0 {
				s.live[k] = liveBlock{e.Size, e.Stack}
			}
		case event.KindFree:
			delete(s.live, k)
		case event.KindRealloc:
			if e.OldAddr != 0 && (e.Addr != 0 || e.Size == 0) {
				delete(s.live, [2]uint64{uint64(e.PID), e.OldAddr})
			}
			if e.Addr != 0 {
				s.live[k] = liveBlock{e.Size, e.Stack}
			}
		}
	}
	return nil
}

func (s *blockSink) Note(n event.Note) error {
	v, ok := n.(event.Verdict)
	if !ok {
		return nil
	}
	s.classed = s.classed[:0]
	for _, bc := range v.Blocks {
		b, ok := s.live[[2]uint64{uint64(v.PID), bc.Addr}]
		if !ok {
			continue
		}
		s.classed = append(s.classed, classedBlock{v.PID, b.size, bc.Class, s.stacks[[2]uint64{uint64(v.PID), uint64(b.stack)}]})
	}
	return nil
}

// vgLeaks is Memcheck's XML output: its loss records.
type vgLeaks struct {
	Errors []struct {
		Kind string `xml:"kind"`
		Leak struct {
			Bytes  uint64 `xml:"leakedbytes"`
			Blocks uint64 `xml:"leakedblocks"`
		} `xml:"xwhat"`
		Frames []struct {
			Obj string `xml:"obj"`
			Fn  string `xml:"fn"`
		} `xml:"stack>frame"`
	} `xml:"error"`
}

// allocatorFn reports whether fn is an allocation function or one of
// valgrind's replacements of them: not the site.
func allocatorFn(obj, fn string) bool {
	if strings.Contains(filepath.Base(obj), "vgpreload") {
		return true
	}
	for _, a := range []string{"malloc", "calloc", "realloc", "operator new", "operator new[]", "memalign", "posix_memalign", "aligned_alloc"} {
		if fn == a || strings.HasPrefix(fn, a+"(") {
			return true
		}
	}
	return false
}

// TestLeakCheckRealPrograms: real programs traced by heapscope run, checked
// at their exit, and run under Memcheck: no block heapscope calls
// definitely lost is one Memcheck calls still reachable (Memcheck's loss
// records are matched by the innermost function outside the allocator and
// the block size).
func TestLeakCheckRealPrograms(t *testing.T) {
	vg := testutil.Tool(t, "valgrind")
	cxx := testutil.MustBuild(t, "report_runtime", testutil.Options{CXX: true})
	dir := t.TempDir()
	script := filepath.Join(dir, "f.cc")
	os.WriteFile(script, []byte("int  main( ){ return 0;}\n"), 0o644)
	programs := [][]string{
		{"/usr/bin/python3.11", "-c", "import json, collections; d = {i: str(i) * 3 for i in range(2000)}; c = collections.Counter(json.dumps(d)); print(len(c))"},
		{testutil.Tool(t, "sqlite3"), ":memory:", "create table t(x text); insert into t select hex(randomblob(64)) from generate_series(1,3000); create index i on t(x); select count(distinct x) from t;"},
		{cxx},
	}
	if cf, err := exec.LookPath("clang-format"); err == nil {
		programs = append(programs, []string{cf, script})
	}
	for _, prog := range programs {
		t.Run(filepath.Base(prog[0]), func(t *testing.T) {
			trace := filepath.Join(dir, filepath.Base(prog[0])+".hst")
			if code, stderr := exitCode(t, cli(t, append([]string{"run", "-q", "-o", trace, "--"}, prog...)...)); code != 0 {
				t.Fatalf("heapscope run: %d\n%s", code, stderr)
			}
			r, err := tracefile.Open(trace)
			if err != nil {
				t.Fatal(err)
			}
			bs := &blockSink{Sink: event.Discard, live: map[[2]uint64]liveBlock{}, stacks: map[[2]uint64][]uint64{}}
			if err := r.Replay(bs, tracefile.Window{}); err != nil {
				t.Fatal(err)
			}
			r.Close()
			if len(bs.classed) == 0 {
				t.Fatal("no verdict in the trace")
			}
			sym := symbolize.New(symbolize.Options{})
			defer sym.Close()
			for _, m := range bs.modules {
				sym.AddModule(m)
			}
			site := func(b classedBlock) string {
				var fs []symbolize.Frame
				for _, a := range b.stack {
					fs = append(fs, sym.Frames(b.pid, a)...)
				}
				for _, f := range fs {
					if !allocatorFn("", f.Function) {
						return f.Function
					}
				}
				return ""
			}

			xmlFile := filepath.Join(dir, filepath.Base(prog[0])+".xml")
			cmd := exec.Command(vg, append([]string{"--leak-check=full", "--show-leak-kinds=all", "--run-libc-freeres=no",
				"--xml=yes", "--xml-file=" + xmlFile}, prog...)...)
			cmd.Stdout, cmd.Stderr = nil, nil
			if err := cmd.Run(); err != nil {
				t.Fatalf("valgrind: %v", err)
			}
			b, err := os.ReadFile(xmlFile)
			if err != nil {
				t.Fatal(err)
			}
			var vl vgLeaks
			if err := xml.Unmarshal(b, &vl); err != nil {
				t.Fatal(err)
			}
			type key struct {
				fn   string
				size uint64
			}
			kinds := map[key]map[string]bool{}
			for _, e := range vl.Errors {
				if !strings.HasPrefix(e.Kind, "Leak_") || e.Leak.Blocks == 0 {
					continue
				}
				fn := ""
				for _, f := range e.Frames {
					if !allocatorFn(f.Obj, f.Fn) {
						fn = f.Fn
						break
					}
				}
				k := key{fn, e.Leak.Bytes / e.Leak.Blocks}
				if kinds[k] == nil {
					kinds[k] = map[string]bool{}
				}
				kinds[k][e.Kind] = true
			}
			var counts [event.NumClasses]int
			for _, b := range bs.classed {
				counts[b.class]++
				if b.class != event.ClassDefinite {
					continue
				}
				fn := site(b)
				k := kinds[key{fn, b.size}]
				if k["Leak_StillReachable"] && !k["Leak_DefinitelyLost"] && !k["Leak_IndirectlyLost"] && !k["Leak_PossiblyLost"] {
					t.Errorf("a block of %d bytes from %s: heapscope definitely lost, Memcheck still reachable", b.size, fn)
				}
				t.Logf("definitely lost: %d bytes from %q; Memcheck's records there: %v", b.size, fn, k)
			}
			t.Logf("heapscope's classes: %v (by event.Class); Memcheck's records: %d", counts, len(vl.Errors))
		})
	}
}
