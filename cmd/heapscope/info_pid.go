package main

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/heapscope/heapscope"
	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/internal/proc"
	"github.com/heapscope/heapscope/report"
)

// infoProcess prints a running process's heap and RSS, explained by a
// census of its heap.
func infoProcess(out io.Writer, pid int) error {
	r, notes, err := heapscope.TakeCensus(pid, false)
	if err != nil {
		return err
	}
	var c *event.Census
	var res *event.Resident
	for _, n := range notes {
		switch n := n.(type) {
		case event.Census:
			c = &n
		case event.Resident:
			res = &n
		}
	}
	if c == nil {
		return fmt.Errorf("census of pid %d: no census taken", pid)
	}
	w := tabwriter.NewWriter(out, 0, 8, 2, ' ', 0)
	line := func(k, format string, args ...any) { fmt.Fprintf(w, "%s\t"+format+"\n", append([]any{k}, args...)...) }
	exe, _ := proc.Exe(pid)
	cmdline, _ := proc.Cmdline(pid)
	line("process", "%d %s", pid, strings.Join(cmdline, " "))
	if len(cmdline) == 0 || cmdline[0] != exe {
		line("", "[%s]", exe)
	}
	line("census", "the process stopped %v (%d stop(s)); %v in all", r.Paused.Round(time.Microsecond), r.Stops, r.Took.Round(time.Millisecond))
	s := c.Space
	line("heap", "glibc malloc, %d arena(s): %s blocks in use, %s usable (%s blocks, %s of it mmapped)",
		s.Arenas, countText(s.InUseBlocks), report.FormatBytes(s.InUse), countText(s.MmappedBlocks), report.FormatBytes(s.Mmapped))
	line("", "overhead %s (chunk headers, alignment, arena and heap headers)", report.FormatBytes(s.Overhead))
	line("", "free, kept by malloc: %s in bins, %s in fastbins, %s in tcaches, %s at the top of the heaps",
		report.FormatBytes(s.FreeBins), report.FormatBytes(s.FreeFastbins), report.FormatBytes(s.FreeTcache), report.FormatBytes(s.Top))
	if s.Corrupt > 0 {
		line("", "%d chunk(s) whose state a corrupted header hides", s.Corrupt)
	}
	if r.Warning != "" {
		line("warning", "%s", r.Warning)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if res != nil {
		fmt.Fprintf(out, "\nRSS %s, PSS %s", report.FormatBytes(res.RSS), report.FormatBytes(res.PSS))
		if res.Swap > 0 {
			fmt.Fprintf(out, ", %s swapped out", report.FormatBytes(res.Swap))
		}
		fmt.Fprintf(out, " (from /proc/%d/smaps, split by the census):\n", pid)
		if err := report.WriteResident(out, res, "  "); err != nil {
			return err
		}
	}
	return writeKinds(out, c)
}

// writeKinds lists what a census's blocks are, largest kinds first.
func writeKinds(out io.Writer, c *event.Census) error {
	if len(c.Groups) == 0 || len(c.BlockGroups) != len(c.Blocks) {
		return nil
	}
	type tot struct{ blocks, bytes uint64 }
	sums := make([]tot, len(c.Groups))
	for i, g := range c.BlockGroups {
		sums[g].blocks++
		sums[g].bytes += c.Blocks[i].Size
	}
	order := make([]int, len(c.Groups))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return sums[order[a]].bytes > sums[order[b]].bytes })
	fmt.Fprintf(out, "\nwhat the blocks are (by their contents; sizes are chunk sizes):\n")
	w := tabwriter.NewWriter(out, 0, 8, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(w, "  bytes\tblocks\tsize class\t  what\n")
	for _, i := range report.ShownGroups(len(order), func(k int) (uint64, string) { return sums[order[k]].blocks, c.Groups[order[k]].Name }, 12) {
		i = order[i]
		g := c.Groups[i]
		what := g.Name
		switch {
		case what == "string":
			what = fmt.Sprintf("strings (%q)", clipText(g.Text, 40))
		case what == "":
			what = "(not named by their contents)"
		default:
			what = report.ShortName(what)
		}
		if g.HeldBy != "" {
			what += fmt.Sprintf(", %d held from %s", g.Held, g.HeldBy)
		}
		fmt.Fprintf(w, "  %s\t%s\t%s\t  %s\n", report.FormatBytes(sums[i].bytes), countText(sums[i].blocks), sizeClass(g.Lo, g.Hi), what)
	}
	return w.Flush()
}

func clipText(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

func sizeClass(lo, hi uint64) string {
	if hi == lo+16 {
		return fmt.Sprintf("%d B", lo)
	}
	return fmt.Sprintf("%s-%s", report.FormatBytes(lo), report.FormatBytes(hi-1))
}
