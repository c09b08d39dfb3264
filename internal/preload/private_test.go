//go:build linux && amd64

package preload

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/internal/testutil"
)

// TestFindPrivateAllocator reads real executables: ones that define an
// allocator's private entry point (as Rust's jemallocator, Redis and direct
// mimalloc users do), one with jemalloc's archive linked in as its malloc,
// one that defines malloc itself, and ones that do not (plain, jemalloc as a
// shared library, static).
func TestFindPrivateAllocator(t *testing.T) {
	const jemallocPIC = "/usr/lib/x86_64-linux-gnu/libjemalloc_pic.a" // libjemalloc-dev
	for _, c := range []struct {
		name  string
		o     testutil.Options
		found bool
		want  PrivateAllocator
	}{
		{"plain", testutil.Options{}, false, PrivateAllocator{}},
		{"rust-jemallocator", testutil.Options{Flags: []string{"-DNAME=_rjem_malloc"}}, true, PrivateAllocator{event.HeapJemalloc, "_rjem_malloc", false}},
		{"je-prefix", testutil.Options{Flags: []string{"-DNAME=je_malloc"}}, true, PrivateAllocator{event.HeapJemalloc, "je_malloc", false}},
		{"mimalloc-direct", testutil.Options{Flags: []string{"-DNAME=mi_malloc"}}, true, PrivateAllocator{event.HeapMimalloc, "mi_malloc", false}},
		{"tcmalloc-direct", testutil.Options{Flags: []string{"-DNAME=tc_malloc"}}, true, PrivateAllocator{event.HeapTcmalloc, "tc_malloc", false}},
		{"own-malloc", testutil.Options{Flags: []string{"-DNAME=malloc"}}, true, PrivateAllocator{event.HeapExe, "malloc", true}},
		{"jemalloc-archive", testutil.Options{Flags: []string{"-Wl,--whole-archive", jemallocPIC, "-Wl,--no-whole-archive", "-lstdc++"}}, true, PrivateAllocator{event.HeapJemalloc, "mallocx", true}},
		{"jemalloc-shared", testutil.Options{Flags: []string{"-Wl,--no-as-needed", libDir + "libjemalloc.so.2"}}, false, PrivateAllocator{}},
		{"static", testutil.Options{Static: true, Flags: []string{"-DNAME=_rjem_malloc"}}, false, PrivateAllocator{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			bin := testutil.MustBuild(t, "private_alloc", c.o)
			got, found, err := FindPrivateAllocator(bin)
			if err != nil {
				t.Fatal(err)
			}
			if found != c.found || got != c.want {
				t.Errorf("FindPrivateAllocator = %+v, %v; want %+v, %v", got, found, c.want, c.found)
			}
		})
	}
	if _, _, err := FindPrivateAllocator("private_test.go"); err == nil {
		t.Error("FindPrivateAllocator of a Go source file: no error")
	}
}

// TestWarnsPrivateAllocator traces private_alloc with an allocator under
// names of its own, launched and as a shell's child: the collector warns
// of it once per image that runs it (OnWarning, and a Warning note in the
// trace, for that image's PID), and not of the plain program or the shell.
func TestWarnsPrivateAllocator(t *testing.T) {
	for _, c := range []struct {
		name  string
		flags []string
		warn  bool
	}{{"rjem", []string{"-DNAME=_rjem_malloc"}, true}, {"plain", nil, false}} {
		bin := testutil.MustBuild(t, "private_alloc", testutil.Options{Flags: c.flags})
		for _, how := range []string{"launched", "child"} {
			t.Run(c.name+"/"+how, func(t *testing.T) {
				cmd := exec.Command(bin, "10")
				if how == "child" {
					cmd = exec.Command("/bin/sh", "-c", bin+" 10; true")
				}
				var told []event.Warning
				r := traceCmd(t, Config{OnWarning: func(w event.Warning) { told = append(told, w) }}, cmd)
				if r.stdout != "done 10\n" {
					t.Fatalf("output %q", r.stdout)
				}
				var pid uint32 // the image that ran bin
				for _, p := range r.procs {
					if p.Exe == bin {
						pid = p.PID
					}
				}
				if pid == 0 {
					t.Fatalf("no image ran %s: %+v", bin, r.procs)
				}
				notes := r.warnings()
				switch {
				case !c.warn && (len(told) != 0 || len(notes) != 0):
					t.Errorf("warned of a plain program: %+v, %+v", told, notes)
				case c.warn && (len(told) != 1 || told[0].PID != pid || told[0].Code != WarnAllocatorUnseen ||
					!strings.Contains(told[0].Text, "_rjem_malloc") || !strings.Contains(told[0].Text, "--provider ebpf")):
					t.Errorf("told %+v; want one %s warning for pid %d naming _rjem_malloc", told, WarnAllocatorUnseen, pid)
				case c.warn && (len(notes) != 1 || notes[0] != told[0]):
					t.Errorf("warnings in the trace %+v; want %+v", notes, told)
				}
			})
		}
	}
}
