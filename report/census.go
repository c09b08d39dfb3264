package report

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/heapscope/heapscope/analyze"
	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/symbolize"
)

// BeforeTraceFunction names the one frame of the site of the blocks a
// census found live that the trace had not seen allocated (analyze.PreTrace):
// what every renderer shows as their stack.
const BeforeTraceFunction = "[allocated before the trace]"

// beforeTraceFrame is that frame.
var beforeTraceFrame = symbolize.Frame{Function: BeforeTraceFunction}

// BeforeTrace reports whether s is the site of the blocks allocated before
// the trace.
func (s *Site) BeforeTrace() bool {
	for _, m := range s.members {
		if m.ID == analyze.PreTrace && len(m.Frames) == 0 {
			return true
		}
	}
	return false
}

// beforeTraceLive returns what is left at the end of the blocks the
// censuses found allocated before the trace, and whether there was a
// census.
func (r *Report) beforeTraceLive() (bytes, blocks uint64, ok bool) {
	for _, x := range r.Profile.Rundowns {
		bytes += x.LiveBytes
		blocks += x.LiveBlocks
	}
	return bytes, blocks, len(r.Profile.Rundowns) > 0
}

// maxGroups bounds the kinds of block listed per census.
const maxGroups = 12

// censusText writes what the censuses found before the trace and the
// resident memory they explained: a line each in a brief report.
func (t *textWriter) census() {
	p := t.r.Profile
	if len(p.Rundowns) == 0 && len(p.Resident) == 0 {
		return
	}
	total := p.Summary.LiveBytes
	for _, r := range p.Rundowns {
		t.printf("BEFORE THE TRACE (pid %d: a census of its heap at %s, the process stopped %s)\n",
			r.PID, fmtDur(t.r.rel(r.Time)), fmtDur(durNs(r.Pause)))
		t.printf("  %s in %s were live at the census that the trace had not seen allocated; %s of them (%s) are left at the end\n",
			fmtBytes(r.Bytes), plural(r.Blocks, "block"), fmtBytes(r.LiveBytes), plural(r.LiveBlocks, "block"))
		if total > 0 {
			t.printf("  of the %s live at the end, %s (%s) was allocated before the trace", fmtBytes(total), fmtBytes(r.LiveBytes), pct(r.LiveBytes, total))
			if len(p.Rundowns) == 1 {
				t.printf(", in these sizes:\n")
			} else {
				t.printf(" by pid %d:\n", r.PID)
			}
		}
		if !t.o.Brief {
			t.groups(r)
		}
		var notes []string
		if r.FreedBefore > 0 {
			notes = append(notes, fmt.Sprintf("%s of blocks from before the attach, freed between it and the census (not unmatched)", plural(r.FreedBefore, "free")))
		}
		if r.Traced > 0 {
			notes = append(notes, fmt.Sprintf("%s the census found were allocated after the attach: they keep their stacks", plural(r.Traced, "block")))
		}
		if r.Missed > 0 {
			notes = append(notes, fmt.Sprintf("%s the trace had live were not in the census (their frees were lost)", plural(r.Missed, "block")))
		}
		if r.Overtaken > 0 {
			notes = append(notes, fmt.Sprintf("%s of the census gave way to allocations traced just after it", plural(r.Overtaken, "block")))
		}
		for _, n := range notes {
			t.printf("  %s\n", n)
		}
		t.printf("\n")
	}
	for _, res := range p.Resident {
		t.printf("RESIDENT MEMORY (pid %d at %s): RSS %s, PSS %s", res.PID, fmtDur(t.r.rel(res.Time)), fmtBytes(res.RSS), fmtBytes(res.PSS))
		if res.Swap > 0 {
			t.printf(", %s swapped out", fmtBytes(res.Swap))
		}
		t.printf("\n")
		if t.o.Brief {
			t.printf("  %s\n\n", residentBrief(&res))
			continue
		}
		WriteResident(t.w, &res, "  ")
		t.printf("\n")
	}
}

