package report

import (
	"fmt"
	"strings"
	"time"

	"github.com/heapscope/heapscope/analyze"
	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/symbolize"
)

// The reachability classes as reports name them, by event.Class: the words
// of Memcheck's leak summary.
var classTitles = [event.NumClasses]string{
	event.ClassUnknown:   "not classified",
	event.ClassDefinite:  "definitely lost",
	event.ClassIndirect:  "indirectly lost",
	event.ClassPossible:  "possibly lost",
	event.ClassReachable: "still reachable",
}

// ClassTitle is the name reports give class c: "definitely lost", "still
// reachable", "not classified".
func ClassTitle(c event.Class) string {
	if c.Valid() {
		return classTitles[c]
	}
	return c.String()
}

// The classes' names in JSON and labels: classTitles with underscores.
var classKeys = [event.NumClasses]string{
	event.ClassUnknown:   "unclassified",
	event.ClassDefinite:  "definitely_lost",
	event.ClassIndirect:  "indirectly_lost",
	event.ClassPossible:  "possibly_lost",
	event.ClassReachable: "still_reachable",
}

// LeakChecked reports whether the trace holds a heap scan (a leak check)
// in the report's window: then the live blocks have reachability classes,
// and LEAKS are what no pointer reaches. Without one, LEAKS are every
// block live at the end.
func (r *Report) LeakChecked() bool { return len(r.Profile.Verdicts) > 0 }

// Classes returns the live blocks of the report's sites by class, the
// suppressed ones left out.
func (r *Report) Classes() [event.NumClasses]analyze.Amount {
	var out [event.NumClasses]analyze.Amount
	for _, s := range r.Sites {
		for c := range out {
			out[c].Add(s.Classes[c])
		}
	}
	return out
}

// Lost returns what a leak check found definitely or indirectly lost, the
// suppressed left out: the LEAKS of a leak-checked report.
func (r *Report) Lost() analyze.Amount {
	c := r.Classes()
	a := c[event.ClassDefinite]
	a.Add(c[event.ClassIndirect])
	return a
}

// Unscanned returns the live blocks no scan classified (made after the
// last scan of their process, or in a process not scanned), the
// suppressed left out.
func (r *Report) Unscanned() analyze.Amount {
	var a analyze.Amount
	for _, s := range r.Sites {
		a.Add(s.Unscanned())
	}
	return a
}

// lostOf is what of s is lost, and the orders of the leak check's sections.
func lostOf(s *Site) uint64      { return s.Lost().Bytes }
func byLost(s *Site) uint64      { return lostOf(s) }
func byPossible(s *Site) uint64  { return s.Classes[event.ClassPossible].Bytes }
func byReachable(s *Site) uint64 { return s.Classes[event.ClassReachable].Bytes }
func byUnclassified(s *Site) uint64 {
	return s.Classes[event.ClassUnknown].Bytes + s.Unscanned().Bytes
}

// ScanText says what scans the report's classes come from, in a few words:
// "leak check of pid 12 at exit, Memcheck's rules, held 12.0ms".
func (r *Report) ScanText() string {
	vs := r.Profile.Verdicts
	if len(vs) == 0 {
		return ""
	}
	var parts []string
	seen := map[uint32]bool{}
	for i := len(vs) - 1; i >= 0; i-- { // the latest of each process
		v := vs[i]
		if seen[v.PID] {
			continue
		}
		seen[v.PID] = true
		var b strings.Builder
		fmt.Fprintf(&b, "pid %d", v.PID)
		if v.AtExit {
			b.WriteString(" at exit")
		} else {
			fmt.Fprintf(&b, " at %s", fmtDur(r.rel(v.Time)))
		}
		if v.Pause > 0 {
			fmt.Fprintf(&b, ", held %s", fmtDur(time.Duration(v.Pause)))
		}
		if v.Partial {
			b.WriteString(", partial")
		}
		if !v.Complete {
			b.WriteString(", incomplete")
		}
		parts = append([]string{b.String()}, parts...)
	}
	rules := "Memcheck's rules"
	if vs[len(vs)-1].Rules == event.RulesLSan {
		rules = "LeakSanitizer's rules"
	}
	return "leak check of " + strings.Join(parts, "; ") + ", " + rules
}

