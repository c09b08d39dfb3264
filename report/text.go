package report

import (
	"bufio"
	"fmt"
	"io"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/heapscope/heapscope/analyze"
	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/symbolize"
)

// TextOptions shape the text report.
type TextOptions struct {
	// Top is how many sites each section lists (default 10).
	Top int
	// MaxFrames is how many frames of each stack are printed (default 24).
	MaxFrames int
	// FullNames prints C++ names whole; by default the arguments of
	// templates are elided (see ShortName).
	FullNames bool
	// Brief prints only the summary and the top leaks and peak consumers
	// (Top defaults to 3, MaxFrames to 8): what run and attach print when
	// they finish.
	Brief bool
}

// WriteText writes the report for people: the summary first, then the top
// leaks, the peak consumers, the sites with the most allocation calls and
// with the most temporaries, and the allocation size histogram.
func (r *Report) WriteText(w io.Writer, o TextOptions) error {
	if o.Top <= 0 {
		o.Top = 10
		if o.Brief {
			o.Top = 3
		}
	}
	if o.MaxFrames <= 0 {
		o.MaxFrames = 24
		if o.Brief {
			o.MaxFrames = 8
		}
	}
	bw := bufio.NewWriter(w)
	t := &textWriter{w: bw, r: r, o: o}
	t.header()
	t.summary()
	t.census()
	p := r.Profile
	if r.LeakChecked() {
		t.leakChecked()
	} else {
		t.section("LEAKS", "still live at the end", byLeaked, func(s *Site) string {
			return fmt.Sprintf("%s leaked in %s from", fmtBytes(s.LiveBytes), plural(s.LiveBlocks, "block"))
		})
	}
	t.suppressed()
	peakNote := fmt.Sprintf("live at the peak, %s at %s", fmtBytes(p.Peak.Bytes), fmtDur(r.rel(p.Peak.Time)))
	if p.Missing.Has(analyze.NoPeakInstant) {
		peakNote = fmt.Sprintf("live at the snapshot with the most, %s at %s", fmtBytes(p.Peak.Bytes), fmtDur(r.rel(p.Peak.Time)))
	}
	t.section("PEAK CONSUMERS", peakNote, byPeak, func(s *Site) string {
		return fmt.Sprintf("%s (%s) in %s at the peak from", fmtBytes(s.PeakBytes), pct(s.PeakBytes, p.Peak.Bytes), plural(s.PeakBlocks, "block"))
	})
	if o.Brief {
		return bw.Flush()
	}
	t.section("MOST ALLOCATION CALLS", "", byCalls, func(s *Site) string {
		calls := fmtCount(s.Allocations) + " calls"
		if s.Reallocations > 0 {
			calls = fmt.Sprintf("%s calls (%s reallocations)", fmtCount(s.Allocations+s.Reallocations), fmtCount(s.Reallocations))
		}
		if p.Missing.Has(analyze.NoReallocSplit) {
			calls = fmtCount(s.Allocations+s.Reallocations) + " calls"
		}
		temp := fmtCount(s.Temporary) + " temporary"
		if p.Missing.Has(analyze.NoTemporaries) {
			temp = "temporary unknown"
		}
		return fmt.Sprintf("%s, %s allocated, %s from", calls, fmtBytes(s.Bytes), temp)
	})
	if !p.Missing.Has(analyze.NoTemporaries) {
		t.section("MOST TEMPORARY ALLOCATIONS", "freed by the next heap call of the thread that made them", byTemp, func(s *Site) string {
			return fmt.Sprintf("%s temporary of %s allocations (%s) from", fmtCount(s.Temporary),
				fmtCount(s.Allocations+s.Reallocations), pct(s.Temporary, s.Allocations+s.Reallocations))
		})
	}
	t.histogram()
	t.warnings()
	return bw.Flush()
}

type textWriter struct {
	w *bufio.Writer
	r *Report
	o TextOptions
}

func (t *textWriter) printf(format string, args ...any) { fmt.Fprintf(t.w, format, args...) }