// groups lists the kinds of block of a rundown, largest at the census
// first, and then the named kinds (C++ classes, strings) too small to be
// among them.
func (t *textWriter) groups(r analyze.Rundown) {
	tw := tabwriter.NewWriter(t.w, 0, 8, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "  left at the end\tat the census\tblocks\tsize class\t  what\n")
	var restBytes, restLeft, restBlocks uint64
	shown := map[int]bool{}
	for _, i := range ShownGroups(len(r.Groups), func(i int) (uint64, string) { return r.Groups[i].Blocks, r.Groups[i].Name }, maxGroups) {
		g := r.Groups[i]
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t  %s\n", fmtBytes(g.LiveBytes), fmtBytes(g.Bytes), fmtCount(g.Blocks), classText(g.Lo, g.Hi), groupText(&g.CensusGroup, t.o.FullNames))
		shown[i] = true
	}
	for i, g := range r.Groups {
		if !shown[i] && g.Blocks > 0 {
			restBytes += g.Bytes
			restLeft += g.LiveBytes
			restBlocks += g.Blocks
		}
	}
	if restBlocks > 0 {
		fmt.Fprintf(tw, "  %s\t%s\t%s\t\t  (other kinds)\n", fmtBytes(restLeft), fmtBytes(restBytes), fmtCount(restBlocks))
	}
	tw.Flush()
}

// ShownGroups picks the kinds of block a listing shows, of n kinds in the
// order to list them (largest first), each with its blocks and name: the
// first max that have blocks, then up to max more that have a name (a C++
// class, strings, the allocator's own), which say more than their size.
func ShownGroups(n int, kind func(i int) (blocks uint64, name string), max int) []int {
	var out []int
	named := 0
	for i := 0; i < n; i++ {
		blocks, name := kind(i)
		switch {
		case blocks == 0:
		case len(out) < max:
			out = append(out, i)
		case name != "" && named < max:
			out = append(out, i)
			named++
		}
	}
	return out
}

// classText writes a size class of chunk sizes [lo, hi).
func classText(lo, hi uint64) string {
	switch {
	case hi == 0:
		return "any"
	case hi == lo+16:
		return fmt.Sprintf("%d B", lo)
	}
	return fmt.Sprintf("%s-%s", fmtBytes(lo), fmtBytes(hi-1))
}

// groupText says what a group's blocks are and who holds them.
func groupText(g *event.CensusGroup, full bool) string {
	var b strings.Builder
	switch {
	case g.Name == "string":
		text := g.Text
		if len(text) > 40 {
			text = text[:40] + "…"
		}
		fmt.Fprintf(&b, "strings (%q)", text)
	case g.Name != "":
		name := g.Name
		if !full {
			name = ShortName(name)
		}
		b.WriteString(name)
	default:
		b.WriteString("(not named by their contents)")
	}
	if g.HeldBy != "" {
		fmt.Fprintf(&b, ", %s held from %s", plural(g.Held, "block"), g.HeldBy)
	}
	return b.String()
}

