package main

import (
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"syscall"

	"github.com/heapscope/heapscope"
	"github.com/heapscope/heapscope/event"
)

func init() {
	register(&command{
		name:       "run",
		flagsFirst: true,
		args:       "[flags] -- PROGRAM [ARGS...]",
		summary:    "launch a program and trace its heap from its first allocation",
		help: `
The program starts held before its first instruction; tracing is turned on,
then it runs. heapscope exits with the program's status (128+N when signal N
killed it). Ctrl-C reaches the program; every event captured reaches the trace.

The preload provider (default) needs no privileges; --provider ebpf needs root
or CAP_BPF and CAP_PERFMON. The dynamic loader ignores LD_PRELOAD for static
programs and for programs that are set-user-ID or set-group-ID to someone else
or have file capabilities: the preload provider refuses those (it would record
nothing); trace them with --provider ebpf.

The program is checked for leaks as it exits (after its exit handlers and
destructors, or at _exit or a fatal signal, before its memory is released,
every thread held): its memory is read from the roots (module data, stacks,
registers, thread-local storage) and each block still live is classified as
Memcheck does (--leak-rules lsan: as LeakSanitizer does): definitely lost,
indirectly lost, possibly lost or still reachable. The report's LEAKS are the
lost ones. For that heapscope traces the program (ptrace) from its start,
which costs it a round trip per signal it takes, thread it makes and exec,
and keeps another debugger off it: --no-leak-check turns the check off.
` + gateHelp,
		setup: func(fs *flag.FlagSet) func([]string) error {
			var sf sessionFlags
			sf.register(fs, launchFlags)
			var lk leakFlags
			lk.register(fs)
			return func(args []string) error {
				if len(args) == 0 {
					return usagef("no program to run")
				}
				props, err := sf.properties(args[0], os.Getpid(), false)
				if err != nil {
					return err
				}
				if err := lk.apply(&props); err != nil {
					return err
				}
				return runProgram(sf, lk, props, args)
			}
		},
	})
}

func runProgram(sf sessionFlags, lk leakFlags, props heapscope.Properties, args []string) error {
	path, err := exec.LookPath(args[0])
	if err != nil {
		// As env(1) and the shells do: 126 for a program found but not
		// executable (no permission, a directory), 127 for one not found.
		fmt.Fprintf(os.Stderr, "heapscope run: %v\n", err)
		if errors.Is(err, fs.ErrPermission) || errors.Is(err, syscall.EISDIR) {
			return exitError{126}
		}
		return exitError{127}
	}
	// The session's warnings (an allocator the interposer cannot see, said
	// as the program starts; an exec it cannot follow) are printed here,
	// on heapscope's stderr, and kept in the trace.
	props.Hooks.OnWarning = func(w event.Warning) {
		if w.PID != 0 {
			fmt.Fprintf(os.Stderr, "heapscope run: warning: pid %d: %s\n", w.PID, w.Text)
		} else {
			fmt.Fprintf(os.Stderr, "heapscope run: warning: %s\n", w.Text)
		}
	}
	cmd := exec.Command(path, args[1:]...)
	cmd.Args[0] = args[0]
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	s, err := heapscope.Launch(sf.sessionName(args[0], os.Getpid()), props, cmd)
	if err != nil {
		if errors.Is(err, syscall.ENOEXEC) || errors.Is(err, syscall.EACCES) {
			// Found but cannot be executed: the shells' 126.
			fmt.Fprintf(os.Stderr, "heapscope run: %v\n", err)
			return exitError{126}
		}
		return sf.startError(err)
	}
	stop := s.ForwardSignals()
	werr := s.Wait()
	status, exited := s.ExitStatus()
	var rep *heapscopeReport
	if lk.gate.active() {
		r, err := gateReport(s.Files(), lk.suppressions)
		if err != nil {
			fmt.Fprintf(os.Stderr, "heapscope run: the gate cannot read the trace: %v\n", err)
			return exitError{lk.gate.status}
		}
		rep = r
	}
	if !sf.quiet {
		if rep != nil {
			printSummaryOf(os.Stderr, s.Status(), s.Files(), rep)
		} else {
			printSummary(os.Stderr, s.Status(), s.Files())
		}
	}
	if !exited {
		// Stopped by name: the program runs on, untraced, and its
		// status is still ours to pass on.
		fmt.Fprintf(os.Stderr, "heapscope run: tracing stopped; waiting for pid %d, which runs on untraced\n", cmd.Process.Pid)
		ch, _ := s.ProgramExited()
		<-ch
		status, _ = s.ExitStatus()
	}
	stop()
	if werr != nil {
		fmt.Fprintf(os.Stderr, "heapscope run: %v\n", werr)
		if status == 0 {
			status = 1
		}
	}
	if rep != nil {
		gs, err := lk.gate.check(os.Stderr, rep, suiteName(args[0]), status)
		if err != nil {
			fmt.Fprintf(os.Stderr, "heapscope run: %v\n", err)
			return exitError{lk.gate.status}
		}
		if gs != 0 {
			return exitError{gs}
		}
	}
	if status != 0 {
		return exitError{status}
	}
	return nil
}
