package registry

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/heapscope/heapscope/internal/errs"
	"github.com/heapscope/heapscope/internal/testutil"
)

type dirResult struct {
	Dir    string
	Err    string
	Denied bool
	Found  bool // REGISTRY_TEST_ACQUIRE: a session acquired in Dir was found by Lookup
}

// dirAsOtherUser runs Dir as the other user with env.
func dirAsOtherUser(t *testing.T, env ...string) dirResult {
	t.Helper()
	cmd := exec.Command(testutil.SelfForOtherUser(t), "-test.run=^$")
	cmd.Env = append([]string{"REGISTRY_TEST_DIRFOR=1", "PATH=/usr/bin:/bin"}, env...)
	testutil.AsOtherUser(t, cmd)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("Dir as another user: %v", err)
	}
	var r dirResult
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("child said %q: %v", out, err)
	}
	return r
}

// TestDirPerUser: a user's registry is a folder of their own, 0700, never
// one shared with other users; one planted at its name (a symlink, a folder
// of someone else's) is refused, not used.
func TestDirPerUser(t *testing.T) {
	uid, gid := testutil.OtherUser(t)
	tmp := testutil.SharedDir(t)
	r := dirAsOtherUser(t, "TMPDIR="+tmp)
	want := filepath.Join(tmp, fmt.Sprintf("heapscope-%d", uid))
	if r.Err != "" || r.Dir != want {
		t.Fatalf("Dir as uid %d = %q, %q; want %s", uid, r.Dir, r.Err, want)
	}
	fi, err := os.Lstat(r.Dir)
	if err != nil {
		t.Fatal(err)
	}
	if st := fi.Sys().(*syscall.Stat_t); !fi.IsDir() || st.Uid != uid || fi.Mode().Perm() != 0o700 {
		t.Errorf("%s: %v, uid %d; want a folder of uid %d's, 0700", r.Dir, fi.Mode(), st.Uid, uid)
	}

	// Planted at the name before the user's first session.
	for _, plant := range []func(string) error{
		func(p string) error { return os.Symlink(t.TempDir(), p) },
		func(p string) error { return os.Mkdir(p, 0o755) }, // a folder of root's
	} {
		tmp := testutil.SharedDir(t)
		if err := plant(filepath.Join(tmp, fmt.Sprintf("heapscope-%d", uid))); err != nil {
			t.Fatal(err)
		}
		if r := dirAsOtherUser(t, "TMPDIR="+tmp); !r.Denied || !strings.Contains(r.Err, "uid 0 (root)") {
			t.Errorf("Dir with a planted folder and no home = %q, %q; want ErrAccessDenied naming uid 0 (root)", r.Dir, r.Err)
		}
	}

	// $XDG_RUNTIME_DIR, when it is the user's, is preferred.
	xdg := filepath.Join(testutil.SharedDir(t), "run-user")
	if err := os.Mkdir(xdg, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(xdg, int(uid), int(gid)); err != nil {
		t.Fatal(err)
	}
	if r := dirAsOtherUser(t, "TMPDIR="+tmp, "XDG_RUNTIME_DIR="+xdg); r.Dir != filepath.Join(xdg, "heapscope") || r.Err != "" {
		t.Errorf("Dir with XDG_RUNTIME_DIR = %q, %q; want %s/heapscope", r.Dir, r.Err, xdg)
	}
}

// plantEntry makes, as another user would, a live entry for root's name in
// a shared registry: a file of theirs at root's entry path, locked, that
// points at a socket of theirs.
func plantEntry(t *testing.T, dir, name string) string {
	t.Helper()
	uid, gid := testutil.OtherUser(t)
	path := filepath.Join(dir, key(name, 0)+".session")
	b, _ := json.Marshal(Info{Name: name, Owner: 4242, Socket: filepath.Join(dir, "theirs.sock"), Provider: "ebpf"})
	if err := os.WriteFile(path, b, 0o666); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(path, int(uid), int(gid)); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestPlantedEntryNotTrusted: another user's entry at root's name in a
// shared registry is invisible to root (Lookup, List), holds nothing (root
// takes the name), and its socket is never the one root is given.
func TestPlantedEntryNotTrusted(t *testing.T) {
	dir := testutil.SharedDir(t)
	plantEntry(t, dir, "Victim")
	if info, err := Lookup(dir, "victim"); !errors.Is(err, errs.ErrNotRunning) {
		t.Errorf("Lookup of a planted entry = %+v, %v; want ErrNotRunning", info, err)
	}
	if infos, err := List(dir); err != nil || len(infos) != 0 {
		t.Errorf("List shows planted entries: %+v, %v", infos, err)
	}
	e, err := Acquire(dir, Info{Name: "Victim", Owner: os.Getpid()})
	if err != nil {
		t.Fatalf("root cannot take a name another user planted: %v", err)
	}
	defer e.Release()
	info, err := Lookup(dir, "VICTIM")
	if err != nil || info.Owner != os.Getpid() || info.UID != 0 || info.Socket != SocketPath(dir, "Victim") {
		t.Errorf("Lookup after Acquire = %+v, %v; want root's entry and its own socket", info, err)
	}
}

// TestPlantedLinkAndFifo: a symlink at root's entry path is not followed
// (its target is untouched) and a fifo does not make List or Acquire wait.
func TestPlantedLinkAndFifo(t *testing.T) {
	dir := testutil.SharedDir(t)
	victim := filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(victim, []byte("root's"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(victim, filepath.Join(dir, key("linked", 0)+".session")); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, key("piped", 0)+".session")
	if err := syscall.Mkfifo(fifo, 0o666); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := List(dir)
		for _, name := range []string{"linked", "piped"} {
			if e, aerr := Acquire(dir, Info{Name: name}); aerr != nil {
				err = errors.Join(err, aerr)
			} else {
				e.Release()
			}
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Error(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("List or Acquire still waits on a fifo planted as an entry")
	}
	if b, _ := os.ReadFile(victim); string(b) != "root's" {
		t.Errorf("the entry symlink's target was written: %q", b)
	}
}

// TestDirSquattedFallsBack: another user (root here) who makes a user's
// folder in the temporary directory first, to deny them every session,
// does not: the user's registry is then a folder of theirs in their home,
// kept once made (every process of theirs agrees, and the squatter giving
// the name back changes nothing), where their sessions run and are found.
// Issue 27 #10.
func TestDirSquattedFallsBack(t *testing.T) {
	uid, gid := testutil.OtherUser(t)
	// A short path: the sockets' must fit 107 bytes.
	home, err := os.MkdirTemp("", "hs-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(home) })
	if err := os.Chown(home, int(uid), int(gid)); err != nil {
		t.Fatal(err)
	}
	host, _ := os.Hostname()
	want := filepath.Join(home, ".cache", "heapscope", "sessions-"+host)
	for _, plant := range []func(string) error{
		func(p string) error { return os.Mkdir(p, 0o755) }, // a folder of root's
		func(p string) error { return os.Symlink(t.TempDir(), p) },
		func(p string) error { return os.WriteFile(p, nil, 0o644) },
	} {
		tmp := testutil.SharedDir(t)
		squat := filepath.Join(tmp, fmt.Sprintf("heapscope-%d", uid))
		if err := plant(squat); err != nil {
			t.Fatal(err)
		}
		r := dirAsOtherUser(t, "TMPDIR="+tmp, "HOME="+home, "REGISTRY_TEST_ACQUIRE=1")
		if r.Err != "" || r.Dir != want || !r.Found {
			t.Fatalf("Dir with %s squatted = %q, %q, session found %v; want %s and the session there", squat, r.Dir, r.Err, r.Found, want)
		}
		fi, err := os.Lstat(want)
		if err != nil {
			t.Fatal(err)
		}
		if st := fi.Sys().(*syscall.Stat_t); !fi.IsDir() || st.Uid != uid || fi.Mode().Perm() != 0o700 {
			t.Errorf("%s: %v, uid %d; want a folder of uid %d's, 0700", want, fi.Mode(), st.Uid, uid)
		}
		// The squatter lets go: the user's processes keep the folder
		// their sessions are in.
		if err := os.Remove(squat); err != nil {
			t.Fatal(err)
		}
		if r := dirAsOtherUser(t, "TMPDIR="+tmp, "HOME="+home); r.Dir != want {
			t.Errorf("Dir once the squatter let go = %q, %q; want %s still", r.Dir, r.Err, want)
		}
		if err := os.RemoveAll(filepath.Join(home, ".cache")); err != nil {
			t.Fatal(err)
		}
	}
}
