package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/heapscope/heapscope"
	"github.com/heapscope/heapscope/analyze"
	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/report"
	"github.com/heapscope/heapscope/tracefile"
)

func init() {
	register(&command{
		name:    "info",
		args:    "FILE | PID",
		summary: "describe a trace file (session, processes, events, losses, warnings), or a running process's heap and RSS",
		help: `
Prints a trace file's header (session, provider, host, clock, mode), its
processes, the number of modules and stacks, the events by kind, the time
they span, the snapshots, the events lost by reason, and what the reader
found wrong with the file (a cut or damaged file still reads: the warnings
say what was lost). A file that is missing, or not a trace, is an error.

--pid and --exe describe only those processes (their events, exits and
modules; lost events stay the session's). Each program is said to have
exited with its status, been killed, been replaced by exec, ended with a
status heapscope could not see, been detached, or still be running.

Given the PID of a running process (a number that names no file), info
takes a census of its heap (glibc's malloc, as attach does: the process is
stopped a moment; needs root or ptrace rights and libc6-dbg) and prints its
RSS explained, part by part (heap in use, allocator overhead, free but kept
by the allocator, mmapped chunks, other anonymous memory, file-backed pages;
each line says whether it was measured or estimated), how its heap is used,
and what its blocks are.`,
		setup: func(fs *flag.FlagSet) func([]string) error {
			var pf procFlags
			pf.register(fs)
			return func(args []string) error {
				if len(args) != 1 {
					return usagef("takes one trace file or PID")
				}
				if pid, ok := isPID(args[0]); ok {
					return infoProcess(os.Stdout, pid)
				}
				return info(os.Stdout, args[0], pf.processes())
			}
		},
	})
}

// infoSink gathers what info prints.
type infoSink struct {
	procs     []event.Process
	exits     map[uint32][]event.Exit
	modules   int
	stacks    int
	kinds     map[event.Kind]uint64
	events    uint64
	first     int64
	last      int64
	snapshots int
	snapLive  uint64 // live blocks listed by the snapshots, in all
	stats     *event.Stats
	warnings  []string // the session's, kept in the trace
	memory    int      // memory samples
	verdicts  int
	censuses  int
}

