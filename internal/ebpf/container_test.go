package ebpf

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/heapscope/heapscope/buildid"
	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/internal/proc"
	"github.com/heapscope/heapscope/internal/testutil"
)

// container runs bin, with the libraries ldd lists for it, as /prog in a
// mount and PID namespace of its own whose root is a copy of just those
// files (unshare --mount --pid --fork, then pivot_root as a container
// runtime does, or chroot). It returns the workload and its pid in this
// namespace.
func container(t *testing.T, chroot bool, bin string, args ...string) (*workload, int) {
	t.Helper()
	for _, tool := range []string{"unshare", "pivot_root", "ldd"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%v (Debian packages util-linux, libc-bin)", err)
		}
	}
	root := t.TempDir()
	copyTo := func(from, to string) {
		if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
			t.Fatal(err)
		}
		copyFile(t, from, to)
		if err := os.Chmod(to, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	copyTo(bin, filepath.Join(root, "prog"))
	out, err := exec.Command("ldd", bin).Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, lib := range regexp.MustCompile(`/\S+`).FindAllString(string(out), -1) {
		copyTo(lib, filepath.Join(root, lib))
	}
	if err := os.Mkdir(filepath.Join(root, "old"), 0o755); err != nil {
		t.Fatal(err)
	}
	script := `set -e; mount --bind "$1" "$1"; cd "$1"; pivot_root . old; shift; exec /prog "$@"`
	if chroot {
		script = `set -e; mount --bind "$1" "$1"; root=$1; shift; exec chroot "$root" /prog "$@"`
	}
	w := startWorkloadNoReady(t, "unshare", append([]string{"--mount", "--pid", "--fork", "sh", "-c", script, "sh", root}, args...)...)
	w.expect(t, "ready")
	// /prog is the child of the process unshare forked (sh, exec'd).
	var pid int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, err := proc.ReadStat(p); err == nil && st.PPID == w.pid() {
			pid = p
		}
	}
	if exe, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe"); pid == 0 || err != nil || !strings.HasSuffix(exe, "prog") {
		t.Fatalf("the contained program: pid %d, exe %q, %v", pid, exe, err)
	}
	return w, pid
}

// TestContainer attaches, by its pid here, to a program in a mount and PID
// namespace of its own (a container): its files are read through
// /proc/PID/root (or, chrooted, where the paths in its maps are neither
// ours nor its own, through /proc/PID/map_files), every call is reported
// as from a process here, with the whole stack (unwound with tables), and
// its modules carry the paths its maps give and the build-ids of its own
// files.
func TestContainer(t *testing.T) {
	for _, chroot := range []bool{false, true} {
		t.Run(map[bool]string{false: "pivot_root", true: "chroot"}[chroot], func(t *testing.T) {
			testContainer(t, chroot)
		})
	}
}

func testContainer(t *testing.T, chroot bool) {
	bin := testutil.MustBuild(t, "ebpf_alloc", testutil.Options{})
	rec := newRecorder(t)
	tr := newTracer(t, Config{UnwindTables: true}, rec)
	w, pid := container(t, chroot, bin, "10")
	if err := tr.Attach(pid); err != nil {
		t.Fatal(err)
	}
	w.release(t)
	log := parseLog(t, w.lines(t, "done"))
	mustFlush(t, tr)
	checkCalls(t, rec, pid, log, siteRanges(t, bin, log.sites), aliases(t, libcPath(t, pid)), event.HeapLibc, event.DefaultStacks)
	rec.checkModules(t, pid)

	wantID, err := buildid.File(bin)
	if err != nil || wantID == "" {
		t.Fatalf("build-id of %s: %q %v", bin, wantID, err)
	}
	found := false
	rec.mu.Lock()
	for _, m := range rec.modules {
		if m.PID == uint32(pid) && (m.Path == "/prog" || chroot && strings.HasSuffix(m.Path, "/prog")) {
			found = true
			if m.BuildID != wantID {
				t.Errorf("module /prog: build-id %q, want %q", m.BuildID, wantID)
			}
		}
	}
	rec.mu.Unlock()
	if !found {
		t.Errorf("no module /prog (the path the contained process sees)")
	}
	for _, tb := range tr.UnwindTables() {
		if tb.Err != nil {
			t.Errorf("%s: no unwind table: %v", tb.Path, tb.Err)
		}
	}
}
