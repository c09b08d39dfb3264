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
	stdin, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	stdout, err = cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	return stdin, stdout
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
	for {
		line, err := rd.ReadString('\n')
		if err != nil {
			tb.Fatalf("redis-server: %v", err)
		}
		if strings.Contains(line, "ready to accept connections") {
			go io.Copy(io.Discard, rd)
			return cmd
		}
	}
}