// Process lists p, or updates the process it is the same as: a record with
// the pid and time of the last one of its pid is that process's, with a
// new command line (a program that wrote its title over its argv).
func (s *infoSink) Process(p event.Process) error {
	for i := len(s.procs) - 1; i >= 0; i-- {
		if q := &s.procs[i]; q.PID == p.PID {
			if q.Time == p.Time {
				*q = p
				return nil
			}
			break
		}
	}
	s.procs = append(s.procs, p)
	return nil
}
func (s *infoSink) Exit(x event.Exit) error {
	s.exits[x.PID] = append(s.exits[x.PID], x)
	return nil
}
func (s *infoSink) Module(event.Module) error  { s.modules++; return nil }
func (s *infoSink) Stack(event.Stack) error    { s.stacks++; return nil }
func (s *infoSink) Stats(st event.Stats) error { s.stats = &st; return nil }
func (s *infoSink) Note(n event.Note) error {
	switch n := n.(type) {
	case event.Warning:
		text := n.Text
		if n.PID != 0 {
			text = fmt.Sprintf("pid %d: %s", n.PID, text)
		}
		s.warnings = append(s.warnings, text)
	case event.Memory:
		s.memory++
	case event.Verdict:
		s.verdicts++
	case event.Census:
		s.censuses++
	}
	return nil
}
func (s *infoSink) Snapshot(sn event.Snapshot) error {
	s.snapshots++
	s.snapLive += uint64(len(sn.Live))
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

// info prints the description of the trace file at path, of the processes
// sel selects.
func info(out io.Writer, path string, sel analyze.Processes) error {
	prog := startProgress("reading", path)
	defer prog.finish()
	r, f, err := openCounted(path, prog)
	if err != nil {
		return err
	}
	defer f.Close()
	defer r.Close()
	s := &infoSink{exits: map[uint32][]event.Exit{}, kinds: map[event.Kind]uint64{}}
	var sink event.Sink = s
	filter := analyze.NewFilter(s, sel)
	if !sel.All() {
		sink = filter
	}
	if err := r.Replay(sink, tracefile.Window{}); err != nil {
		return err
	}
	if !sel.All() && len(s.procs) == 0 {
		var have []string
		for _, p := range filter.Seen() {
			have = append(have, fmt.Sprintf("%d (%s)", p.PID, filepath.Base(p.Exe)))
		}
		return fmt.Errorf("%s has no process of %s; its processes: %s: %w", path, sel, strings.Join(have, ", "), report.ErrNoProcess)
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
	if h.SampleRate > 0 {
		line("sampling", "one allocation per %d bytes allocated on average (the reports' numbers are estimates)", h.SampleRate)
	}
	if len(h.Properties) > 0 {
		var kv []string
		for _, p := range h.Properties {
			kv = append(kv, p.Key+"="+p.Value)
		}
		line("properties", "%s", strings.Join(kv, " "))
	}

	line("processes", "%d", len(s.procs))
	if !sel.All() {
		line("", "selected: %s (the events, modules, stacks and exits below are theirs; lost events are the session's)", sel)
	}
	nth := map[uint32]int{}   // programs of each PID so far
	total := map[uint32]int{} // programs of each PID in all
	for _, p := range s.procs {
		total[p.PID]++
	}
	for _, p := range s.procs {
		desc := fmt.Sprintf("pid %d (ppid %d) %s", p.PID, p.PPID, p.CommandLine())
		if len(p.Cmdline) == 0 || p.Exe != p.Cmdline[0] {
			desc += " [" + p.Exe + "]"
		}
		desc += ", traced from " + since(p.Time)
		// The program's end: each program of a PID ends with one exit
		// record, in order (one an exec replaced too), though it may be
		// written after the next program started.
		execd := nth[p.PID] < total[p.PID]-1 // a later program has its PID
		var exit *event.Exit
		if k := nth[p.PID]; k < len(s.exits[p.PID]) {
			exit = &s.exits[p.PID][k]
		}
		nth[p.PID]++
		desc += ", " + endText(exit, execd, h.Provider, since)
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
	if s.memory > 0 {
		line("memory samples", "%d", s.memory)
	}
	if s.censuses > 0 {
		line("censuses", "%d", s.censuses)
	}
	if s.verdicts > 0 {
		line("leak scans", "%d", s.verdicts)
	}

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
		if st.StacksCut > 0 {
			line("", "%s events with their stack cut short", infoCount(st.StacksCut))
		}
		if st.Unmatched > 0 {
			line("", "%s frees of blocks allocated before tracing", infoCount(st.Unmatched))
		}
		line("written", "%s", infoBytes(int64(st.Bytes)))
	}
	warns := append(dedupStrings(s.warnings), r.Warnings()...)
	if st := s.stats; st != nil {
		w := lossWarnings(*st, h.Provider)
		if s.snapshots > 1 && s.snapLive > st.Delivered {
			w = append(w, fmt.Sprintf("the %d snapshots list %s live blocks in all, more than the %s calls they account for: --mode stream would have recorded less of this program (a live set large for what changes in it)",
				s.snapshots, infoCount(s.snapLive), infoCount(st.Delivered)))
		}
		warns = append(w, warns...)
	}
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

// dedupStrings returns ss without repeats, in the order first seen.
func dedupStrings(ss []string) []string {
	seen := make(map[string]bool, len(ss))
	out := ss[:0:0]
	for _, s := range ss {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

// lossWarnings says what a session's counters show it lost, each with the
// flag that would have kept it: what info lists among its warnings, and
// the summary at the end of run and attach.
func lossWarnings(st event.Stats, provider string) []string {
	fix := [event.NumLostReasons]string{
		event.LostRingFull:    "the kernel's ring buffer was full: give it more room with --buffers (it holds --buffers × --buffer-size)",
		event.LostMapFull:     "a kernel table was full (--mode aggregate's live blocks or stacks, or --sample's sampled blocks)",
		event.LostBufferFull:  "the interposer's buffers were full and --on-full drop: raise --buffers, or --on-full block",
		event.LostFileLimit:   "the trace reached --max-size, or the disk was full",
		event.LostOverwritten: "overwritten in the circular file (--log-mode circular, --max-size)",
		event.LostOther:       "other causes: see the session's warnings",
	}
	if provider == string(heapscope.ProviderPreload) {
		fix[event.LostBufferFull] = "the interposer's buffers were full and --on-full drop: raise --buffers or --buffer-size, or --on-full block"
	}
	var w []string
	for r, n := range st.Lost {
		if n > 0 {
			w = append(w, fmt.Sprintf("%s events lost (%s): %s", infoCount(n), event.LostReason(r), fix[r]))
		}
	}
	if st.StacksLost > 0 {
		w = append(w, fmt.Sprintf("%s events recorded without their stack: the kernel's stack tables were full (raise --max-stacks)", infoCount(st.StacksLost)))
	}
	if st.StacksCut > 0 {
		var why []string
		if n := st.StacksCutDepth; n > 0 {
			why = append(why, fmt.Sprintf("%s at the depth limit (%d frames, the most recorded)", infoCount(n), heapscope.MaxFrames))
		}
		if n := st.StacksCutNoTable; n > 0 {
			why = append(why, fmt.Sprintf("%s after a frame no unwind table covered (a module without .eh_frame, code made at run time, or a table that found no room: raise --unwind-tables-size)", infoCount(n)))
		}
		if n := st.StacksCut - min(st.StacksCut, st.StacksCutDepth+st.StacksCutNoTable); n > 0 {
			why = append(why, fmt.Sprintf("%s where the unwinder had no rule and no frame pointer", infoCount(n)))
		}
		w = append(w, fmt.Sprintf("%s events recorded with their stack cut short: %s", infoCount(st.StacksCut), strings.Join(why, "; ")))
	}
	return w
}

// endText says how a traced program ended: its exit record, if any, told
// truthfully (status -1 is unknown, not a status).
func endText(x *event.Exit, execd bool, provider string, since func(int64) string) string {
	switch {
	case x == nil && execd:
		return "replaced by exec"
	case x == nil:
		return "still running when the trace ends"
	case x.Signal != 0:
		return fmt.Sprintf("killed by signal %d %s", x.Signal, since(x.Time))
	case x.Status >= 0:
		return fmt.Sprintf("exited %s, status %d", since(x.Time), x.Status)
	case execd:
		return "replaced by exec " + since(x.Time)
	case provider == "preload":
		// The interposer sees a program end; only heapscope's own
		// child's status is known.
		return fmt.Sprintf("ended %s, status unknown (not heapscope's child)", since(x.Time))
	}
	return fmt.Sprintf("detached %s (still running, or ended with a status only its parent sees)", since(x.Time))
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
