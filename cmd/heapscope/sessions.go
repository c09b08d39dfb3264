package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/heapscope/heapscope"
	"github.com/heapscope/heapscope/event"
)

func init() {
	register(&command{
		name:    "sessions",
		summary: "list your live sessions (each user has a registry of their own)",
		setup: func(fs *flag.FlagSet) func([]string) error {
			asJSON := fs.Bool("json", false, "print JSON")
			return func(args []string) error {
				if len(args) > 0 {
					return usagef("takes no arguments")
				}
				list, err := heapscope.Sessions()
				if err != nil {
					return err
				}
				if *asJSON {
					return printJSON(list)
				}
				tw := tabwriter.NewWriter(os.Stdout, 2, 8, 2, ' ', 0)
				fmt.Fprintln(tw, "NAME\tOWNER\tPROVIDER\tPIDS\tEVENTS\tLOST\tSTARTED")
				for _, st := range list {
					fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%d\t%d\t%s\n", st.Name, st.Owner, st.Provider,
						pidList(st.PIDs).String(), st.Stats.Delivered, st.Stats.TotalLost(),
						st.Started.Local().Format(time.DateTime))
				}
				return tw.Flush()
			}
		},
	})
	for _, op := range []struct {
		op      heapscope.ControlOp
		summary string
	}{
		{heapscope.ControlQuery, "show a live session's state and counters"},
		{heapscope.ControlFlush, "deliver everything a session captured so far to its file"},
		{heapscope.ControlStop, "stop a session by name; its trace file is complete when this returns"},
	} {
		register(&command{
			name:    string(op.op),
			args:    "NAME",
			summary: op.summary,
			setup: func(fs *flag.FlagSet) func([]string) error {
				asJSON := fs.Bool("json", false, "print JSON")
				return func(args []string) error {
					if len(args) != 1 {
						return usagef("want one session name")
					}
					st, err := heapscope.Control(args[0], op.op)
					if err != nil {
						return err
					}
					if *asJSON {
						return printJSON(st)
					}
					printStatus(os.Stdout, st)
					return nil
				}
			},
		})
	}
	register(&command{
		name:    "update",
		args:    "NAME [--add-pid P] [--remove-pid P] [--set-pids P,...] [--stacks KINDS]",
		summary: "change a live session's processes and stack-walked events",
		setup: func(fs *flag.FlagSet) func([]string) error {
			var add, remove, set pidList
			fs.Var(&add, "add-pid", "start tracing these processes")
			fs.Var(&remove, "remove-pid", "stop tracing these processes")
			fs.Var(&set, "set-pids", "trace exactly these processes")
			var stacks event.KindSet
			fs.TextVar(&stacks, "stacks", event.KindSet(0), "`KINDS` that carry a stack: "+choices(event.KindAlloc, event.KindRealloc, event.KindFree, event.KindMmap, event.KindMunmap)+
				"\nas a list, all, none or default (the session's default for its events) (default: no change)")
			return func(args []string) error {
				if len(args) != 1 {
					return usagef("want one session name")
				}
				var c heapscope.Change
				c.AddPIDs, c.RemovePIDs = add, remove
				if len(set) > 0 {
					c.SetPIDs = set
				}
				if isSet(fs, "stacks") {
					c.Stacks = &stacks
				}
				if c.AddPIDs == nil && c.RemovePIDs == nil && c.SetPIDs == nil && c.Stacks == nil {
					return usagef("nothing to change")
				}
				return heapscope.Update(args[0], c)
			}
		},
	})
}

// isSet reports whether the flag name was given.
func isSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

func printJSON(v any) error {
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func printStatus(w io.Writer, st heapscope.Status) {
	fmt.Fprintf(w, "session   %s\n", st.Name)
	fmt.Fprintf(w, "owner     pid %d\n", st.Owner)
	fmt.Fprintf(w, "provider  %s (%s)\n", st.Provider, st.Properties.Mode)
	fmt.Fprintf(w, "pids      %s\n", pidList(st.PIDs).String())
	fmt.Fprintf(w, "stacks    %s\n", st.Stacks)
	fmt.Fprintf(w, "events    %s\n", st.Properties.Families)
	fmt.Fprintf(w, "started   %s\n", st.Started.Local().Format(time.DateTime))
	if len(st.Exports) > 0 {
		fmt.Fprintf(w, "export    every %s\n", st.Properties.ExportInterval)
	}
	if len(st.Files) > 0 {
		fmt.Fprintf(w, "files     %s (%s mode)\n", strings.Join(st.Files, ", "), st.Properties.FileMode)
	} else {
		fmt.Fprintf(w, "files     none (%s mode)\n", st.Properties.FileMode)
	}
	if u := st.Unwind; u != nil {
		fmt.Fprintf(w, "unwind    %d tables, %d bytes, built in %s", u.Files, u.Bytes, u.BuildTime.Round(time.Millisecond))
		if u.Failures > 0 {
			fmt.Fprintf(w, "; %d files without one (frame pointers there)", u.Failures)
		}
		fmt.Fprintln(w)
		for _, m := range u.Modules {
			if m.Error != "" {
				fmt.Fprintf(w, "          %s: none: %s\n", m.Path, m.Error)
				continue
			}
			fmt.Fprintf(w, "          %s: %d entries, %d bytes, %s\n", m.Path, m.Entries, m.Bytes, m.BuildTime.Round(time.Microsecond))
		}
	}
	printStats(w, st)
}

func printStats(w io.Writer, st heapscope.Status) {
	if r := st.Properties.Sample; r > 0 {
		recorded := fmt.Sprintf("%d allocations recorded", st.Sampled)
		if st.Properties.Mode == heapscope.Aggregate {
			// The kernel's tables keep sums; what they took in are
			// the sampled blocks' calls.
			recorded = fmt.Sprintf("%d calls of sampled blocks accounted in the kernel's tables", st.Stats.Delivered)
		}
		fmt.Fprintf(w, "sampling  one allocation per %d bytes allocated on average: %s\n", r, recorded)
	}
	fmt.Fprintf(w, "delivered %d events, %d bytes written\n", st.Stats.Delivered, st.Stats.Bytes)
	fmt.Fprintf(w, "lost      %d events", st.Stats.TotalLost())
	var parts []string
	for r, n := range st.Stats.Lost {
		if n > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", event.LostReason(r), n))
		}
	}
	if len(parts) > 0 {
		fmt.Fprintf(w, " (%s)", strings.Join(parts, ", "))
	}
	fmt.Fprintln(w)
	for _, l := range append(lossWarnings(st.Stats, string(st.Provider)), st.Warnings...) {
		fmt.Fprintf(w, "warning   %s\n", l)
	}
	for _, e := range st.Exports {
		fmt.Fprintf(w, "exports to %s: %d sent, %d retried, %d dropped", e.Target, e.Sent, e.Retried, e.Dropped)
		if e.Rejected > 0 {
			fmt.Fprintf(w, " (%d rejected)", e.Rejected)
		}
		if e.Queued > 0 {
			fmt.Fprintf(w, ", %d queued", e.Queued)
		}
		fmt.Fprintln(w)
		if e.LastError != "" && (e.Dropped > 0 || e.Retried > 0 || e.Queued > 0) {
			msg := strings.Join(strings.Fields(e.LastError), " ")
			if len(msg) > 300 {
				msg = msg[:300] + "…"
			}
			fmt.Fprintf(w, "          last error: %s\n", msg)
		}
	}
}
