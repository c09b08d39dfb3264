//go:build linux && amd64

package preload

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/internal/testutil"
)

// helperEnv makes the test binary a collector process that TestCollectorKilled
// can kill: it traces the command in the variable's value and never returns.
const helperEnv = "HEAPSCOPE_PRELOAD_TEST_HELPER"

// countHelperEnv makes the test binary a collector process in block mode
// that TestFrozenCollector can stop: it traces the command in the
// variable's value with its own stdin and stdout, and prints what it
// delivered and lost once the command exited.
const countHelperEnv = "HEAPSCOPE_PRELOAD_TEST_COUNT"

func TestMain(m *testing.M) {
	if line := os.Getenv(helperEnv); line != "" {
		helper(strings.Fields(line))
		return
	}
	if line := os.Getenv(countHelperEnv); line != "" {
		countHelper(strings.Fields(line))
		return
	}
	testutil.Main(m)
}

func countHelper(args []string) {
	sink := &counter{Sink: event.Discard}
	c, err := New(Config{BufferSize: MinBufferSize, OnFull: event.Block}, sink)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	if err := c.Prepare(cmd); err != nil || cmd.Start() != nil {
		os.Exit(1)
	}
	cmd.Wait()
	c.Exited(cmd.Process.Pid, cmd.ProcessState.ExitCode(), 0)
	if err := c.Close(); err != nil {
		os.Exit(1)
	}
	st := c.Stats()
	fmt.Printf("delivered %d lost %d sink %d\n", st.Delivered, st.TotalLost(), sink.n)
}

func helper(args []string) {
	c, err := New(Config{BufferSize: MinBufferSize}, event.Discard)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = os.Environ()
	for i, kv := range cmd.Env {
		if strings.HasPrefix(kv, helperEnv+"=") {
			cmd.Env = append(cmd.Env[:i], cmd.Env[i+1:]...)
			break
		}
	}
	cmd.Stdout = os.Stdout
	if err := c.Prepare(cmd); err != nil || cmd.Start() != nil {
		os.Exit(1)
	}
	// announce the target once it is being traced
	for c.Stats().Delivered == 0 {
		time.Sleep(time.Millisecond)
	}
	fmt.Fprintf(os.Stderr, "pid %d sock %s\n", cmd.Process.Pid, c.sock)
	select {}
}
