package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/heapscope/heapscope/internal/registry"
	"github.com/heapscope/heapscope/internal/testutil"
)

// TestRunOutputPlantedByAnotherUser: in a folder another user can write, that
// user plants a symlink to a root file and a world-writable file of theirs
// at the names root's `heapscope run` will write. Neither is written
// through: run refuses both, naming --overwrite; with --overwrite each name
// gets a new root-owned 0600 file and the link's target and the planted
// inode are untouched.
func TestRunOutputPlantedByAnotherUser(t *testing.T) {
	uid, gid := testutil.OtherUser(t)
	ctor := testutil.MustBuild(t, "session_ctor", testutil.Options{})
	rootDir := t.TempDir()
	victim := filepath.Join(rootDir, "victim")
	if err := os.WriteFile(victim, []byte("root's file"), 0o600); err != nil {
		t.Fatal(err)
	}
	// The user's folder, where root runs heapscope.
	dir := filepath.Join(t.TempDir(), "user")
	must(t, os.Mkdir(dir, 0o755))
	must(t, os.Chown(dir, int(uid), int(gid)))
	link := filepath.Join(dir, "link.hst")
	must(t, os.Symlink(victim, link))
	must(t, os.Lchown(link, int(uid), int(gid)))
	planted := filepath.Join(dir, "planted.hst")
	must(t, os.WriteFile(planted, nil, 0o666))
	must(t, os.Chown(planted, int(uid), int(gid)))
	must(t, os.Chmod(planted, 0o666))
	keep := filepath.Join(dir, "keep") // the planter's way to the inode
	must(t, os.Link(planted, keep))

	for _, out := range []string{link, planted} {
		code, stderr := exitCode(t, cli(t, "run", "-q", "-o", out, "--", ctor))
		if code == 0 || !strings.Contains(stderr, "--overwrite") {
			t.Errorf("run -o %s: exit %d, %q; want a refusal naming --overwrite", filepath.Base(out), code, stderr)
		}
	}
	if b, _ := os.ReadFile(victim); string(b) != "root's file" {
		t.Fatalf("the symlink's target was written: %d bytes", len(b))
	}
	if b, _ := os.ReadFile(keep); len(b) != 0 {
		t.Fatalf("the planted file received %d bytes of root's trace", len(b))
	}

	for _, out := range []string{link, planted} {
		if code, stderr := exitCode(t, cli(t, "run", "-q", "--overwrite", "-o", out, "--", ctor)); code != 0 {
			t.Fatalf("run --overwrite -o %s: exit %d, %s", filepath.Base(out), code, stderr)
		}
		fi, err := os.Lstat(out)
		if err != nil {
			t.Fatal(err)
		}
		if st := fi.Sys().(*syscall.Stat_t); !fi.Mode().IsRegular() || st.Uid != 0 || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s after --overwrite: %v, uid %d; want a regular file of root's, 0600", filepath.Base(out), fi.Mode(), st.Uid)
		}
		if tr := readTrace(t, out); tr.allocs[7777] != 1 {
			t.Errorf("%s: allocations by size %v", filepath.Base(out), tr.allocs)
		}
	}
	if b, _ := os.ReadFile(victim); string(b) != "root's file" {
		t.Errorf("--overwrite wrote through the symlink: its target holds %d bytes", len(b))
	}
	if b, _ := os.ReadFile(keep); len(b) != 0 {
		t.Errorf("--overwrite wrote into the planted inode: %d bytes", len(b))
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// squatter is another user's program that plants, in a registry shared
// with root, a live entry for each name it is given, under the old layout's
// file name and under root's in the new one, each pointing at a socket of
// its own that answers with a made-up status ("mute*" names: accepts and
// never answers); and a fifo posing as an entry.
const squatter = `
import fcntl, hashlib, json, os, socket, sys, threading
d, names = sys.argv[1], sys.argv[2:]
held = []
def serve(ln, name):
    while True:
        c, _ = ln.accept()
        held.append(c)
        if name.startswith("mute"):
            continue
        c.recv(65536)
        st = {"name": name, "owner": 4242, "pids": [4242], "provider": "ebpf"}
        c.sendall(json.dumps({"result": st}).encode() + b"\n")
        c.close()
for name in names:
    k = hashlib.sha256(name.lower().encode()).hexdigest()[:32]
    for base in (k, k + "-0"):
        sock = os.path.join(d, base + ".sock")
        ln = socket.socket(socket.AF_UNIX)
        ln.bind(sock)
        os.chmod(sock, 0o777)
        ln.listen(64)
        threading.Thread(target=serve, args=(ln, name), daemon=True).start()
        p = os.path.join(d, base + ".session")
        f = open(p, "w")
        os.chmod(p, 0o666)
        json.dump({"name": name, "owner": 4242, "socket": sock, "provider": "ebpf", "started": "2026-01-01T00:00:00Z"}, f)
        f.flush()
        fcntl.flock(f, fcntl.LOCK_EX)
        held.append(f)
os.mkfifo(os.path.join(d, "f" * 32 + "-0.session"), 0o666)
print("ready", flush=True)
sys.stdin.read()
`

// TestRegistrySquatted: another user plants entries in a registry shared
// with root (HEAPSCOPE_RUN_DIR, as the old world-writable registry was).
// root's `stop NAME` is not fooled by a made-up status, `sessions` neither
// lists the planted entries nor waits on them, and root can still run a
// session under the squatted name and stop it for real.
func TestRegistrySquatted(t *testing.T) {
	testutil.OtherUser(t)
	shared := testutil.SharedDir(t)
	inShared := func(args ...string) *exec.Cmd {
		cmd := cli(t, args...)
		cmd.Env = append(cmd.Env, registry.DirEnv+"="+shared) // the last one counts
		return cmd
	}

	sq := exec.Command("/usr/bin/python3", "-c", squatter, shared, "Victim", "mute1", "mute2", "mute3")
	testutil.AsOtherUser(t, sq)
	_, stdout := testutil.StartPiped(t, sq)
	if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("squatter said %q, %v", line, err)
	}

	var out bytes.Buffer
	stop := inShared("stop", "Victim")
	stop.Stdout = &out
	if code, stderr := exitCode(t, stop); code == 0 || strings.Contains(out.String(), "4242") {
		t.Errorf("stop of a planted session: exit %d, printed %q (%s); want a failure and no made-up status", code, out.String(), stderr)
	}

	out.Reset()
	list := inShared("sessions")
	list.Stdout = &out
	done := make(chan error, 1)
	go func() { done <- list.Run() }()
	select {
	case err := <-done:
		if err != nil || strings.Contains(out.String(), "Victim") || strings.Contains(out.String(), "mute") {
			t.Errorf("sessions: %v, listed %q; want none of the planted entries", err, out.String())
		}
	case <-time.After(60 * time.Second):
		list.Process.Kill()
		t.Fatal("sessions still waits on planted entries after 60 s")
	}

	// root's own session under the squatted name.
	ctor := testutil.MustBuild(t, "session_ctor", testutil.Options{})
	trace := filepath.Join(t.TempDir(), "t.hst")
	run := inShared("run", "-q", "--name", "Victim", "-o", trace, "--", ctor, "sleep")
	runOut, _ := run.StdoutPipe()
	var runErr bytes.Buffer
	run.Stderr = &runErr
	must(t, run.Start())
	// run passes SIGTERM on to the program, which holds run's stderr.
	defer func() { run.Process.Signal(syscall.SIGTERM); run.Wait() }()
	if line, _ := bufio.NewReader(runOut).ReadString('\n'); line != "sleeping\n" {
		run.Wait()
		t.Fatalf("root's run under a squatted name: %q, %s", line, runErr.String())
	}
	out.Reset()
	stop = inShared("stop", "victim")
	stop.Stdout = &out
	if code, stderr := exitCode(t, stop); code != 0 || !strings.Contains(out.String(), fmt.Sprintf("pid %d", run.Process.Pid)) {
		t.Errorf("stop of root's session: exit %d, %q, %s; want its status, owner pid %d", code, out.String(), stderr, run.Process.Pid)
	}
	if tr := readTrace(t, trace); tr.allocs[7777] != 1 {
		t.Errorf("allocations by size %v", tr.allocs)
	}
}