// scanCaveats are the sentences a report adds about its scans: what a
// partial or incomplete scan cannot say, blocks made after the scan.
func (r *Report) scanCaveats() []string {
	var out []string
	partial, incomplete := false, false
	for _, v := range r.Profile.Verdicts {
		partial = partial || v.Partial
		incomplete = incomplete || !v.Complete
	}
	if partial {
		out = append(out, "a scan did not know every live block (those allocated before tracing began, or inherited across a fork): "+
			"it took the heap's other memory as roots, so what it calls lost is lost, and still reachable may count blocks only freed memory holds")
	}
	if incomplete {
		out = append(out, "a scan could not read some memory (see the warnings): the blocks whose class that memory could change are not classified")
	}
	if u := r.Unscanned(); u.Blocks > 0 {
		out = append(out, fmt.Sprintf("%s in %s live at the end were not scanned: made after the last scan of their process, or in a process not scanned",
			fmtBytes(u.Bytes), plural(u.Blocks, "block")))
	}
	return out
}

// classRows writes the summary's rows of a leak-checked report, as
// Memcheck's leak summary does: what is lost, then each class.
func (t *textWriter) classRows(row func(label, format string, args ...any), liveBytes, liveBlocks uint64) {
	r := t.r
	row("live at the end", "%s in %s", fmtBytesExact(liveBytes), plural(liveBlocks, "block"))
	l := r.Lost()
	row("leaked", "%s in %s: definitely and indirectly lost (%s)", fmtBytesExact(l.Bytes), plural(l.Blocks, "block"), r.ScanText())
	c := r.Classes()
	for _, k := range []event.Class{event.ClassDefinite, event.ClassIndirect, event.ClassPossible, event.ClassReachable, event.ClassUnknown} {
		if k == event.ClassUnknown && c[k].Blocks == 0 {
			continue
		}
		row("  "+ClassTitle(k), "%s in %s", fmtBytesExact(c[k].Bytes), plural(c[k].Blocks, "block"))
	}
	if u := r.Unscanned(); u.Blocks > 0 {
		row("  not scanned", "%s in %s (made after the scan, or in a process not scanned)", fmtBytesExact(u.Bytes), plural(u.Blocks, "block"))
	}
}

// amountsText writes the non-zero classes of cls among ks: "definitely
// 1.0 KiB in 1, indirectly 64 B in 2".
func amountsText(cls *[event.NumClasses]analyze.Amount, ks ...event.Class) string {
	var parts []string
	for _, k := range ks {
		if a := cls[k]; a.Blocks > 0 {
			word, _, _ := strings.Cut(ClassTitle(k), " ")
			parts = append(parts, fmt.Sprintf("%s %s in %d", word, fmtBytes(a.Bytes), a.Blocks))
		}
	}
	return strings.Join(parts, ", ")
}

// leakChecked writes the sections of a leak-checked report: LEAKS (what
// no pointer reaches), POSSIBLY LOST next, STILL REACHABLE apart, and what
// the scans left unclassified.
func (t *textWriter) leakChecked() {
	r := t.r
	t.section("LEAKS", "definitely and indirectly lost: no pointer to them remains; "+r.ScanText(), byLost, func(s *Site) string {
		l := s.Lost()
		return fmt.Sprintf("%s lost in %s (%s) from", fmtBytes(l.Bytes), plural(l.Blocks, "block"),
			amountsText(&s.Classes, event.ClassDefinite, event.ClassIndirect))
	})
	t.section("POSSIBLY LOST", "only pointers into their interior remain: perhaps lost, not counted as leaks", byPossible, func(s *Site) string {
		a := s.Classes[event.ClassPossible]
		return fmt.Sprintf("[possibly lost] %s in %s from", fmtBytes(a.Bytes), plural(a.Blocks, "block"))
	})
	c := r.Classes()
	reach := c[event.ClassReachable]
	note := fmt.Sprintf("a pointer to their start remains: freed by nobody, not lost; %s in %s", fmtBytes(reach.Bytes), plural(reach.Blocks, "block"))
	if t.o.Brief {
		t.printf("STILL REACHABLE (%s)\n\n", note)
	} else {
		t.section("STILL REACHABLE", note, byReachable, func(s *Site) string {
			a := s.Classes[event.ClassReachable]
			return fmt.Sprintf("%s still reachable in %s from", fmtBytes(a.Bytes), plural(a.Blocks, "block"))
		})
	}
	if u, n := r.Unscanned(), c[event.ClassUnknown]; !t.o.Brief && u.Blocks+n.Blocks > 0 {
		t.section("NOT CLASSIFIED", "live at the end, with no class: the scan could not decide, or did not see them", byUnclassified, func(s *Site) string {
			u := s.Unscanned()
			u.Add(s.Classes[event.ClassUnknown])
			return fmt.Sprintf("%s in %s with no class from", fmtBytes(u.Bytes), plural(u.Blocks, "block"))
		})
	}
	for _, c := range r.scanCaveats() {
		t.printf("note: %s\n", c)
	}
	if len(r.scanCaveats()) > 0 {
		t.printf("\n")
	}
}

