package main

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/heapscope/heapscope/internal/ebpf"
	"github.com/heapscope/heapscope/internal/testutil"
)

// TestQueryShowsUnwindTables: `heapscope query` of a session that walks
// stacks with unwind tables (run's and attach's default) says how many
// tables it made and their size; for eBPF, file by file, libc's among them.
func TestQueryShowsUnwindTables(t *testing.T) {
	t.Cleanup(testutil.Cleanup)
	bin := testutil.MustBuild(t, "preload_wait", testutil.Options{})
	summary := regexp.MustCompile(`unwind    ([1-9]\d*) tables, ([1-9]\d*) bytes, built in `)
	for _, provider := range []string{"preload", "ebpf"} {
		t.Run(provider, func(t *testing.T) {
			if provider == "ebpf" {
				testutil.SkipWithoutEBPF(t, ebpf.Available())
			}
			name := fmt.Sprintf("unwind-query-%s-%d", provider, os.Getpid())
			defer runWaiting(t, "run", "-q", "--provider", provider, "--name", name, "--flush-interval", "10ms",
				"-o", filepath.Join(t.TempDir(), "q.hst"), "--", bin, "2000")()
			var err error
			libc := regexp.MustCompile(`libc\.so\.6: [1-9]\d* entries, [1-9]\d* bytes`)
			var out []byte
			for i := 0; i < 100; i++ {
				out, err = cli(t, "query", name).CombinedOutput()
				if err == nil && summary.Match(out) && (provider == "preload" || libc.Match(out)) {
					return
				}
				time.Sleep(50 * time.Millisecond)
			}
			t.Errorf("query never showed the unwind tables: %v\n%s", err, out)
		})
	}
}

// runWaiting starts the CLI with args, which run preload_wait, and returns
// once the workload allocated its first phase; it waits on its standard
// input until the function returned is called, which ends it.
func runWaiting(t *testing.T, args ...string) (end func()) {
	t.Helper()
	run := cli(t, args...)
	stdin, err := run.StdinPipe()
	rmust(t, err)
	stdout, err := run.StdoutPipe()
	rmust(t, err)
	rmust(t, run.Start())
	end = func() {
		stdin.Close()
		run.Wait()
	}
	lines := bufio.NewScanner(stdout)
	if !lines.Scan() || lines.Text() != "phase 1" {
		end()
		t.Fatalf("the workload did not start: %q", lines.Text())
	}
	return end
}