// WriteResident writes a process's resident memory explained, one part a
// line, each line prefixed with indent: what `heapscope info PID` and the
// report print.
func WriteResident(w io.Writer, r *event.Resident, indent string) error {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintf(tw, "%spart\tRSS\tshare\tPSS\tcensus bytes\thow\n", indent)
	var sum uint64
	for _, p := range r.Parts {
		how := "estimated"
		if p.Measured {
			how = "measured"
		}
		if p.How != "" {
			how += ": " + p.How
		}
		bytes := ""
		if p.Bytes > 0 {
			bytes = fmtBytes(p.Bytes)
		}
		fmt.Fprintf(tw, "%s%s\t%s\t%s\t%s\t%s\t%s\n", indent, p.Name, fmtBytes(p.RSS), pct(p.RSS, r.RSS), fmtBytes(p.PSS), bytes, how)
		sum += p.RSS
	}
	fmt.Fprintf(tw, "%stotal\t%s\t%s\t%s\t\tsmaps_rollup says %s\n", indent, fmtBytes(sum), pct(sum, r.RSS), fmtBytes(r.PSS), fmtBytes(r.Rollup))
	if err := tw.Flush(); err != nil {
		return err
	}
	var notes []string
	if r.Trimmable > 0 {
		notes = append(notes, fmt.Sprintf("malloc_trim(0) could give back about %s of it (whole free pages in the bins, the main arena's top)", fmtBytes(r.Trimmable)))
	}
	if r.Disagreement > 0 {
		notes = append(notes, fmt.Sprintf("the pages counted in the heap exceed smaps' count there by %s (read a moment apart)", fmtBytes(r.Disagreement)))
	}
	if !r.ZeroPagesKnown {
		notes = append(notes, "pages never written could not be told from resident ones (needs CAP_SYS_ADMIN): the heap's lines may count some smaps does not")
	}
	for _, n := range notes {
		if _, err := fmt.Fprintf(w, "%s%s\n", indent, n); err != nil {
			return err
		}
	}
	return nil
}

// residentBrief is a process's resident memory in one line: its largest
// parts.
func residentBrief(r *event.Resident) string {
	var parts []string
	for _, p := range r.Parts {
		if p.RSS*20 >= r.RSS && p.RSS > 0 { // 5% or more
			parts = append(parts, fmt.Sprintf("%s %s", p.Name, fmtBytes(p.RSS)))
		}
	}
	return strings.Join(parts, ", ")
}

// JSONRundown is what a census found before the trace (analyze.Rundown).
type JSONRundown struct {
	PID         uint32           `json:"pid"`
	TimeNs      int64            `json:"time_ns"`  // from the start of the trace
	PauseNs     int64            `json:"pause_ns"` // how long the process was stopped
	Blocks      uint64           `json:"blocks"`   // live at the census, not seen allocated by the trace
	Bytes       uint64           `json:"bytes"`
	LiveBlocks  uint64           `json:"live_blocks"` // of those, left at the end
	LiveBytes   uint64           `json:"live_bytes"`
	Traced      uint64           `json:"traced"`       // live at the census, allocated since the attach
	FreedBefore uint64           `json:"freed_before"` // frees between the attach and the census of blocks from before it
	Missed      uint64           `json:"missed"`
	Overtaken   uint64           `json:"overtaken"`
	Heap        JSONHeapSpace    `json:"heap"`
	Groups      []JSONCensusKind `json:"groups"`
}

// JSONHeapSpace is how the allocator's heap was used at a census
// (event.HeapSpace), in bytes.
type JSONHeapSpace struct {
	Arenas        uint64 `json:"arenas"`
	InUse         uint64 `json:"in_use"`
	InUseBlocks   uint64 `json:"in_use_blocks"`
	Overhead      uint64 `json:"overhead"`
	FreeBins      uint64 `json:"free_bins"`
	FreeFastbins  uint64 `json:"free_fastbins"`
	FreeTcache    uint64 `json:"free_tcache"`
	Top           uint64 `json:"top"`
	Mmapped       uint64 `json:"mmapped"`
	MmappedBlocks uint64 `json:"mmapped_blocks"`
	Trimmable     uint64 `json:"trimmable"`
	Corrupt       uint64 `json:"corrupt"`
}

// JSONCensusKind is one kind of block a census found (a size class and
// what its blocks are).
type JSONCensusKind struct {
	ClassLo    uint64 `json:"class_lo"` // chunk sizes [class_lo, class_hi), header included
	ClassHi    uint64 `json:"class_hi"`
	Name       string `json:"name"` // a C++ class, "string", the allocator's own, or ""
	Text       string `json:"text,omitempty"`
	Example    uint64 `json:"example"`
	HeldBy     string `json:"held_by,omitempty"`
	Held       uint64 `json:"held,omitempty"`
	Blocks     uint64 `json:"blocks"`
	Bytes      uint64 `json:"bytes"`
	LiveBlocks uint64 `json:"live_blocks"`
	LiveBytes  uint64 `json:"live_bytes"`
}