// JSONAmount is a number of blocks and their bytes.
type JSONAmount struct {
	Bytes  uint64 `json:"bytes"`
	Blocks uint64 `json:"blocks"`
}

func jsonAmount(a analyze.Amount) JSONAmount { return JSONAmount{a.Bytes, a.Blocks} }

// JSONClasses splits live blocks by reachability class (see JSON.md).
type JSONClasses struct {
	DefinitelyLost JSONAmount `json:"definitely_lost"`
	IndirectlyLost JSONAmount `json:"indirectly_lost"`
	PossiblyLost   JSONAmount `json:"possibly_lost"`
	StillReachable JSONAmount `json:"still_reachable"`
	// Unclassified: the scan could not decide (memory it could not read).
	Unclassified JSONAmount `json:"unclassified"`
	// NotScanned: live at the end, made after the last scan of their
	// process or in a process not scanned.
	NotScanned JSONAmount `json:"not_scanned"`
}

func jsonClasses(c *[event.NumClasses]analyze.Amount, unscanned analyze.Amount) JSONClasses {
	return JSONClasses{
		DefinitelyLost: jsonAmount(c[event.ClassDefinite]), IndirectlyLost: jsonAmount(c[event.ClassIndirect]),
		PossiblyLost: jsonAmount(c[event.ClassPossible]), StillReachable: jsonAmount(c[event.ClassReachable]),
		Unclassified: jsonAmount(c[event.ClassUnknown]), NotScanned: jsonAmount(unscanned),
	}
}

// JSONLeakCheck is what the trace's heap scans found, suppressed sites
// left out.
type JSONLeakCheck struct {
	Rules string `json:"rules"` // "memcheck" or "lsan": the latest scan's
	// Lost is definitely plus indirectly lost: the leaks.
	Lost JSONAmount `json:"lost"`
	JSONClasses
	Scans []JSONScan `json:"scans"`
	// Notes say what the scans could not tell (partial, incomplete, blocks
	// not scanned).
	Notes []string `json:"notes"`
}

// JSONScan is one heap scan of a process.
type JSONScan struct {
	PID       uint32 `json:"pid"`
	TimeNs    int64  `json:"time_ns"` // relative to the trace's start
	AtExit    bool   `json:"at_exit"`
	Rules     string `json:"rules"`
	PauseNs   int64  `json:"pause_ns"` // the process was stopped this long
	ElapsedNs int64  `json:"elapsed_ns"`
	Complete  bool   `json:"complete"`
	Partial   bool   `json:"partial"`
	Blocks    uint64 `json:"blocks"`  // blocks the scan classified
	Applied   uint64 `json:"applied"` // of them, those live in the report's model then
}

// siteClasses is s's classes for JSON, nil when the trace has no leak check.
func (r *Report) siteClasses(s *Site) *JSONClasses {
	if !r.LeakChecked() {
		return nil
	}
	c := jsonClasses(&s.Classes, s.Unscanned())
	return &c
}

func (r *Report) leakCheckJSON() *JSONLeakCheck {
	vs := r.Profile.Verdicts
	if len(vs) == 0 {
		return nil
	}
	c := r.Classes()
	lc := &JSONLeakCheck{Rules: vs[len(vs)-1].Rules.String(), Lost: jsonAmount(r.Lost()), JSONClasses: jsonClasses(&c, r.Unscanned()),
		Scans: []JSONScan{}, Notes: append([]string{}, r.scanCaveats()...)}
	for _, v := range vs {
		lc.Scans = append(lc.Scans, JSONScan{PID: v.PID, TimeNs: int64(r.rel(v.Time)), AtExit: v.AtExit, Rules: v.Rules.String(),
			PauseNs: v.Pause, ElapsedNs: v.Elapsed, Complete: v.Complete, Partial: v.Partial, Blocks: v.Listed, Applied: v.Applied})
	}
	return lc
}

// FrameText is one frame on one line as the text report prints it:
// function (template arguments elided), file:line, module.
func FrameText(f *symbolize.Frame) string { return frameText(f, false) }
