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
		summary: "trace the heap of running processes (eBPF; needs root or CAP_BPF+CAP_PERFMON)",
		help: `
Places uprobes on the allocator of each process; nothing in the process
changes and nothing restarts. The processes they fork are traced too, each
from its first instruction (held, with SIGSTOP, until its probes are in;
--no-follow-fork leaves them alone). The session ends when the last process exits,
after --duration, on Ctrl-C or SIGTERM, or on 'heapscope stop NAME'. Use
'heapscope update NAME' to add or remove processes while it runs.

Once its probes are in, attach takes a census of each process's heap
(glibc's malloc; libc6-dbg must be installed): the process is stopped a
moment, its heap read, and the blocks live then enter the trace as
allocated before it, so that their frees match and the report can say
what of the heap at the end was there before the attach, what those blocks
are (size class, C++ class, strings), and what the process's RSS is made
of. --no-census skips it; --census-scan also scans the heap in the same
stop for who holds each kind of block and for leaks (a longer pause, about
as long as copying the live heap). A process whose allocator is not glibc's
(jemalloc, tcmalloc, mimalloc) is traced without a census, with a warning.`,
		setup: func(fs *flag.FlagSet) func([]string) error {
			var sf sessionFlags
			sf.register(fs, attachFlags)
			var pids pidList
			fs.Var(&pids, "p", "process id(s) to trace, comma-separated or repeated")
			duration := fs.Duration("duration", 0, "stop after this long (0: until the processes exit or Ctrl-C)")
			noCensus := fs.Bool("no-census", false, "take no census of each process's heap at the attach (the blocks live before it are then unknown)")
			censusScan := fs.Bool("census-scan", false, "also scan the heap at the census, in the same stop, for who holds each kind of block and for leaks")
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
				props.NoCensus, props.CensusScan = *noCensus, *censusScan
				if *noCensus && *censusScan {
					return usagef("--census-scan needs the census that --no-census skips")
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
	printCensuses(os.Stderr, s.Censuses())
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
