// Package launch starts a program held before its first instruction, so that
// tracing can be turned on before it runs (the seeds' CREATE_SUSPENDED, then
// enable, then resume), and turns its end into an exit status.
package launch

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"
)

// StartHeld starts cmd stopped at its exec (only the executable and the
// dynamic loader are mapped; no instruction of the program has run), calls
// ready with its pid, then lets it run. If ready fails, the child is killed
// and reaped and the error returned.
func StartHeld(cmd *exec.Cmd, ready func(pid int) error) error {
	return startHeld(cmd, ready, 0)
}

// StartStopped is StartHeld, but leaves the child stopped (a group stop,
// SIGSTOP) before its first instruction, untraced: another tracer can then
// seize it (PTRACE_SEIZE) before it runs, and lets it go with SIGCONT.
func StartStopped(cmd *exec.Cmd, ready func(pid int) error) error {
	return startHeld(cmd, ready, unix.SIGSTOP)
}

func startHeld(cmd *exec.Cmd, ready func(pid int) error, detachSig unix.Signal) error {
	// ptrace requests must come from the thread that is the tracer: the one
	// that forked the child.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()

	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Ptrace = true
	if err := cmd.Start(); err != nil {
		return err
	}
	pid := cmd.Process.Pid
	var ws unix.WaitStatus
	for {
		_, err := unix.Wait4(pid, &ws, unix.WALL, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			cmd.Process.Kill()
			return fmt.Errorf("waiting for %s to stop at exec: %w", cmd.Path, err)
		}
		break
	}
	if !ws.Stopped() || ws.StopSignal() != unix.SIGTRAP {
		// It died before reaching its first instruction.
		return fmt.Errorf("%s did not stop at exec (status %v)", cmd.Path, ws)
	}
	if err := ready(pid); err != nil {
		unix.Kill(pid, unix.SIGKILL)
		unix.PtraceDetach(pid)
		cmd.Wait()
		return err
	}
	if _, _, e := unix.Syscall6(unix.SYS_PTRACE, unix.PTRACE_DETACH, uintptr(pid), 0, uintptr(detachSig), 0, 0); e != 0 {
		err := error(e)
		cmd.Process.Kill()
		cmd.Wait()
		return fmt.Errorf("releasing %s: %w", cmd.Path, err)
	}
	if detachSig != 0 {
		// Wait for the group stop, so that the caller finds it stopped,
		// and take its report (never an exit: that stays for cmd.Wait).
		var si unix.Siginfo
		for {
			err := unix.Waitid(unix.P_PID, pid, &si, unix.WSTOPPED|unix.WEXITED|unix.WNOWAIT, nil)
			if !errors.Is(err, unix.EINTR) {
				break
			}
		}
		for {
			err := unix.Waitid(unix.P_PID, pid, &si, unix.WSTOPPED|unix.WNOHANG, nil)
			if !errors.Is(err, unix.EINTR) {
				break
			}
		}
	}
	return nil
}

// Status returns the shell's view of how a process ended: its exit code, or
// 128+N when signal N killed it, and that signal (else 0).
func Status(ps *os.ProcessState) (status, sig int) {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal()), int(ws.Signal())
	}
	return ps.ExitCode(), 0
}