// JSONResident is a process's resident memory explained (event.Resident).
type JSONResident struct {
	PID            uint32             `json:"pid"`
	TimeNs         int64              `json:"time_ns"`
	RSS            uint64             `json:"rss"`
	PSS            uint64             `json:"pss"`
	Swap           uint64             `json:"swap"`
	Rollup         uint64             `json:"rollup_rss"`
	Trimmable      uint64             `json:"trimmable"`
	Disagreement   uint64             `json:"disagreement"`
	ZeroPagesKnown bool               `json:"zero_pages_known"`
	Parts          []JSONResidentPart `json:"parts"`
}

// JSONResidentPart is one part of a process's resident memory.
type JSONResidentPart struct {
	Name     string `json:"name"`
	RSS      uint64 `json:"rss"`
	PSS      uint64 `json:"pss"`
	Bytes    uint64 `json:"bytes"`
	Measured bool   `json:"measured"`
	How      string `json:"how"`
}

// CensusJSON returns what the report's censuses found before the trace and
// the resident memory they explained, as the JSON report has them.
func (r *Report) CensusJSON() ([]JSONRundown, []JSONResident) {
	var runs []JSONRundown
	for _, x := range r.Profile.Rundowns {
		s := x.Space
		j := JSONRundown{PID: x.PID, TimeNs: int64(r.rel(x.Time)), PauseNs: x.Pause, Blocks: x.Blocks, Bytes: x.Bytes,
			LiveBlocks: x.LiveBlocks, LiveBytes: x.LiveBytes, Traced: x.Traced, FreedBefore: x.FreedBefore,
			Missed: x.Missed, Overtaken: x.Overtaken, Groups: []JSONCensusKind{},
			Heap: JSONHeapSpace{s.Arenas, s.InUse, s.InUseBlocks, s.Overhead, s.FreeBins, s.FreeFastbins, s.FreeTcache,
				s.Top, s.Mmapped, s.MmappedBlocks, s.Trimmable, s.Corrupt}}
		for _, g := range x.Groups {
			if g.Blocks == 0 {
				continue
			}
			j.Groups = append(j.Groups, JSONCensusKind{ClassLo: g.Lo, ClassHi: g.Hi, Name: g.Name, Text: g.Text,
				Example: g.Example, HeldBy: g.HeldBy, Held: g.Held, Blocks: g.Blocks, Bytes: g.Bytes,
				LiveBlocks: g.LiveBlocks, LiveBytes: g.LiveBytes})
		}
		runs = append(runs, j)
	}
	var res []JSONResident
	for _, x := range r.Profile.Resident {
		res = append(res, ResidentJSON(&x, int64(r.rel(x.Time))))
	}
	return runs, res
}

// ResidentJSON is r as JSON, at time t (ns from the start of the trace).
func ResidentJSON(r *event.Resident, t int64) JSONResident {
	j := JSONResident{PID: r.PID, TimeNs: t, RSS: r.RSS, PSS: r.PSS, Swap: r.Swap, Rollup: r.Rollup,
		Trimmable: r.Trimmable, Disagreement: r.Disagreement, ZeroPagesKnown: r.ZeroPagesKnown, Parts: []JSONResidentPart{}}
	for _, p := range r.Parts {
		j.Parts = append(j.Parts, JSONResidentPart{p.Name, p.RSS, p.PSS, p.Bytes, p.Measured, p.How})
	}
	return j
}

// durNs is ns as a duration.
func durNs(ns int64) time.Duration { return time.Duration(ns) }
