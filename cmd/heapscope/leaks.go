package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/heapscope/heapscope"
	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/report"
	"github.com/heapscope/heapscope/symbolize"
)

func init() {
	register(&command{
		name:    "leaks",
		args:    "[flags] NAME | -p PID",
		summary: "check a running session's processes for leaks: stop each briefly, classify its blocks",
		help: `
Each process of the live session NAME (or the session of yours that traces
PID) is stopped, every thread of it, while its memory is read; the blocks
the session knows are then classified by what points to them (from the
writable data of its modules, each thread's stack, registers and
thread-local storage): definitely lost, indirectly lost, possibly lost or
still reachable, with Memcheck's rules (--rules lsan: LeakSanitizer's). It
prints how long each process was stopped, the totals of each class and the
top sites of each, and writes the verdict into the session's trace, so that
its reports show it. A process that exits or executes a new program
meanwhile, or a thread that does not stop, is said so; the process runs on.

The blocks an attached process had before the attach come from the census
attach takes of its heap. Without one (--no-census, a forked child's
inherited blocks), the check of such a process takes the heap's other memory
as roots: a block it calls lost is lost, and one it calls still reachable
may be held only by freed memory.

The exit status is 0, or 1 when a check failed; with --fail-on leaks it is
23 (--fail-status) when blocks were lost.`,
		setup: func(fs *flag.FlagSet) func([]string) error {
			pid := fs.Int("p", 0, "check the session of yours that traces `PID`, that process only")
			rules := event.RulesMemcheck
			fs.TextVar(&rules, "rules", rules, "whose classification, `RULES`: memcheck or lsan")
			top := fs.Int("top", 5, "sites listed per class, 1 to 1000")
			asJSON := fs.Bool("json", false, "print the result as JSON (heapscope.LeaksResult)")
			failLeaks := fs.Bool("fail-on-leaks", false, "exit with --fail-status when a block was lost")
			status := fs.Int("fail-status", DefaultFailStatus, "the exit `STATUS` of --fail-on-leaks")
			return func(args []string) error {
				if *top < 1 || *top > heapscope.MaxTopSites {
					return usagef("--top %d: must be 1 to %d", *top, heapscope.MaxTopSites)
				}
				name := ""
				switch {
				case *pid != 0 && len(args) == 0:
					n, err := sessionTracing(*pid)
					if err != nil {
						return err
					}
					name = n
				case *pid == 0 && len(args) == 1:
					name = args[0]
				default:
					return usagef("want a session NAME or -p PID")
				}
				res, err := heapscope.Leaks(name, heapscope.LeaksQuery{PID: *pid, Rules: rules, RulesSet: true, Sites: *top})
				if err != nil {
					return err
				}
				if *asJSON {
					if err := printJSON(res); err != nil {
						return err
					}
				} else {
					printLeaks(os.Stdout, name, res)
				}
				failed, lost := false, false
				for _, p := range res.Processes {
					failed = failed || p.Error != ""
					lost = lost || p.Classes.Lost().Blocks > 0
				}
				switch {
				case *failLeaks && lost:
					return exitError{*status}
				case failed:
					return exitError{1}
				}
				return nil
			}
		},
	})
}

// sessionTracing returns the name of the caller's live session that traces
// pid.
func sessionTracing(pid int) (string, error) {
	list, err := heapscope.Sessions()
	if err != nil {
		return "", err
	}
	for _, st := range list {
		for _, p := range append(st.PIDs, st.Processes...) {
			if p == pid {
				return st.Name, nil
			}
		}
	}
	return "", fmt.Errorf("no session of yours traces pid %d: start one with 'heapscope attach -p %d' (blocks allocated before the attach are not known to its checks): %w",
		pid, pid, heapscope.ErrNotRunning)
}

// printLeaks writes a leak check for people: each process's pause and
// classes, then its top sites by class.
func printLeaks(w io.Writer, name string, res heapscope.LeaksResult) {
	bw := bufio.NewWriter(w)
	defer bw.Flush()
	sym := symbolize.New(symbolize.Options{})
	defer sym.Close()
	for _, m := range res.Modules {
		sym.AddModule(m)
	}
	for _, p := range res.Processes {
		fmt.Fprintf(bw, "leak check of pid %d (session %q", p.PID, name)
		if p.AtExit {
			fmt.Fprintf(bw, ", at its exit")
		}
		fmt.Fprintf(bw, ", %s's rules)\n", rulesName(p.Rules))
		if p.Error != "" {
			fmt.Fprintf(bw, "  not checked: %s\n\n", p.Error)
			continue
		}
		fmt.Fprintf(bw, "  stopped %s; checked in %s; %s known\n", time.Duration(p.Paused).Round(10*time.Microsecond),
			time.Duration(p.Elapsed).Round(10*time.Microsecond), blocksWord(p.Blocks))
		row := func(label string, a heapscope.LeakAmount) {
			fmt.Fprintf(bw, "  %-17s %s in %s\n", label, report.FormatBytes(a.Bytes), blocksWord(a.Blocks))
		}
		row("definitely lost", p.Classes.DefinitelyLost)
		row("indirectly lost", p.Classes.IndirectlyLost)
		row("possibly lost", p.Classes.PossiblyLost)
		row("still reachable", p.Classes.StillReachable)
		if p.Classes.Unclassified.Blocks > 0 {
			row("not classified", p.Classes.Unclassified)
		}
		if !p.Complete || p.Partial {
			for _, n := range p.Notes {
				fmt.Fprintf(bw, "  note: %s\n", n)
			}
		}
		last := event.Class(255)
		for _, s := range p.Sites {
			if s.Class != last {
				title := strings.ToUpper(report.ClassTitle(s.Class))
				if s.Class == event.ClassReachable {
					title += " (freed by nobody, not lost)"
				}
				fmt.Fprintf(bw, "  %s:\n", title)
				last = s.Class
			}
			fmt.Fprintf(bw, "    %s in %s from:\n", report.FormatBytes(s.Bytes), blocksWord(s.Blocks))
			var st []symbolize.Frame
			for _, a := range s.Frames {
				st = append(st, sym.Frames(uint32(p.PID), a)...)
			}
			st = symbolize.TrimAllocator(st)
			if len(st) == 0 {
				fmt.Fprintf(bw, "        [no stack recorded]\n")
			}
			for i, f := range st {
				if i == 10 {
					fmt.Fprintf(bw, "        … %d more frames\n", len(st)-i)
					break
				}
				fmt.Fprintf(bw, "        %s\n", report.FrameText(&f))
			}
		}
		fmt.Fprintln(bw)
	}
}

func blocksWord(n uint64) string {
	if n == 1 {
		return "1 block"
	}
	return strconv.FormatUint(n, 10) + " blocks"
}

func rulesName(r event.Rules) string {
	if r == event.RulesLSan {
		return "LeakSanitizer"
	}
	return "Memcheck"
}