func (t *textWriter) header() {
	r := t.r
	name := r.Trace.File
	if name == "" {
		name = "(live session)"
	}
	t.printf("heapscope report of %s", name)
	var attrs []string
	if r.Trace.Session != "" {
		attrs = append(attrs, fmt.Sprintf("session %q", r.Trace.Session))
	}
	if r.Trace.Provider != "" {
		attrs = append(attrs, "provider "+r.Trace.Provider)
	}
	if !r.Trace.WallStart.IsZero() {
		attrs = append(attrs, "started "+r.Trace.WallStart.Format(time.RFC3339))
	}
	if len(attrs) > 0 {
		t.printf(" (%s)", strings.Join(attrs, ", "))
	}
	t.printf("\n")
	if p := r.Profile; p.Estimated() {
		t.printf("This trace was sampled: one allocation per %s allocated on average was recorded (%s here).\n", fmtRate(p.SampleRate), sampledText(p))
		t.printf("Every byte and block count below is %s: each allocation\nrecorded of S bytes counts S/(1-exp(-S/R)) bytes and 1/(1-exp(-S/R)) blocks. Temporaries are not available when sampled.\n", estimatedNote(p))
		if _, _, _, ok := r.StandardErrors(); ok {
			t.printf("A ± is the estimate's standard error: about two estimates in three are within one of the truth.\n")
		}
	}
	var totals map[uint32]*ProcessTotals
	if len(r.Profile.Processes) > 1 {
		totals = r.ByProcess()
	}
	for _, p := range r.Profile.Processes {
		t.printf("process %d", p.PID)
		if len(p.Cmdline) > 0 {
			t.printf(": %s", p.CommandLine())
		} else if p.Exe != "" {
			t.printf(": %s", p.Exe)
		}
		if p.Exited {
			switch {
			case p.Exit.Signal != 0:
				t.printf(" (killed by signal %d)", p.Exit.Signal)
			case p.Exit.Status >= 0:
				t.printf(" (exit status %d)", p.Exit.Status)
			case r.Trace.Provider == "preload":
				// The interposer saw it end; only heapscope's own
				// child's status is known.
				t.printf(" (ended, status unknown: not heapscope's child)")
			default:
				t.printf(" (detached)")
			}
		} else {
			t.printf(" (still running when the trace ends)")
		}
		t.printf("\n")
		if pt := totals[p.PID]; pt != nil {
			leaked := fmt.Sprintf("%s leaked in %s", fmtBytes(pt.LiveBytes), plural(pt.LiveBlocks, "block"))
			if r.LeakChecked() {
				l := pt.Lost()
				leaked = fmt.Sprintf("%s leaked in %s (lost; %s live at the end)", fmtBytes(l.Bytes), plural(l.Blocks, "block"), fmtBytes(pt.LiveBytes))
			}
			t.printf("    %s calls, %s allocated, %s, %s live at the peak\n",
				fmtCount(pt.Allocations+pt.Reallocations), fmtBytes(pt.Bytes), leaked, fmtBytes(pt.PeakBytes))
		}
	}
	if p := r.Profile; p.From != 0 || p.To != 0 {
		from, to := "the start", "the end"
		if p.From != 0 {
			from = fmtDur(r.rel(p.From))
		}
		if p.To != 0 {
			to = fmtDur(r.rel(p.To))
		}
		t.printf("window: from %s to %s; blocks allocated before it are unknown, frees of them are unmatched\n", from, to)
	}
	if p := r.Profile; p.Missing != 0 && p.Aggregate {
		t.printf("\nThis trace holds snapshots (aggregate mode), not every event, so this report has:\n")
		for _, d := range p.Missing.Describe() {
			t.printf("  - %s\n", d)
		}
	}
	t.printf("\n")
}

