package main

import (
	"fmt"
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
	"github.com/heapscope/heapscope/internal/stopped"
	"github.com/heapscope/heapscope/internal/testutil"
)

// TestAttachInteractiveShell attaches to an interactive bash with job
// control on a terminal (a tmux pane) and types commands into it, as a user
// would (issue 27, item 6): following its children must not show them to
// bash as stopped. Bash waits for a foreground job with WUNTRACED, so a
// child held with SIGSTOP until its probes are in is reported "Stopped",
// its status is 147 (128+SIGSTOP), and bash often reads an end of file at
// the next command ("exit") and ends. Each command must run to its end with
// status 0, bash must never say "Stopped" and must still answer at the
// end; and the children must still be followed: the three runs of
// report_known are in the trace, children of bash, with their allocations.
func TestAttachInteractiveShell(t *testing.T) {
	testutil.SkipWithoutEBPF(t, ebpf.Available())
	t.Cleanup(testutil.Cleanup)
	bin := testutil.MustBuild(t, "report_known", testutil.Options{})
	dir := t.TempDir()
	trace := filepath.Join(dir, "shell.hst")

	// exec: the pane's process is bash itself, not a shell running it.
	p := newTmuxPane(t, fmt.Sprintf("exec env PS1='shell$ ' HISTFILE=%s /bin/bash --norc --noprofile -i", filepath.Join(dir, "history")))
	// Keep the pane once bash exits, to show its last screen.
	p.tmux("set-option", "-t", "top", "remain-on-exit", "on")
	sh := &shellPane{p: p}
	sh.waitFor("the first prompt", regexp.MustCompile(`(?m)^shell\$ ?$`))
	bash, err := strconv.Atoi(strings.TrimSpace(p.tmux("display", "-p", "-t", "top", "#{pane_pid}")))
	rmust(t, err)
	if args, err := proc.Cmdline(bash); err != nil || len(args) == 0 || args[0] != "/bin/bash" {
		t.Fatalf("the pane's process %d runs %q (%v), not /bin/bash", bash, args, err)
	}
	// Runs after attach is killed (cleanups run last first), which ends any
	// hold of its own: then nothing under bash may be left stopped.
	st, err := proc.ReadStat(bash)
	rmust(t, err)
	t.Cleanup(func() { continueAndKill(st) })

	name := fmt.Sprintf("shell-%d", os.Getpid())
	h := cli(t, "attach", "-q", "--name", name, "-o", trace, "-p", strconv.Itoa(bash))
	errb := startTracing(t, h)

	const runs = 3
	for i := 1; i <= runs; i++ {
		status := regexp.MustCompile(fmt.Sprintf(`rk%d rc=(\d+)`, i))
		if m := status.FindStringSubmatch(sh.run(fmt.Sprintf(`%s; echo "rk%d rc=$?"`, bin, i), status)); m[1] != "0" {
			t.Errorf("run %d of report_known in the shell: status %s, want 0 (147 is 128+SIGSTOP: bash saw it stopped)", i, m[1])
		}
	}
	status := regexp.MustCompile(`true rc=(\d+)`)
	if m := status.FindStringSubmatch(sh.run(`/bin/true; echo "true rc=$?"`, status)); m[1] != "0" {
		t.Errorf("/bin/true in the shell: status %s, want 0", m[1])
	}
	// The quotes keep the typed line from matching the output.
	sh.run(`ls / >/dev/null; echo sec""ond`, regexp.MustCompile(`(?m)^second$`))
	sh.run(`echo al""ive`, regexp.MustCompile(`(?m)^alive$`))
	if err := syscall.Kill(bash, 0); err != nil || !proc.Alive(bash) {
		t.Errorf("bash (pid %d) is not alive after its commands: %v", bash, err)
	}

	rmust(t, cli(t, "stop", name).Run())
	done := make(chan error, 1)
	go func() { done <- h.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("attach: %v: %s", err, errb.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("attach did not end 60s after 'heapscope stop %s': %s", name, errb.String())
	}

	// Following still works: each run of report_known is a child of bash in
	// the trace, with at least its 67 allocations (3 leak_site, 1 calloc_site,
	// 10 peak_site, 50 temp_site, 1 realloc_site, 2 aligned_site).
	info, err := cli(t, "info", trace, "--exe", filepath.Base(bin)).CombinedOutput()
	if err != nil {
		t.Fatalf("info --exe %s (are bash's children followed?): %v\n%s", filepath.Base(bin), err, info)
	}
	kids := regexp.MustCompile(fmt.Sprintf(`(?m)^\s+pid \d+ \(ppid %d\) %s,`, bash, regexp.QuoteMeta(bin))).FindAll(info, -1)
	allocs := 0
	if m := regexp.MustCompile(`(?m)^\s+alloc\s+([\d,]+)$`).FindSubmatch(info); m != nil {
		allocs, _ = strconv.Atoi(strings.ReplaceAll(string(m[1]), ",", ""))
	}
	if len(kids) != runs || allocs < runs*67 {
		t.Errorf("the trace has %d runs of report_known forked by bash with %d allocations, want %d with at least %d:\n%s",
			len(kids), allocs, runs, runs*67, info)
	}
}

// shellPane is a tmux pane running an interactive shell.
type shellPane struct {
	p       *tmuxPane
	stopped bool // a "Stopped" was reported
}

// screen returns the pane's whole history, wrapped lines joined, without
// the blank lines under the last.
func (s *shellPane) screen() string {
	return strings.TrimRight(s.p.tmux("capture-pane", "-p", "-J", "-S", "-", "-t", "top"), "\n ")
}

// run types cmd and Enter, and returns the pane once it shows done; the
// first time the pane shows bash's job-control message "Stopped" is an
// error.
func (s *shellPane) run(cmd string, done *regexp.Regexp) string {
	s.p.t.Helper()
	s.p.tmux("send-keys", "-t", "top", "-l", cmd)
	s.p.keys("Enter")
	screen := s.waitFor(fmt.Sprintf("the end of %q", cmd), done)
	if !s.stopped && strings.Contains(screen, "Stopped") {
		s.stopped = true
		s.p.t.Errorf("bash reported a command stopped, at %q:\n%s", cmd, screen)
	}
	return screen
}

// waitFor returns the pane once it shows want, or fails after a minute or
// as soon as the shell has exited.
func (s *shellPane) waitFor(what string, want *regexp.Regexp) string {
	s.p.t.Helper()
	var screen string
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		screen = s.screen()
		if want.MatchString(screen) {
			return screen
		}
		if dead := strings.Fields(s.p.tmux("display", "-p", "-t", "top", "#{pane_dead} #{pane_dead_status}")); len(dead) > 0 && dead[0] == "1" {
			s.p.t.Fatalf("the shell exited (status %v) before %s:\n%s", dead[1:], what, s.screen())
		}
	}
	s.p.t.Fatalf("the pane never showed %s:\n%s", what, screen)
	return ""
}

