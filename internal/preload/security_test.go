//go:build linux && amd64

package preload

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/heapscope/heapscope/internal/testutil"
)

// otherUser is the unprivileged user the security tests act as; created
// if absent (the tests run as root).
const otherUser = "heapscope-test"

// otherCred returns the credentials of otherUser, creating the user if
// needed. The test skips when not run as root.
func otherCred(t *testing.T) *syscall.Credential {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: acts as a second, unprivileged user")
	}
	u, err := user.Lookup(otherUser)
	if err != nil {
		out, err := exec.Command("useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", otherUser).CombinedOutput()
		if err != nil {
			t.Fatalf("useradd %s: %v: %s", otherUser, err, out)
		}
		if u, err = user.Lookup(otherUser); err != nil {
			t.Fatal(err)
		}
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
}

// startAs starts a program as the user cred names, in /, and returns its
// standard input and output; the program is killed when the test ends.
func startAs(t *testing.T, cred *syscall.Credential, prog string, args ...string) (io.WriteCloser, *bufio.Reader) {
	t.Helper()
	h := exec.Command(prog, args...)
	h.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	h.Dir = "/"
	h.Stderr = os.Stderr
	hin, hout := testutil.StartPiped(t, h)
	return hin, bufio.NewReader(hout)
}

// pyCount ends a Python script that made a listening socket s: it counts
// in got the connections that reach s and the bytes they send, holding each
// open and unanswered (a traced process would wait for its WELCOME).
const pyCount = `
got = {"conns": 0, "bytes": 0}
held = []
def serve():
    while True:
        c, _ = s.accept()
        got["conns"] += 1
        held.append(c)
        def rd(c=c):
            while True:
                b = c.recv(65536)
                if not b:
                    return
                got["bytes"] += len(b)
        threading.Thread(target=rd, daemon=True).start()
threading.Thread(target=serve, daemon=True).start()
`

// hijacker listens, as another user, on a socket at the path of a session
// that ended, and reports what reaches it.
const hijacker = `
import os, socket, sys, threading
path = sys.argv[1]
os.mkdir(os.path.dirname(path), 0o777)
os.chmod(os.path.dirname(path), 0o777)
s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
s.bind(path)
os.chmod(path, 0o777)
s.listen(64)
` + pyCount + `print("ready", flush=True)
sys.stdin.read()
print("conns %d bytes %d" % (got["conns"], got["bytes"]), flush=True)
`

// TestSocketHijack recreates, as another user, the socket of a session
// that ended; a program the traced process starts afterwards, with the
// session's socket in its environment, must send it nothing and run on
// untraced.
func TestSocketHijack(t *testing.T) {
	cred := otherCred(t)
	// the system's python: the other user cannot reach one under /root
	python := "/usr/bin/python3"
	testutil.Tool(t, python)
	later := testutil.MustBuild(t, "preload_later", testutil.Options{})
	prog := testutil.MustBuild(t, "preload_fork", testutil.Options{})

	rec := newRecorder()
	c, err := New(Config{}, rec)
	if err != nil {
		t.Fatal(err)
	}
	sock := c.sock
	if st, err := os.Stat(filepath.Dir(filepath.Dir(sock))); err != nil || st.Mode().Perm()&0o002 == 0 {
		c.Close()
		t.Skipf("%s is not world-writable: no one else could recreate the socket", filepath.Dir(filepath.Dir(sock)))
	}
	cmd := exec.Command(later, prog, "exec", "20")
	if err := c.Prepare(cmd); err != nil {
		t.Fatal(err)
	}
	// Pipes of our own: Wait would close those of StdinPipe and StdoutPipe
	// when the parent exits, and the child must outlive it.
	inR, stdin, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	out, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdin, cmd.Stdout = inR, outW
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	inR.Close()
	outW.Close()
	defer stdin.Close()
	defer out.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	reportExit(c, cmd)
	// The session is stopped while the child waits: its socket is gone.
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(sock); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("socket %s still there after Close: %v", sock, err)
	}

	hin, hr := startAs(t, cred, python, "-c", hijacker, sock)
	defer os.RemoveAll(filepath.Dir(sock))
	if l, err := hr.ReadString('\n'); err != nil || l != "ready\n" {
		t.Fatalf("hijacker: %q %v", l, err)
	}

	// The child starts its program now. Its stdout closes when it exits.
	stdin.Write([]byte{1})
	stdin.Close()
	done := make(chan error, 1)
	go func() { _, err := io.Copy(io.Discard, out); done <- err }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("the program started after the session did not finish in 60s: stalled on the hijacked socket")
	}
	hin.Close()
	l, err := hr.ReadString('\n')
	if err != nil {
		t.Fatalf("hijacker: %v", err)
	}
	if strings.TrimSpace(l) != "conns 0 bytes 0" {
		t.Errorf("the socket recreated by another user got %s", strings.TrimSpace(l))
	}
}

