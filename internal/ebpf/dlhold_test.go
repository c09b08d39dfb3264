package ebpf

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/internal/testutil"
)

// dlopenWorkload builds ebpf_dlopen and the library it loads, built
// without frame pointers.
func dlopenWorkload(t *testing.T) (bin, lib string) {
	lib = testutil.MustBuild(t, "ebpf_dlopenlib", testutil.Options{NoFramePointers: true,
		Flags: []string{"-shared", "-fPIC", "-fno-optimize-sibling-calls"}})
	return testutil.MustBuild(t, "ebpf_dlopen", testutil.Options{Flags: []string{"-ldl"}}), lib
}

// launchDlopen runs ebpf_dlopen held at its exec, as `heapscope run`
// does, traced with cfg, and returns the frames of its allocations by
// size, and the tracer, closed. The workload must exit 0: a process the
// loader's stop left stopped fails the test (after a minute) rather than
// hanging it.
func launchDlopen(t *testing.T, cfg Config) (map[uint64][]uint64, *Tracer) {
	bin, lib := dlopenWorkload(t)
	rec := newRecorder(t)
	tr := newTracer(t, cfg, rec)
	cmd := exec.Command(bin, lib)
	startHeld(t, cmd, func(pid int) error { return tr.Attach(pid, Launched()) })
	pid := cmd.Process.Pid
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("workload: %v", err)
		}
	case <-time.After(time.Minute):
		cmd.Process.Kill()
		<-done
		t.Fatal("workload did not finish: left stopped at its loader?")
	}
	if err := tr.ReportExit(pid, 0, 0); err != nil {
		t.Fatal(err)
	}
	<-tr.Done()
	if err := tr.Close(); err != nil {
		t.Fatal(err)
	}
	out := map[uint64][]uint64{}
	for _, e := range rec.eventsOf(pid) {
		if e.Kind == event.KindAlloc && (e.Size == 1111 || e.Size == 2222 || e.Size == 3333) {
			out[e.Size] = rec.frames(pid, e.Stack)
		}
	}
	return out, tr
}

// TestLoaderHold launches ebpf_dlopen held at its exec (libc not mapped
// yet), with unwind tables: libc's table and that of the library it
// dlopens (built without frame pointers) are loaded before their code
// runs, so the stacks are whole from the first allocation: main's site
// through libc to _start (6 frames), lib_work's (7: lib_site lib_mid
// lib_work main, then libc's two and _start). Walked by frame pointer, or
// with tables loaded late, they are 4 and 2 frames.
func TestLoaderHold(t *testing.T) {
	frames, tr := launchDlopen(t, Config{UnwindTables: true})
	for size, want := range map[uint64]int{1111: 6, 3333: 7} {
		if got := len(frames[size]); got != want {
			t.Errorf("the %d-byte allocation's stack has %d frames %#x, want %d", size, got, frames[size], want)
		}
	}
	var libTable, libcTable bool
	for _, tb := range tr.UnwindTables() {
		libTable = libTable || strings.Contains(tb.Path, "ebpf_dlopenlib") && tb.Err == nil && tb.Entries > 0
		libcTable = libcTable || strings.Contains(tb.Path, "libc.so") && tb.Err == nil && tb.Entries > 0
	}
	if !libTable || !libcTable {
		t.Errorf("tables: %+v; want libc's and ebpf_dlopenlib's", tr.UnwindTables())
	}
}

// TestLoaderHoldNoRoom: when the new files' tables cannot be loaded (no
// room in the tables' array), the process stopped at its loader is still
// continued, runs to its end, and the tracer warns.
func TestLoaderHoldNoRoom(t *testing.T) {
	_, tr := launchDlopen(t, Config{UnwindTables: true, UnwindEntries: 8})
	var noRoom bool
	for _, err := range tr.Warnings() {
		noRoom = noRoom || strings.Contains(err.Error(), "no room")
	}
	if !noRoom {
		t.Errorf("warnings %v, want one of a table with no room", tr.Warnings())
	}
}

// TestLoaderNamesFIFO: a traced process that names a FIFO to its loader's
// debugger interface (ebpf_lname sets a library's l_name to one, then
// dlopens another library, and the loader's list is announced again) does
// not stall delivery: the tracer opens what a process names only as a
// regular file it maps, never a FIFO, and away from the delivery
// goroutine. Everything the process did is delivered, and Close returns.
// (Opened as before, with a blocking open of the name, the FIFO stopped all
// delivery, Flush and Close for ever.)
func TestLoaderNamesFIFO(t *testing.T) {
	for _, cfg := range []Config{{}, {UnwindTables: true}} {
		lib := testutil.MustBuild(t, "ebpf_dlopenlib", testutil.Options{Flags: []string{"-shared", "-fPIC"}})
		bin := testutil.MustBuild(t, "ebpf_lname", testutil.Options{Flags: []string{"-ldl"}})
		fifo := filepath.Join(t.TempDir(), "fifo")
		rec := newRecorder(t)
		tr := newTracer(t, cfg, rec)
		w := startWorkload(t, bin, lib, fifo)
		if err := tr.Attach(w.pid()); err != nil {
			t.Fatal(err)
		}
		w.release(t)
		w.expect(t, "done")
		done := make(chan error, 1)
		go func() { done <- tr.Flush() }()
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(30 * time.Second):
			// A writer lets the blocked open return, and the test end.
			if f, err := os.OpenFile(fifo, os.O_WRONLY, 0); err == nil {
				f.Close()
			}
			t.Fatalf("cfg %+v: Flush did not return in 30s: delivery stalled on the FIFO", cfg)
		}
		n := 0
		for _, e := range rec.eventsOf(w.pid()) {
			if e.Kind == event.KindAlloc && e.Size >= 100 && e.Size < 200 {
				n++
			}
		}
		if n != 100 {
			t.Errorf("cfg %+v: %d of the 100 allocations after the FIFO was named delivered", cfg, n)
		}
		w.release(t)
		w.wait(t)
		if err := tr.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