// continueAndKill ends the process of st, if it still runs, and every
// process under it, continuing each first: none is left stopped, whatever
// stopped it.
func continueAndKill(st proc.Stat) {
	if now, err := proc.ReadStat(st.PID); err != nil || now.StartTime != st.StartTime {
		return // gone: its pid may be another process's now
	}
	var all []int
	for todo := []int{st.PID}; len(todo) > 0; {
		p := todo[0]
		todo = todo[1:]
		all = append(all, p)
		kids, _ := proc.Children(p)
		todo = append(todo, kids...)
	}
	for _, p := range all {
		syscall.Kill(p, syscall.SIGCONT)
	}
	for _, p := range all {
		syscall.Kill(p, syscall.SIGKILL)
	}
}

// TestAttachTracedElsewhere: a process another debugger traces already
// (this test, with ptrace) cannot be watched: attach traces it all the
// same, says at once that its children are held with a SIGSTOP a shell
// sees, and the trace keeps the warning.
func TestAttachTracedElsewhere(t *testing.T) {
	testutil.SkipWithoutEBPF(t, ebpf.Available())
	prog := exec.Command("/bin/sleep", "30")
	rmust(t, prog.Start())
	t.Cleanup(func() { prog.Process.Kill(); prog.Wait() })
	w, err := stopped.Seize(prog.Process.Pid, stopped.WatchOptions{})
	rmust(t, err)
	defer w.Close()
	trace := filepath.Join(t.TempDir(), "t.hst")
	out, err := cli(t, "attach", "-q", "--no-census", "-p", strconv.Itoa(prog.Process.Pid), "--duration", "500ms", "-o", trace).CombinedOutput()
	if err != nil {
		t.Fatalf("attach: %v\n%s", err, out)
	}
	const want = "its children are held with SIGSTOP until traced"
	if !strings.Contains(string(out), "warning: pid "+strconv.Itoa(prog.Process.Pid)+": "+want) {
		t.Errorf("attach said %q, want a warning that %s", out, want)
	}
	info, err := cli(t, "info", trace).CombinedOutput()
	if err != nil || !strings.Contains(string(info), want) {
		t.Errorf("info (%v) has no warning that %s:\n%s", err, want, info)
	}
}

