package testutil

import (
	"io"
	"os/exec"
	"testing"
)

// StartPiped starts cmd with its standard input and output piped to the
// test, failing the test if it cannot; cmd is killed and waited for when
// the test ends. Callers read stdout before that: Wait closes it.
func StartPiped(tb testing.TB, cmd *exec.Cmd) (stdin io.WriteCloser, stdout io.ReadCloser) {
	tb.Helper()
	stdin, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	stdout, err = cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	return stdin, stdout
}
