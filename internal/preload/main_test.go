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

func TestMain(m *testing.M) {
	if line := os.Getenv(helperEnv); line != "" {
		helper(strings.Fields(line))
		return
	}
	testutil.Main(m)
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
	fmt.Fprintf(os.Stderr, "pid %d\n", cmd.Process.Pid)
	select {}
}
