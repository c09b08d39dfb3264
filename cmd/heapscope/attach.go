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
	"github.com/heapscope/heapscope/event"
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
from its first instruction: held until its probes are in, in a ptrace
stop its parent cannot see (heapscope traces the processes it follows with
ptrace, so no debugger can trace them meanwhile; --no-follow-fork leaves
children alone and uses no ptrace). The session ends when the last process exits,
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
(jemalloc, tcmalloc, mimalloc) is traced without a census, with a warning.

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
			noCensus := fs.Bool("no-census", false, "take no census of each process's heap at the attach (the blocks live before it are then unknown)")
			censusScan := fs.Bool("census-scan", false, "also scan the heap at the census, in the same stop, for who holds each kind of block and for leaks")
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
				props, err := sf.properties(program, pids[0], true)
				if err != nil {
					return err
				}
				props.NoCensus, props.CensusScan = *noCensus, *censusScan
				if *noCensus && *censusScan {
					return usagef("--census-scan needs the census that --no-census skips")
				}
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
	// The session's warnings are printed as they come (and kept in the
	// trace), but the census's, which printCensuses says, and the leak
	// checks' verdicts, which are 'heapscope leaks''s answer.
	props.Hooks.OnWarning = func(w event.Warning) {
		if w.Code != "census" && w.Code != "leak-check" {
			fmt.Fprintf(os.Stderr, "heapscope: warning: pid %d: %s\n", w.PID, w.Text)
		}
	}
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