// TestEBPFChildrenExitStatus: the children an eBPF session follows end with
// their status in the trace, though their parent reaps them (the watch
// that holds them sees their end): an exit code, a signal, and an attached
// process's own end. (Before, each was "detached ..., or ended with a
// status only its parent sees".)
func TestEBPFChildrenExitStatus(t *testing.T) {
	testutil.SkipWithoutEBPF(t, ebpf.Available())
	dir := t.TempDir()
	trace := filepath.Join(dir, "t.hst")
	out, err := cli(t, "run", "-q", "--provider", "ebpf", "-o", trace, "--",
		"/bin/sh", "-c", `(exit 3); /bin/sh -c 'kill -9 $$'; exit 0`).CombinedOutput()
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out)
	}
	info, err := cli(t, "info", trace).CombinedOutput()
	rmust(t, err)
	for _, want := range []string{"status 3", "killed by signal 9"} {
		if !strings.Contains(string(info), want) {
			t.Errorf("info has no child %s:\n%s", want, info)
		}
	}

	// An attached process (not heapscope's child) that exits with 7.
	prog := exec.Command("/bin/sh", "-c", "read x; exit 7")
	in, err := prog.StdinPipe()
	rmust(t, err)
	rmust(t, prog.Start())
	t.Cleanup(func() { prog.Process.Kill(); prog.Wait() })
	trace2 := filepath.Join(dir, "a.hst")
	h := cli(t, "attach", "-q", "--no-census", "-p", strconv.Itoa(prog.Process.Pid), "-o", trace2)
	startTracing(t, h)
	in.Write([]byte("\n"))
	prog.Wait()
	if err := h.Wait(); err != nil {
		t.Fatalf("attach: %v", err)
	}
	info, err = cli(t, "info", trace2).CombinedOutput()
	rmust(t, err)
	if !strings.Contains(string(info), "status 7") {
		t.Errorf("info of the attached process has no status 7:\n%s", info)
	}
}

// TestAttachKilledWhileHolding: heapscope killed (SIGKILL) while its watch
// holds a followed child in a ptrace stop never leaves a process stopped:
// the kernel lets the child go as its tracer dies, and the SIGSTOP it was
// held with then is undone by the tracer's watchdog. 20 kills, each as soon
// as a child of a forking shell is in a ptrace stop.
func TestAttachKilledWhileHolding(t *testing.T) {
	testutil.SkipWithoutEBPF(t, ebpf.Available())
	loop := exec.Command("/bin/sh", "-c", "while :; do /bin/true; done")
	rmust(t, loop.Start())
	st, err := proc.ReadStat(loop.Process.Pid)
	rmust(t, err)
	t.Cleanup(func() { continueAndKill(st); loop.Wait() })
	trace := filepath.Join(t.TempDir(), "t.hst")
	kills := 0
	for round := 0; round < 20; round++ {
		h := cli(t, "attach", "-q", "--no-census", "-p", strconv.Itoa(loop.Process.Pid), "-o", trace, "--overwrite")
		startTracing(t, h)
		held := 0
		for deadline := time.Now().Add(30 * time.Second); held == 0 && time.Now().Before(deadline); {
			kids, _ := proc.Children(loop.Process.Pid)
			for _, k := range kids {
				if s, err := proc.ReadStat(k); err == nil && s.State == 't' {
					held = k
				}
			}
		}
		h.Process.Kill()
		h.Wait()
		if held != 0 {
			kills++
		}
		// Two seconds for the watchdog's last look (one second after
		// the tracer's end), then nothing under the loop is stopped.
		time.Sleep(2 * time.Second)
		kids, _ := proc.Children(loop.Process.Pid)
		for _, p := range append([]int{loop.Process.Pid}, kids...) {
			if s, err := proc.ReadStat(p); err == nil && (s.State == 't' || s.State == 'T') {
				t.Fatalf("round %d (a child held: %v): pid %d left in state %c", round, held != 0, p, s.State)
			}
		}
	}
	t.Logf("%d of 20 kills came while a child was in a ptrace stop", kills)
	if kills < 10 {
		t.Errorf("only %d of 20 kills came while a child was held", kills)
	}
}
