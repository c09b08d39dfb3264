package ebpf

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/internal/testutil"
)

// nginxConf writes a configuration for an nginx that stays in the
// foreground with a master and two workers, its files in dir.
func nginxConf(t *testing.T, dir string) string {
	conf := filepath.Join(dir, "nginx.conf")
	text := "daemon off;\nmaster_process on;\nworker_processes 2;\npid " + filepath.Join(dir, "nginx.pid") +
		";\nerror_log " + filepath.Join(dir, "error.log") + ";\nevents { worker_connections 16; }\n"
	if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return conf
}

// lastProcess returns the last Process record of pid.
func (r *recorder) lastProcess(pid uint32) (event.Process, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var last event.Process
	n := 0
	for _, p := range r.processes {
		if p.PID == pid {
			last = p
			n++
		}
	}
	return last, n
}

// TestForkedTitles launches nginx (a master and two workers) traced from
// its first instruction: the workers, followed from their fork, first
// carry the master's title, then their own ("nginx: worker process"), sent
// as an update of their Process record (same pid and time); the master's
// is its own.
func TestForkedTitles(t *testing.T) {
	nginx := testutil.Tool(t, "nginx")
	dir := t.TempDir()
	rec := newRecorder(t)
	tr := newTracer(t, Config{}, rec)
	if err := tr.FollowsChildren(); err != nil {
		t.Skip(err)
	}
	cmd := exec.Command(nginx, "-c", nginxConf(t, dir), "-p", dir, "-e", filepath.Join(dir, "error.log"))
	startHeld(t, cmd, func(pid int) error { return tr.Attach(pid, Launched()) })
	defer func() {
		cmd.Process.Signal(syscall.SIGQUIT)
		cmd.Wait()
	}()
	master := uint32(cmd.Process.Pid)
	workers := func() []event.Process {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		var ws []event.Process // each worker's first record
		seen := map[uint32]bool{}
		for _, p := range rec.processes {
			if p.PPID == master && p.PID != master && !seen[p.PID] {
				seen[p.PID] = true
				ws = append(ws, p)
			}
		}
		return ws
	}
	titled := func(p event.Process) bool { return strings.Join(p.Cmdline, " ") == "nginx: worker process" }
	waitFor(t, func() bool {
		n := 0
		for _, w := range workers() {
			if last, _ := rec.lastProcess(w.PID); titled(last) {
				n++
			}
		}
		return n == 2
	})
	for _, w := range workers() {
		last, n := rec.lastProcess(w.PID)
		t.Logf("worker %d: %d records, first %q, last %q", w.PID, n, w.Cmdline, last.Cmdline)
		if last.Time != w.Time {
			t.Errorf("worker %d: its update has time %d, its first record %d: want the same (not a new image)", w.PID, last.Time, w.Time)
		}
	}
	if m, _ := rec.lastProcess(master); !strings.HasPrefix(strings.Join(m.Cmdline, " "), "nginx: master process") {
		t.Errorf("master's command line %q", m.Cmdline)
	}
}
