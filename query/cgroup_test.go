package query

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/heapscope/heapscope/internal/testutil"
)

// TestCgroupLeft puts a process in a real memory cgroup limited to 256 MiB
// (version 1's controller, as this machine kind mounts it, or version 2's)
// and reads what it leaves that process: at most the limit, more than
// nothing: MapAuto weighs an index file against that, not against the
// machine's MemAvailable.
func TestCgroupLeft(t *testing.T) {
	const limit = 256 << 20
	name := fmt.Sprintf("heapscope-test-%d", os.Getpid())
	var dir, limitFile string
	for _, c := range []struct{ dir, limit string }{
		{"/sys/fs/cgroup/memory", "memory.limit_in_bytes"},
		{"/sys/fs/cgroup", "memory.max"},
	} {
		d := filepath.Join(c.dir, name)
		if err := os.Mkdir(d, 0o755); err != nil {
			continue
		}
		if err := os.WriteFile(filepath.Join(d, c.limit), []byte(strconv.Itoa(limit)), 0o644); err != nil {
			os.Remove(d)
			continue
		}
		dir, limitFile = d, c.limit
		break
	}
	if dir == "" {
		testutil.SkipWithout(t, fmt.Errorf("no memory cgroup this test can make (needs root and a memory controller)"))
	}
	sleep := exec.Command("sleep", "30")
	if err := sleep.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sleep.Process.Kill()
		sleep.Wait()
		os.Remove(dir)
	})
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(sleep.Process.Pid)), 0o644); err != nil {
		t.Fatal(err)
	}
	left, ok := cgroupLeft(fmt.Sprintf("/proc/%d/cgroup", sleep.Process.Pid), "/sys/fs/cgroup")
	if !ok || left <= 0 || left > limit {
		t.Fatalf("in a cgroup of %s %d: left %d, %v; want (0, %d]", limitFile, limit, left, ok, limit)
	}
}
