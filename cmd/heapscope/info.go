package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/tracefile"
)

func init() {
	register(&command{
		name:    "info",
		args:    "FILE",
		summary: "describe a trace file: session, processes, events, losses, warnings",
		help: `
Prints a trace file's header (session, provider, host, clock, mode), its
processes, the number of modules and stacks, the events by kind, the time
they span, the snapshots, the events lost by reason, and what the reader
found wrong with the file (a cut or damaged file still reads: the warnings
say what was lost). A file that is missing, or not a trace, is an error.`,
		setup: func(fs *flag.FlagSet) func([]string) error {
			return func(args []string) error {
				if len(args) != 1 {
					return usagef("takes one trace file")
				}
				return info(os.Stdout, args[0])
			}
		},
	})
}

// infoSink gathers what info prints.
type infoSink struct {
	procs     []event.Process
	exits     map[uint32]event.Exit
	modules   int
	stacks    int
	kinds     map[event.Kind]uint64
	events    uint64
	first     int64
	last      int64
	snapshots int
	stats     *event.Stats
}

func (s *infoSink) Process(p event.Process) error { s.procs = append(s.procs, p); return nil }
func (s *infoSink) Exit(x event.Exit) error       { s.exits[x.PID] = x; return nil }
func (s *infoSink) Module(event.Module) error     { s.modules++; return nil }
func (s *infoSink) Stack(event.Stack) error       { s.stacks++; return nil }
func (s *infoSink) Stats(st event.Stats) error    { s.stats = &st; return nil }
func (s *infoSink) Snapshot(sn event.Snapshot) error {
	s.snapshots++
	s.seen(sn.Time)
	return nil
}

func (s *infoSink) Events(evs []event.Event) error {
	for i := range evs {
		s.kinds[evs[i].Kind]++
		s.seen(evs[i].Time)
	}
	s.events += uint64(len(evs))
	return nil
}

func (s *infoSink) seen(t int64) {
	if s.first == 0 || t < s.first {
		s.first = t
	}
	if t > s.last {
		s.last = t
	}
}

// info prints the description of the trace file at path.
func info(out io.Writer, path string) error {
	prog := startProgress(path)
	defer prog.finish()
	r, f, err := openCounted(path, prog)
	if err != nil {
		return err
	}
	defer f.Close()
	defer r.Close()
	s := &infoSink{exits: map[uint32]event.Exit{}, kinds: map[event.Kind]uint64{}}
	if err := r.Replay(s, tracefile.Window{}); err != nil {
		return err
	}
	prog.finish()
	h := r.Header()
	size := int64(-1)
	if fi, err := os.Stat(path); err == nil {
		size = fi.Size()
	}

	w := tabwriter.NewWriter(out, 0, 8, 2, ' ', 0)
	line := func(k, format string, args ...any) { fmt.Fprintf(w, "%s\t"+format+"\n", append([]any{k}, args...)...) }
	since := func(t int64) string { return fmt.Sprintf("+%.6fs", float64(t-h.MonoStart)/1e9) }

	line("file", "%s (%s)", path, infoBytes(size))
	line("session", "%s", infoOrNone(h.Session))
	line("provider", "%s", infoOrNone(h.Provider))
	line("host", "%s, kernel %s", infoOrNone(h.Hostname), infoOrNone(h.Kernel))
	started := "unknown"
	if !h.WallStart.IsZero() {
		started = h.WallStart.UTC().Format("2006-01-02 15:04:05.000000 UTC")
	}
	line("started", "%s (%s %.6fs)", started, infoOrNone(h.Clock), float64(h.MonoStart)/1e9)
	mode := h.Mode.String()
	if h.MaxSize > 0 {
		mode += ", maximum size " + infoBytes(h.MaxSize)
	}
	if h.Part > 0 {
		mode += fmt.Sprintf(", file %d of the series", h.Part)
	}
	line("mode", "%s", mode)
	line("format", "version %d, times to %v", h.Version, h.TimeResolution)
	if len(h.Properties) > 0 {
		var kv []string
		for _, p := range h.Properties {
			kv = append(kv, p.Key+"="+p.Value)
		}
		line("properties", "%s", strings.Join(kv, " "))
	}

	line("processes", "%d", len(s.procs))
	for _, p := range s.procs {
		desc := fmt.Sprintf("pid %d (ppid %d) %s", p.PID, p.PPID, p.CommandLine())
		if len(p.Cmdline) == 0 || p.Exe != p.Cmdline[0] {
			desc += " [" + p.Exe + "]"
		}
		desc += ", traced from " + since(p.Time)
		if x, ok := s.exits[p.PID]; ok {
			desc += fmt.Sprintf(", exited %s status %d", since(x.Time), x.Status)
			if x.Signal != 0 {
				desc += fmt.Sprintf(" (signal %d)", x.Signal)
			}
		}
		line("", "%s", desc)
	}
	line("modules", "%d", s.modules)
	line("stacks", "%d", s.stacks)
	line("events", "%s", infoCount(s.events))
	var kinds []event.Kind
	for k := range s.kinds {
		kinds = append(kinds, k)
	}
	sort.Slice(kinds, func(i, j int) bool { return kinds[i] < kinds[j] })
	for _, k := range kinds {
		line("", "%-8s %s", k, infoCount(s.kinds[k]))
	}
	if s.last != 0 {
		line("time span", "%v, from %s to %s", time.Duration(s.last-s.first), since(s.first), since(s.last))
	} else {
		line("time span", "none")
	}
	line("snapshots", "%d", s.snapshots)

	if st := s.stats; st == nil {
		line("stats", "none (no stats record)")
	} else {
		line("delivered", "%s events", infoCount(st.Delivered))
		lost := infoCount(st.TotalLost()) + " events"
		var reasons []string
		for i, n := range st.Lost {
			if n > 0 {
				reasons = append(reasons, fmt.Sprintf("%v %s", event.LostReason(i), infoCount(n)))
			}
		}
		if len(reasons) > 0 {
			lost += " (" + strings.Join(reasons, ", ") + ")"
		}
		line("lost", "%s", lost)
		if st.StacksLost > 0 {
			line("", "%s events without their stack", infoCount(st.StacksLost))
		}
		if st.Unmatched > 0 {
			line("", "%s frees of blocks allocated before tracing", infoCount(st.Unmatched))
		}
		line("written", "%s", infoBytes(int64(st.Bytes)))
	}
	warns := r.Warnings()
	if len(warns) == 0 {
		line("warnings", "none")
	}
	for i, wn := range warns {
		k := ""
		if i == 0 {
			k = "warnings"
		}
		line(k, "%s", wn)
	}
	return w.Flush()
}

func infoOrNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

// infoCount writes n with thousands separators.
func infoCount(n uint64) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

func infoBytes(n int64) string {
	switch {
	case n < 0:
		return "size unknown"
	case n < 1<<10:
		return fmt.Sprintf("%d B", n)
	case n < 1<<20:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	case n < 1<<30:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
}
