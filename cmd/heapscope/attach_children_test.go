package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/heapscope/heapscope/internal/ebpf"
	"github.com/heapscope/heapscope/internal/proc"
	"github.com/heapscope/heapscope/internal/testutil"
)

// TestAttachMasterWithWorkers attaches to an nginx master whose two workers
// exist already: attach says it does not trace them, naming each with its
// title and --with-children; with --with-children the trace has all three,
// each with its own title.
func TestAttachMasterWithWorkers(t *testing.T) {
	testutil.SkipWithoutEBPF(t, ebpf.Available())
	nginx := testutil.Tool(t, "nginx")
	dir := t.TempDir()
	conf := filepath.Join(dir, "nginx.conf")
	text := "daemon off;\nmaster_process on;\nworker_processes 2;\npid " + filepath.Join(dir, "nginx.pid") +
		";\nerror_log " + filepath.Join(dir, "error.log") + ";\nevents { worker_connections 16; }\n"
	if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(nginx, "-c", conf, "-p", dir, "-e", filepath.Join(dir, "error.log"))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Signal(syscall.SIGQUIT)
		cmd.Wait()
	}()
	master := cmd.Process.Pid
	var workers []int
	for deadline := time.Now().Add(30 * time.Second); len(workers) < 2; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("nginx's workers did not start: %v", workers)
		}
		workers, _ = proc.Children(master)
	}

	trace := filepath.Join(dir, "t.hst")
	out, err := cli(t, "attach", "-q", "-p", strconv.Itoa(master), "--duration", "500ms", "-o", trace).CombinedOutput()
	if err != nil {
		t.Fatalf("attach: %v\n%s", err, out)
	}
	for _, w := range workers {
		if !strings.Contains(string(out), strconv.Itoa(w)+" (nginx: worker process)") {
			t.Errorf("attach's output does not name worker %d:\n%s", w, out)
		}
	}
	if !strings.Contains(string(out), "--with-children") {
		t.Errorf("attach's output does not offer --with-children:\n%s", out)
	}

	trace2 := filepath.Join(dir, "t2.hst")
	out, err = cli(t, "attach", "-q", "--with-children", "-p", strconv.Itoa(master), "--duration", "500ms", "-o", trace2).CombinedOutput()
	if err != nil {
		t.Fatalf("attach --with-children: %v\n%s", err, out)
	}
	info, err := cli(t, "info", trace2).CombinedOutput()
	if err != nil {
		t.Fatalf("info: %v\n%s", err, info)
	}
	if !regexp.MustCompile(`(?m)^processes\s+3$`).Match(info) || strings.Count(string(info), "nginx: worker process") != 2 {
		t.Errorf("info of the trace with --with-children, want the master and its two workers with their titles:\n%s", info)
	}
}
