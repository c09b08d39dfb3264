package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/heapscope/heapscope"
	"github.com/heapscope/heapscope/internal/proc"
)

func init() {
	register(&command{
		name:    "attach",
		args:    "-p PID[,PID...] [flags]",
		summary: "trace the heap of running processes (eBPF, or --inject; needs root or CAP_BPF+CAP_PERFMON)",
		help: `
Places uprobes on the allocator of each process; nothing in the process
changes and nothing restarts. The processes they fork are traced too, each
from its first instruction (held, with SIGSTOP, until its probes are in;
--no-follow-fork leaves them alone). The session ends when the last process exits,
after --duration, on Ctrl-C or SIGTERM, or on 'heapscope stop NAME'. Use
'heapscope update NAME' to add or remove processes while it runs.

With --inject, heapscope instead stops each process's threads (ptrace) at a
safe point, makes it load the interposer 'heapscope run' uses, and lets it
run: its allocation functions are redirected (their GOT entries) to the
interposer, at run's cost per call (a few ns with --sample). When the
session ends (heapscope killed included) the entries go back and the
process runs on untraced. Needs the right to ptrace the process (root, or
its user without Yama's restrictions); not for static or non-glibc
programs, nor under seccomp.`,
		setup: func(fs *flag.FlagSet) func([]string) error {
			var sf sessionFlags
			sf.register(fs, attachFlags)
			var pids pidList
			fs.Var(&pids, "p", "process id(s) to trace, comma-separated or repeated")
			duration := fs.Duration("duration", 0, "stop after this long (0: until the processes exit or Ctrl-C)")
			return func(args []string) error {
				if len(args) > 0 {
					return usagef("unexpected arguments %q", args)
				}
				if len(pids) == 0 {
					return usagef("no process: give -p PID")
				}
				program := "pid"
				if exe, err := proc.Exe(pids[0]); err == nil {
					program = exe
				}
				props, err := sf.properties(program, pids[0], true)
				if err != nil {
					return err
				}
				return attach(sf, props, pids, *duration)
			}
		},
	})
}

func attach(sf sessionFlags, props heapscope.Properties, pids []int, duration time.Duration) error {
	name := sf.name.s
	if !sf.name.set {
		name = fmt.Sprintf("heapscope-attach-%d", os.Getpid())
	}
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	s, err := heapscope.Start(name, props, pids)
	if err != nil {
		return sf.startError(err)
	}
	fmt.Fprintf(os.Stderr, "heapscope: session %q tracing pid %v; Ctrl-C or 'heapscope stop %s' ends it\n", name, pidList(pids).String(), name)
	var timeout <-chan time.Time
	if duration > 0 {
		timeout = time.After(duration)
	}
	select {
	case <-s.Done():
	case <-sigs:
	case <-timeout:
	}
	err = s.Stop()
	if !sf.quiet {
		printSummary(os.Stderr, s.Status(), s.Files())
	}
	return err
}
