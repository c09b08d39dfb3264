package testutil

import (
	"bufio"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// StartPiped starts cmd with its standard input and output piped to the
// test, failing the test if it cannot; cmd is killed and waited for when
// the test ends. Callers read stdout before that: Wait closes it.
func StartPiped(tb testing.TB, cmd *exec.Cmd) (stdin io.WriteCloser, stdout io.ReadCloser) {
	tb.Helper()
	stdin, stdout = Pipes(tb, cmd)
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	return stdin, stdout
}

// Pipes pipes cmd's standard input and output to the test, for a cmd that
// something else starts, failing the test if it cannot.
func Pipes(tb testing.TB, cmd *exec.Cmd) (stdin io.WriteCloser, stdout io.ReadCloser) {
	tb.Helper()
	stdin, stdout, err := OpenPipes(cmd)
	if err != nil {
		tb.Fatal(err)
	}
	return stdin, stdout
}

// OpenPipes is Pipes for a caller that is not a test (the bench programs).
func OpenPipes(cmd *exec.Cmd) (stdin io.WriteCloser, stdout io.ReadCloser, err error) {
	if stdin, err = cmd.StdinPipe(); err != nil {
		return nil, nil, err
	}
	if stdout, err = cmd.StdoutPipe(); err != nil {
		stdin.Close()
		return nil, nil, err
	}
	return stdin, stdout, nil
}

// StartRedis runs redis-server (whose malloc is jemalloc, linked in) until
// the test ends, and returns once it accepts connections: on a Unix socket
// (with no TCP port redis needs one, or it exits), saving nothing.
func StartRedis(tb testing.TB) *exec.Cmd {
	tb.Helper()
	cmd := exec.Command(Tool(tb, "redis-server"), "--port", "0", "--unixsocket", filepath.Join(tb.TempDir(), "redis.sock"),
		"--save", "", "--appendonly", "no")
	_, out := StartPiped(tb, cmd)
	rd := bufio.NewReader(out)
	ReadUntil(tb, rd, "redis-server", func(l string) bool { return strings.Contains(l, "ready to accept connections") })
	go io.Copy(io.Discard, rd)
	return cmd
}

// ReadUntil reads lines from r (the output of what) until match reports
// true of one, and returns that line; it fails the test if r ends first.
func ReadUntil(tb testing.TB, r *bufio.Reader, what string, match func(line string) bool) string {
	tb.Helper()
	for {
		l, err := r.ReadString('\n')
		if err != nil {
			tb.Fatalf("%s: %v (%q)", what, err, l)
		}
		if match(l) {
			return l
		}
	}
}
