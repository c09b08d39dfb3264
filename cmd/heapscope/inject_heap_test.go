package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/heapscope/heapscope/internal/testutil"
)

// freeChunks asks glibc itself (malloc_info, called by gdb in the paused
// process) how many free chunks each arena of the threads holds besides
// its top: the main arena (heap 0: the program's main thread and gdb's
// own calls) is left out.
func freeChunks(t *testing.T, gdb string, pid int) []int {
	t.Helper()
	out := filepath.Join(t.TempDir(), "malloc_info.xml")
	b, err := exec.Command(gdb, "-batch", "-nx", "-p", strconv.Itoa(pid),
		"-ex", fmt.Sprintf(`set $f = (void *)fopen("%s", "w")`, out),
		"-ex", "call (int)malloc_info(0, $f)", "-ex", "call (int)fclose($f)").CombinedOutput()
	if err != nil {
		t.Fatalf("gdb: %v\n%s", err, b)
	}
	xml, err := os.ReadFile(out)
	if err != nil {
		t.Fatalf("gdb: %v\n%s", err, b)
	}
	heaps := regexp.MustCompile(`(?s)<heap nr="(\d+)">.*?<total type="rest" count="(\d+)"`).FindAllStringSubmatch(string(xml), -1)
	if len(heaps) < 2 {
		t.Fatalf("malloc_info: %d heaps:\n%s", len(heaps), xml)
	}
	var free []int
	for _, h := range heaps[1:] {
		n, _ := strconv.Atoi(h[2])
		free = append(free, n-1) // the top is one of them
	}
	return free
}

// TestAttachInjectLeavesArenas: threads that allocate and free one size
// in a loop while an injected session (--unwind dwarf: libunwind walks
// every stack) starts and stops are left with arenas as an untraced run
// leaves them: the top and nothing free below it. Before the first walk
// of a thread was made ahead of the real call, libunwind's thread-local
// block (which the loader allocates with libc's malloc, in the program's
// arena) landed above the block the thread had just been given, and after
// the session every allocation of that size missed the top.
func TestAttachInjectLeavesArenas(t *testing.T) {
	gdb := testutil.Tool(t, "gdb")
	t.Cleanup(testutil.Cleanup)
	bin := testutil.MustBuild(t, "inject_target", testutil.Options{})
	const threads = 3
	run := func(inject bool) []int {
		p := startInteractive(t, bin, strconv.Itoa(threads))
		p.line() // ready
		if l := p.say("size 20000"); l != "sized" {
			t.Fatalf("target: %q", l)
		}
		if l := p.say("run"); l != "running" {
			t.Fatalf("target: %q", l)
		}
		if inject {
			for i := 0; i < 2; i++ {
				a := startAttach(t, "--unwind", "dwarf", "-q", "-o", filepath.Join(t.TempDir(), "t.hst"), "-p", strconv.Itoa(p.cmd.Process.Pid))
				time.Sleep(100 * time.Millisecond)
				a.stop()
			}
		} else {
			time.Sleep(300 * time.Millisecond)
		}
		if l := p.say("pause"); !strings.HasPrefix(l, "paused") {
			t.Fatalf("target: %q", l)
		}
		return freeChunks(t, gdb, p.cmd.Process.Pid)
	}
	control := run(false)
	for _, n := range control {
		if n != 0 {
			t.Fatalf("untraced, the threads' arenas hold free chunks below their top: %v", control)
		}
	}
	got := run(true)
	wedged := len(got) < threads
	for _, n := range got {
		wedged = wedged || n != 0
	}
	if wedged {
		t.Errorf("after injected sessions the threads' arenas hold %v free chunks below their top (untraced: %v)", got, control)
	}
}