// TestStaleSocketDirs kills a collector's process with SIGKILL, which
// leaves its socket directory behind; the next collector removes it, and
// leaves alone that of a collector still running.
func TestStaleSocketDirs(t *testing.T) {
	churn := testutil.MustBuild(t, "churn", testutil.Options{})
	live, err := New(Config{}, newRecorder())
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()

	helper := exec.Command(os.Args[0], "-test.run=^$")
	helper.Env = append(os.Environ(), helperEnv+"="+churn+" 300000000 1")
	errs, err := helper.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := helper.Start(); err != nil {
		t.Fatal(err)
	}
	// The helper names its socket: other packages' tests, run meanwhile,
	// make directories of their own.
	var pid int
	var sock string
	line, err := bufio.NewReader(errs).ReadString('\n')
	if _, err2 := fmt.Sscanf(line, "pid %d sock %s", &pid, &sock); err != nil || err2 != nil {
		helper.Process.Kill()
		t.Fatalf("helper said %q: %v %v", line, err, err2)
	}
	helper.Process.Signal(syscall.SIGKILL)
	helper.Wait()
	syscall.Kill(pid, syscall.SIGKILL)
	stale := filepath.Dir(sock)
	if !strings.HasPrefix(filepath.Base(stale), sockDirPrefix) {
		t.Fatalf("the helper's socket %s is not in a directory of its own", sock)
	}
	if _, err := os.Lstat(filepath.Join(stale, "sock")); err != nil {
		t.Fatalf("the killed collector's socket: %v", err)
	}

	next, err := New(Config{}, newRecorder())
	if err != nil {
		t.Fatal(err)
	}
	defer next.Close()
	if _, err := os.Lstat(stale); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the killed collector's directory %s is still there: %v", stale, err)
	}
	for _, c := range []*Collector{live, next} {
		if _, err := os.Lstat(c.sock); err != nil {
			t.Errorf("a running collector's socket: %v", err)
		}
	}
}

// listener is run as another user: it listens on a socket in a directory
// of its own and reports what reaches it.
const listener = `
import os, socket, sys, tempfile, threading
d = tempfile.mkdtemp(prefix="heapscope-test-")
os.chmod(d, 0o755)
path = os.path.join(d, "sock")
s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
s.bind(path)
s.listen(64)
` + pyCount + `print(path, flush=True)
sys.stdin.read()
print("bytes %d" % got["bytes"], flush=True)
`

// TestSocketPeerCred moves another user's listening socket into a
// directory that passes every check on paths (root's, 0700, the socket
// chowned to root and 0600), as a race between those checks and the
// connect could: the peer's credentials still give it away, and the
// process sends it nothing.
func TestSocketPeerCred(t *testing.T) {
	cred := otherCred(t)
	python := "/usr/bin/python3"
	testutil.Tool(t, python)
	lib, err := LibraryPath()
	if err != nil {
		t.Fatal(err)
	}
	hin, hr := startAs(t, cred, python, "-c", listener)
	theirs, err := hr.ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	theirs = strings.TrimSpace(theirs)
	defer os.RemoveAll(filepath.Dir(theirs))

	dir, err := os.MkdirTemp(filepath.Dir(filepath.Dir(theirs)), "heapscope-test-root-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	sock := filepath.Join(dir, "sock")
	if err := os.Rename(theirs, sock); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(sock, 0, 0); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(sock, 0o600); err != nil {
		t.Fatal(err)
	}

	cmd := exec.Command("/bin/sh", "-c", "exec /usr/bin/env")
	cmd.Env = append(os.Environ(), "LD_PRELOAD="+lib, envSocket+"="+sock, envLib+"="+lib, envUID+"=0")
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(out), envPrefix) {
		t.Errorf("a process that could not reach its collector passed the session on:\n%s", out)
	}
	hin.Close()
	l, err := hr.ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(l) != "bytes 0" {
		t.Errorf("another user's socket, behind paths that pass the checks, got %s", strings.TrimSpace(l))
	}
}
