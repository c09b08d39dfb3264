package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/internal/testutil"
	"github.com/heapscope/heapscope/tracefile"
)

// writeManySitesTrace writes a trace of n sites, each leaking one block
// from a stack of its own of 8 frames in a module that is not on disk
// (frames stay module+offset: no symbolizer time), so that its reports
// are large and take a while to write.
func writeManySitesTrace(t *testing.T, path string, n int) {
	t.Helper()
	const start = int64(1e9)
	w, err := tracefile.Create(path, tracefile.Header{Session: "many", Provider: "preload", MonoStart: start,
		WallStart: time.Unix(1700000000, 0), Clock: "CLOCK_MONOTONIC"}, tracefile.Options{})
	rmust(t, err)
	rmust(t, w.Process(event.Process{PID: 10, PPID: 1, Time: start, Exe: "/nonexistent/many", Cmdline: []string{"many"}}))
	rmust(t, w.Module(event.Module{PID: 10, Time: start, Start: 0x400000, End: 0x40000000, Path: "/nonexistent/many"}))
	var evs []event.Event
	for i := range n {
		frames := make([]uint64, 8)
		for j := range frames {
			frames[j] = 0x400000 + uint64(i*8+j)*16
		}
		rmust(t, w.Stack(event.Stack{PID: 10, ID: event.StackID(i + 1), Frames: frames}))
		evs = append(evs, event.Event{Time: start + int64(i)*1000, PID: 10, TID: 10, Kind: event.KindAlloc, Func: event.FuncMalloc,
			Stack: event.StackID(i + 1), Addr: uint64(0x10000000 + i*64), Size: uint64(16 + i%100)})
	}
	rmust(t, w.Events(evs))
	rmust(t, w.Exit(event.Exit{PID: 10, Time: start + int64(n)*1000, Status: 0}))
	rmust(t, w.Close())
}

// outputCommands are the commands that write -o, as argument lists
// without -o and the trace; base is a second trace.
func outputCommands(base string) [][]string {
	return [][]string{
		{"report", "--format", "json"},
		{"report", "--format", "html"},
		{"export", "--format", "pprof"},
		{"export", "--format", "collapsed"},
		{"diff", "--format", "json", base},
	}
}

// TestOutputPlantedByAnotherUser: report, export, diff and report --format
// html write -o as run writes its trace: a symbolic link (to a file of
// root's) or another user's file at the name is refused, naming
// --overwrite; with --overwrite each name gets a new file of root's, 0600,
// and the link's target and the planted inode are untouched. A file
// written anew is 0600 whatever the umask.
func TestOutputPlantedByAnotherUser(t *testing.T) {
	uid, gid := testutil.OtherUser(t)
	trace := synthTrace(t)
	victim := filepath.Join(t.TempDir(), "victim")
	must(t, os.WriteFile(victim, []byte("root's file"), 0o600))
	dir := filepath.Join(t.TempDir(), "user")
	must(t, os.Mkdir(dir, 0o755))
	must(t, os.Chown(dir, int(uid), int(gid)))
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	for i, args := range outputCommands(trace) {
		name := strings.Join(args[:3], "-")
		link := filepath.Join(dir, name+".link")
		must(t, os.Symlink(victim, link))
		must(t, os.Lchown(link, int(uid), int(gid)))
		planted := filepath.Join(dir, name+".planted")
		must(t, os.WriteFile(planted, nil, 0o666))
		must(t, os.Chown(planted, int(uid), int(gid)))
		keep := filepath.Join(dir, name+".keep")
		must(t, os.Link(planted, keep))
		fresh := filepath.Join(dir, name+".new")
		for _, out := range []string{link, planted} {
			code, stderr := exitCode(t, cli(t, append(append([]string{args[0], "-o", out}, args[1:]...), trace)...))
			if code == 0 || !strings.Contains(stderr, "--overwrite") {
				t.Errorf("%s -o %s: exit %d, %q; want a refusal naming --overwrite", name, filepath.Base(out), code, stderr)
			}
		}
		for _, out := range []string{link, planted, fresh} {
			cmd := append(append([]string{args[0], "-o", out}, args[1:]...), trace)
			if out != fresh {
				cmd = append([]string{args[0], "--overwrite"}, cmd[1:]...)
			}
			if code, stderr := exitCode(t, cli(t, cmd...)); code != 0 {
				t.Fatalf("%q: exit %d, %s", cmd, code, stderr)
			}
			fi, err := os.Lstat(out)
			must(t, err)
			if st := fi.Sys().(*syscall.Stat_t); !fi.Mode().IsRegular() || st.Uid != 0 || fi.Mode().Perm() != 0o600 || fi.Size() == 0 {
				t.Errorf("%s: %v, uid %d, %d bytes; want a regular file of root's, 0600, not empty", filepath.Base(out), fi.Mode(), st.Uid, fi.Size())
			}
		}
		if b, _ := os.ReadFile(victim); string(b) != "root's file" {
			t.Fatalf("%s: the symlink's target was written: %d bytes", name, len(b))
		}
		if b, _ := os.ReadFile(keep); len(b) != 0 {
			t.Fatalf("%s: the planted file received %d bytes", name, len(b))
		}
		if l, _ := filepath.Glob(filepath.Join(dir, ".*.tmp-*")); len(l) != 0 {
			t.Errorf("%d: temporary files left: %q", i, l)
		}
	}
}

// writingTo reports whether process pid has a file of dir open (the
// output being written: the file itself, or its unnamed or temporary
// file).
func writingTo(pid int, dir string) bool {
	fds, _ := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/fd")
	for _, fd := range fds {
		if l, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/fd/" + fd.Name()); err == nil && strings.HasPrefix(l, dir+"/") {
			return true
		}
	}
	return false
}

// TestOutputKilledMidway: report, export and diff interrupted (Ctrl-C) or
// killed while they write -o leave the file they replace whole, and no
// temporary file (issue 25 #12: a 2.9 MB report became 0 bytes).
func TestOutputKilledMidway(t *testing.T) {
	tdir := t.TempDir()
	trace := filepath.Join(tdir, "many.hst")
	writeManySitesTrace(t, trace, 40000)
	base := filepath.Join(tdir, "base.hst")
	writeManySitesTrace(t, base, 100)
	for _, args := range outputCommands(base) {
		for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGKILL} {
			dir := t.TempDir()
			out := filepath.Join(dir, "out")
			must(t, os.WriteFile(out, []byte("the old report"), 0o600))
			cmd := cli(t, append(append([]string{args[0], "-o", out}, args[1:]...), trace)...)
			must(t, cmd.Start())
			caught := false
			for !caught {
				if caught = writingTo(cmd.Process.Pid, dir); caught {
					cmd.Process.Signal(sig)
					break
				}
				var st syscall.WaitStatus
				if pid, _ := syscall.Wait4(cmd.Process.Pid, &st, syscall.WNOHANG, nil); pid != 0 {
					break // ended before it was caught writing
				}
				time.Sleep(200 * time.Microsecond)
			}
			cmd.Wait()
			if !caught {
				t.Errorf("%q: never caught writing", args)
				continue
			}
			b, err := os.ReadFile(out)
			if err != nil || string(b) != "the old report" {
				t.Errorf("%q, %v midway: -o holds %d bytes (%.20q), %v; want the old file", args, sig, len(b), b, err)
			}
			if names, _ := os.ReadDir(dir); len(names) != 1 {
				t.Errorf("%q, %v midway: the folder holds %d files, want only the old one", args, sig, len(names))
			}
		}
	}
}