func (t *textWriter) summary() {
	r, p := t.r, t.r.Profile
	s := p.Summary
	row := func(label, format string, args ...any) {
		t.printf("  %-22s %s\n", label, fmt.Sprintf(format, args...))
	}
	t.printf("SUMMARY")
	if e := estimatedNote(p); e != "" {
		t.printf(": %s", e)
	}
	t.printf("\n")
	dur := r.Duration()
	row("duration", "%s", fmtDur(dur))
	rate := ""
	if cr := r.CallRate(); cr > 0 {
		rate = fmt.Sprintf(" (%s/s)", fmtCount(uint64(cr)))
	}
	row("allocation calls", "%s%s", fmtCount(s.Allocations+s.Reallocations), rate)
	if p.Missing.Has(analyze.NoReallocSplit) {
		row("  reallocations", "unknown (aggregate trace: counted among the calls)")
	} else {
		row("  reallocations", "%s", fmtCount(s.Reallocations))
	}
	if p.Estimated() {
		row("  failed", "not recorded when sampled")
	} else if p.Missing.Has(analyze.NoFailed) {
		row("  failed", "unknown (aggregate trace)")
	} else if s.Failed > 0 {
		row("  failed", "%s (returned NULL)", fmtCount(s.Failed))
	}
	row("frees", "%s", fmtCount(s.Frees))
	seB, seP, seL, seOK := r.StandardErrors()
	row("bytes allocated", "%s%s", fmtBytesExact(s.Bytes), plusMinus(seB, seOK))
	peak := fmt.Sprintf("%s%s in %s at %s", fmtBytesExact(p.Peak.Bytes), plusMinus(seP, seOK), plural(p.Peak.Blocks, "block"), fmtDur(r.rel(p.Peak.Time)))
	if p.Missing.Has(analyze.NoPeakInstant) {
		peak = "at least " + peak + " (largest at a snapshot)"
	}
	row("peak heap", "%s", peak)
	lb, lk := r.Leaked()
	if r.LeakChecked() {
		t.classRows(row, lb, lk)
	} else {
		row("leaked", "%s%s in %s", fmtBytesExact(lb), plusMinus(seL, seOK), plural(lk, "block"))
	}
	if bb, bk, ok := r.beforeTraceLive(); ok {
		row("  before the trace", "%s in %s of them were live before it (a census: see BEFORE THE TRACE)", fmtBytes(bb), plural(bk, "block"))
	}
	if sb, sk, n := r.SuppressedTotal(); n > 0 {
		row("suppressed", "%s in %s by %s (not leaks of the program: see SUPPRESSED)", fmtBytesExact(sb), plural(sk, "block"), plural(uint64(n), "rule"))
	}
	if p.Estimated() {
		row("temporary", "not available when sampled (it needs every event)")
		row("sampled", "%s, one per %s allocated on average", sampledText(p), fmtRate(p.SampleRate))
	} else if p.Missing.Has(analyze.NoTemporaries) {
		row("temporary", "unknown (aggregate trace)")
	} else {
		row("temporary", "%s (%s of allocation calls): freed by the next heap call of the thread that made them", fmtCount(s.Temporary), pct(s.Temporary, s.Allocations+s.Reallocations))
		if !t.o.Brief {
			row("", "(heaptrack's count: %s, a free right after an allocation of the same stack and size, of any", fmtCount(s.HeaptrackTemporary))
			row("", " block, with no call of another thread between)")
		}
	}
	if causes := r.UnmatchedCauses(); len(causes) > 0 {
		row("unmatched frees", "%s, frees of blocks heapscope did not see made; possible causes:", fmtCount(s.UnmatchedFrees))
		for _, c := range causes {
			row("", "- %s", c)
		}
	} else {
		row("unmatched frees", "%s", fmtCount(s.UnmatchedFrees))
	}
	if s.MissedFrees > 0 {
		row("missed frees", "%s (blocks whose free was lost)", fmtCount(s.MissedFrees))
	}
	row("events", "%s read", fmtCount(s.Events))
	if p.HasStats {
		st := p.Stats
		row("lost events", "%s", lostText(&st))
		if st.StacksLost > 0 {
			row("stacks lost", "%s events without their stack", fmtCount(st.StacksLost))
		}
	} else {
		row("lost events", "unknown: the trace has no statistics record")
	}
	t.printf("\n")
}

// lostText says how many events were lost, by reason.
func lostText(st *event.Stats) string {
	total := st.TotalLost()
	if total == 0 {
		return fmt.Sprintf("none of %s delivered", fmtCount(st.Delivered))
	}
	var parts []string
	for i, n := range st.Lost {
		if n > 0 {
			parts = append(parts, fmt.Sprintf("%s %s", fmtCount(n), event.LostReason(i)))
		}
	}
	return fmt.Sprintf("%s (%s) of %s", fmtCount(total), strings.Join(parts, ", "), fmtCount(st.Delivered+total))
}

// suppressed lists what each suppression rule took out of the leaks.
func (t *textWriter) suppressed() {
	sb, sk, n := t.r.SuppressedTotal()
	if n == 0 {
		return
	}
	t.printf("SUPPRESSED (live at the end, not listed as leaks): %s in %s by %s\n", fmtBytes(sb), plural(sk, "block"), plural(uint64(n), "rule"))
	for _, s := range t.r.Suppressed {
		what := s.Rule.Text + " (" + s.Rule.Source + ")"
		if s.Rule.Default() {
			what = s.Rule.Description
		}
		t.printf("  %s in %s, %s: %s\n", fmtBytes(s.Bytes), plural(s.Blocks, "block"), plural(uint64(s.Sites), "site"), what)
	}
	def := false
	for _, s := range t.r.Suppressed {
		def = def || s.Rule.Default()
	}
	if def {
		t.printf("  (default rules: what the C and C++ runtimes keep for the life of a process by design; --no-default-suppressions lists them as leaks)\n")
	}
	t.printf("\n")
}

func (t *textWriter) section(title, note string, key func(*Site) uint64, head func(*Site) string) {
	all := t.r.sorted(key, 0)
	t.printf("%s", title)
	note = joinNote(note, t.r.Profile)
	if note != "" {
		t.printf(" (%s)", note)
	}
	if len(all) > t.o.Top {
		t.printf(": top %d of %d sites\n", t.o.Top, len(all))
		all = all[:t.o.Top]
	} else {
		t.printf(": %s\n", plural(uint64(len(all)), "site"))
	}
	many := len(t.r.Profile.Processes) > 1
	for _, s := range all {
		t.printf("  %s", head(s))
		if many || len(s.PIDs) > 1 {
			t.printf(" %s", pidsText(s.PIDs))
		}
		t.printf(":\n")
		t.stack(s)
	}
	t.printf("\n")
}

