package control

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/heapscope/heapscope/internal/errs"
	"github.com/heapscope/heapscope/internal/testutil"
)

func TestCall(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.sock")
	srv, err := Listen(path, func(op string, args json.RawMessage) (any, error) {
		switch op {
		case "echo":
			var v map[string]int
			if err := json.Unmarshal(args, &v); err != nil {
				return nil, err
			}
			v["n"]++
			return v, nil
		case "missing":
			return nil, fmt.Errorf("pid 42: %w", errs.ErrNoSuchProcess)
		}
		return nil, fmt.Errorf("unknown op %q", op)
	})
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]int
	if err := Call(path, os.Geteuid(), "echo", map[string]int{"n": 1}, &out); err != nil || out["n"] != 2 {
		t.Errorf("echo: %v, %v", out, err)
	}
	err = Call(path, os.Geteuid(), "missing", nil, nil)
	if !errors.Is(err, errs.ErrNoSuchProcess) || err.Error() != "pid 42: no such process" {
		t.Errorf("missing: %v", err)
	}
	if err := Call(path, os.Geteuid(), "bogus", nil, nil); err == nil || errors.Is(err, errs.ErrNoSuchProcess) {
		t.Errorf("bogus: %v", err)
	}
	srv.Close()
	if err := Call(path, os.Geteuid(), "echo", nil, nil); !errors.Is(err, errs.ErrNotRunning) {
		t.Errorf("after close: %v", err)
	}
}

// fakeSession is a session impostor: a python program that listens on the
// path it is given and answers every request with a made-up status, as
// another user's process would, or (mute) accepts and never answers.
const fakeSession = `
import os, socket, sys
ln = socket.socket(socket.AF_UNIX)
ln.bind(sys.argv[1])
os.chmod(sys.argv[1], 0o777)
ln.listen(8)
print("ready", flush=True)
while True:
    c, _ = ln.accept()
    if sys.argv[2] == "mute":
        continue
    c.recv(65536)
    c.sendall(b'{"result":{"name":"fake","owner":4242}}\n')
    c.close()
`

// startImpostor runs fakeSession at path, as the other user when asUser.
func startImpostor(t *testing.T, path, mode string, asUser bool) {
	t.Helper()
	// The system's python: other users cannot enter root's pyenv.
	cmd := exec.Command("/usr/bin/python3", "-c", fakeSession, path, mode)
	if asUser {
		testutil.AsOtherUser(t, cmd)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("impostor said %q, %v", line, err)
	}
}

// TestCallChecksPeer: another user's socket, a symlink to it, or a socket
// that passes for root's (here chowned, as a path swapped after the check
// would be) but is answered by another user's process, are not the
// session's: Call fails with ErrAccessDenied and never reads the made-up
// status.
func TestCallChecksPeer(t *testing.T) {
	uid, _ := testutil.OtherUser(t)
	dir := testutil.SharedDir(t)
	path := filepath.Join(dir, "s.sock")
	startImpostor(t, path, "answer", true)
	link := filepath.Join(dir, "link.sock")
	if err := os.Symlink(path, link); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{path, link} {
		var out map[string]any
		if err := Call(p, 0, "stop", nil, &out); !errors.Is(err, errs.ErrAccessDenied) || out != nil {
			t.Errorf("Call(%s) as root's session: %v, result %v; want ErrAccessDenied and nothing read", filepath.Base(p), err, out)
		}
	}
	if err := os.Chown(path, 0, 0); err != nil {
		t.Fatal(err)
	}
	var out map[string]any
	err := Call(path, 0, "stop", nil, &out)
	if !errors.Is(err, errs.ErrAccessDenied) || out != nil || !strings.Contains(err.Error(), fmt.Sprintf("uid %d", uid)) {
		t.Errorf("Call answered by uid %d's process: %v, result %v; want ErrAccessDenied naming it and nothing read", uid, err, out)
	}
}

// TestCallBounded: a session that accepts and never answers holds a query
// for QueryTimeout, not for minutes.
func TestCallBounded(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.sock")
	startImpostor(t, path, "mute", false)
	done := make(chan error, 1)
	go func() { done <- Call(path, os.Geteuid(), "query", nil, nil) }()
	select {
	case err := <-done:
		if err == nil {
			t.Error("a mute session answered")
		}
	case <-time.After(10 * QueryTimeout):
		t.Fatalf("a query to a mute session still waits after %v", 10*QueryTimeout)
	}
}
