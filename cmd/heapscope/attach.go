package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
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
'heapscope update NAME' to add or remove processes while it runs.`,
		setup: func(fs *flag.FlagSet) func([]string) error {
			var sf sessionFlags
			sf.register(fs)
			var pids pidList
			fs.Var(&pids, "p", "process id(s) to trace, comma-separated or repeated")
			duration := fs.Duration("duration", 0, "stop after this long (0: until the processes exit or Ctrl-C)")
			unwind := heapscope.Tables
			fs.TextVar(&unwind, "unwind", unwind, "stack walker `UNWINDER`: "+choices(heapscope.Tables, heapscope.FramePointers, heapscope.DWARF)+". tables (unwind tables built from each file's .eh_frame,\nwalked in BPF: complete stacks on code built without frame pointers; dwarf is a synonym) or fp (frame pointers only:\nshort stacks on such code)")
			noFollow := fs.Bool("no-follow-fork", false, "trace only the given processes, not the children they fork (an exec goes on as the same process)")
			withChildren := fs.Bool("with-children", false, "also trace the children the processes have already (an nginx master's workers), and theirs")
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
				props, err := sf.properties(program, pids[0])
				if err != nil {
					return err
				}
				props.Provider = heapscope.ProviderEBPF
				props.NoFollowFork = *noFollow
				props.Unwind = unwind
				pids, untraced := withDescendants(pids, *withChildren)
				if len(untraced) > 0 {
					fmt.Fprintf(os.Stderr, "heapscope: not tracing the children that exist already (the children forked from now on are traced): %s; --with-children traces them too\n", strings.Join(untraced, ", "))
				}
				return attach(sf, props, pids, *duration)
			}
		},
	})
}

// withDescendants returns pids and, if all, the processes that descend
// from them now; and, if not, those processes, described ("pid (title)"),
// for a note that they are not traced.
func withDescendants(pids []int, all bool) ([]int, []string) {
	in := map[int]bool{}
	for _, p := range pids {
		in[p] = true
	}
	var untraced []string
	out := append([]int(nil), pids...)
	for i := 0; i < len(out); i++ {
		kids, _ := proc.Children(out[i])
		for _, k := range kids {
			if in[k] {
				continue
			}
			in[k] = true
			if all {
				out = append(out, k)
				continue
			}
			title := "?"
			if argv, err := proc.Cmdline(k); err == nil && len(argv) > 0 {
				title = strings.Join(argv, " ")
			}
			untraced = append(untraced, fmt.Sprintf("%d (%s)", k, title))
		}
	}
	return out, untraced
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
		return startError(err)
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