// pidsText names a site's processes: "pid 12", "pids 12, 13".
func pidsText(pids []uint32) string {
	if len(pids) == 1 {
		return "pid " + strconv.FormatUint(uint64(pids[0]), 10)
	}
	var b strings.Builder
	b.WriteString("pids ")
	for i, pid := range pids {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(strconv.FormatUint(uint64(pid), 10))
	}
	return b.String()
}

func (t *textWriter) stack(s *Site) {
	if s.depth() == 0 {
		t.printf("      [no stack recorded]\n")
		return
	}
	for i := 0; i < s.depth(); i++ {
		if i == t.o.MaxFrames {
			t.printf("      … %d more frames\n", s.depth()-i)
			break
		}
		t.printf("      %s\n", frameText(s.frame(i), t.o.FullNames))
	}
}

// frameText is one frame on one line: function (shortened unless full),
// file:line, module.
func frameText(f *symbolize.Frame, full bool) string {
	var b strings.Builder
	if f.Function != "" {
		if full {
			b.WriteString(f.Function)
		} else {
			b.WriteString(ShortName(f.Function))
		}
	} else {
		fmt.Fprintf(&b, "0x%x", f.Address)
	}
	if f.File != "" {
		b.WriteString("  ")
		b.WriteString(f.File)
		if f.Line > 0 {
			b.WriteByte(':')
			b.WriteString(strconv.Itoa(f.Line))
		}
	}
	if f.Module != "" {
		fmt.Fprintf(&b, "  in %s", path.Base(f.Module))
		if f.Function == "" {
			fmt.Fprintf(&b, "+0x%x", f.Offset)
		}
	}
	if f.Inlined {
		b.WriteString("  (inlined)")
	}
	return b.String()
}

func (t *textWriter) histogram() {
	p := t.r.Profile
	t.printf("ALLOCATION SIZES")
	if p.Missing.Has(analyze.NoHistogram) {
		t.printf(": not recorded in an aggregate trace\n\n")
		return
	}
	t.printf(" (%s)\n", joinNote("calls that returned a block, by requested size", p))
	var top uint64
	for _, b := range p.Histogram {
		top = max(top, b.Count)
	}
	prev := uint64(0)
	for i, b := range p.Histogram {
		lo := prev + 1
		if i == 0 {
			lo = 0
		}
		bar := 0
		if top > 0 {
			bar = int((b.Count*40 + top - 1) / top)
		}
		t.printf("  %10s – %-10s %14s  %s\n", fmtBytes(lo), fmtBytes(b.Le), fmtCount(b.Count), strings.Repeat("#", bar))
		prev = b.Le
	}
	t.printf("\n")
}

func (t *textWriter) warnings() {
	if len(t.r.Trace.Warnings) == 0 {
		return
	}
	t.printf("WARNINGS\n")
	for _, w := range t.r.Trace.Warnings {
		t.printf("  %s\n", w)
	}
}

// fmtCount writes n with thousands separators.
func fmtCount(n uint64) string {
	s := strconv.FormatUint(n, 10)
	if len(s) <= 3 {
		return s
	}
	var b strings.Builder
	pre := len(s) % 3
	if pre > 0 {
		b.WriteString(s[:pre])
	}
	for i := pre; i < len(s); i += 3 {
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(s[i : i+3])
	}
	return b.String()
}

// FormatBytes writes n in binary units as the reports do: 512 B, 1.5 KiB,
// 3.2 GiB.
func FormatBytes(n uint64) string { return fmtBytes(n) }

// fmtBytes writes n in binary units: 512 B, 1.5 KiB, 3.2 GiB.
func fmtBytes(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := uint64(unit), 0
	for m := n / unit; m >= unit && exp < 5; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// fmtBytesExact adds the exact count to fmtBytes when they differ.
func fmtBytesExact(n uint64) string {
	if n < 1024 {
		return fmtBytes(n)
	}
	return fmt.Sprintf("%s (%s bytes)", fmtBytes(n), fmtCount(n))
}

func fmtDur(d time.Duration) string {
	switch {
	case d == 0:
		return "0s"
	case d < time.Millisecond && d > -time.Millisecond:
		return fmt.Sprintf("%.1fµs", float64(d)/1e3)
	case d < time.Second && d > -time.Second:
		return fmt.Sprintf("%.3fms", float64(d)/1e6)
	}
	return fmt.Sprintf("%.3fs", d.Seconds())
}

func pct(a, b uint64) string {
	if b == 0 {
		return "–"
	}
	return fmt.Sprintf("%.1f%%", 100*float64(a)/float64(b))
}

func plural(n uint64, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmtCount(n) + " " + word + "s"
}
