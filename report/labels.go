package report

import (
	"fmt"
	"strings"

	"github.com/heapscope/heapscope/analyze"
	"github.com/heapscope/heapscope/event"
)

// TemporaryDefinition says what a temporary allocation is in heapscope's
// reports, and how heaptrack's count differs (see package analyze).
const TemporaryDefinition = "a block freed by the next heap call of the thread that made it. " +
	HeaptrackTemporaryDefinition

// HeaptrackTemporaryDefinition says how heaptrack counts temporaries, and
// why its count differs from heapscope's.
const HeaptrackTemporaryDefinition = "heaptrack counts a free as temporary when the call just before it, of any thread, " +
	"allocated from the same stack with the same size, whichever block that made: " +
	"a program that allocates a block and then frees an older one of the same stack and size counts one for heaptrack " +
	"and none for heapscope (on single-threaded sqlite3 heaptrack counts several times more), " +
	"and a call of another thread in between counts none for heaptrack"

// UnmatchedDefinition says what an unmatched free is.
const UnmatchedDefinition = "a free of an address that was not live in the trace: " +
	"the block was made where heapscope did not see it"

// UnmatchedCauses names the possible causes of the report's unmatched
// frees, from what the trace says about itself: a window, processes that
// were running before tracing began (eBPF attach), children that inherited
// their parent's heap across fork, events lost. None when there are no
// unmatched frees.
func (r *Report) UnmatchedCauses() []string {
	p := r.Profile
	if p.Summary.UnmatchedFrees == 0 {
		return nil
	}
	var out []string
	if p.From != 0 {
		out = append(out, "blocks allocated before the window (--from)")
	}
	traced := map[uint32]bool{}
	for _, pr := range p.Processes {
		traced[pr.PID] = true
	}
	var forked []string
	for _, pr := range p.Processes {
		if pr.PPID != 0 && traced[pr.PPID] && pr.PPID != pr.PID {
			forked = append(forked, fmt.Sprint(pr.PID))
		}
	}
	if len(forked) > 0 {
		out = append(out, fmt.Sprintf("blocks a forked child (pid %s) inherited from its traced parent", strings.Join(forked, ", ")))
	}
	switch {
	case r.Trace.Provider == "ebpf" && r.Trace.Properties["launched"] != "true":
		out = append(out, "blocks allocated before tracing attached to a running process")
	case r.Trace.Provider == "ebpf":
		// Launched held before its first instruction: nothing was
		// allocated before the probes were in place.
		out = append(out, "blocks made where the probes were not called (by an allocator heapscope does not probe)")
	default:
		// The interposer is there from the program's first instruction:
		// what it misses, it misses by not being called.
		out = append(out, "blocks made where the interposer was not called (before it was loaded, or by an allocator it does not wrap)")
	}
	fams, ok := r.Trace.Properties["families"]
	if !ok {
		fams = r.Trace.Properties["enable_flags"] // a trace of an earlier version
	}
	if fam, err := event.ParseFamily(fams); err == nil && fam&event.FamilyFree != 0 && fam&event.FamilyHeap != event.FamilyHeap {
		out = append(out, fmt.Sprintf("blocks made by allocation functions not traced (only %s were)", fam))
	}
	if p.HasStats && p.Stats.TotalLost() > 0 {
		out = append(out, fmt.Sprintf("allocations among the %s events lost", fmtCount(p.Stats.TotalLost())))
	}
	return out
}

// UnknownFields names the fields of the JSON document whose values a trace
// could not give (they are written as 0): those of an aggregate trace.
func (r *Report) UnknownFields() []string {
	m := r.Profile.Missing
	var out []string
	if m.Has(analyze.NoTemporaries) {
		out = append(out, "summary.temporary_allocations", "summary.heaptrack_temporary_allocations", "allocations[].temporary")
	}
	if m.Has(analyze.NoReallocSplit) {
		out = append(out, "summary.reallocations", "allocations[].reallocations", "processes[].reallocations")
	}
	if m.Has(analyze.NoFailed) {
		out = append(out, "summary.failed_allocations", "allocations[].failed")
	}
	if m.Has(analyze.NoHistogram) {
		out = append(out, "histogram")
	}
	return out
}

// ShortName shortens a demangled C++ name for people: the arguments of each
// template are elided ("std::vector<…>::push_back(int const&)"), those of
// templates inside a function's parameters too. Operators that are spelled
// with angle brackets (operator<, operator<<, operator->) are kept.
func ShortName(name string) string {
	if !strings.ContainsRune(name, '<') {
		return name
	}
	var b strings.Builder
	depth := 0
	for i := 0; i < len(name); i++ {
		c := name[i]
		if c == '<' || c == '>' || c == '-' {
			if n := operatorLen(name, i); n > 0 {
				if depth == 0 {
					b.WriteString(name[i : i+n])
				}
				i += n - 1
				continue
			}
		}
		switch c {
		case '<':
			if depth == 0 {
				b.WriteString("<…>")
			}
			depth++
			continue
		case '>':
			if depth > 0 {
				depth--
				continue
			}
		}
		if depth == 0 {
			b.WriteByte(c)
		}
	}
	if depth != 0 {
		// Not balanced: not a name this understands.
		return name
	}
	return b.String()
}

// operatorLen returns the length of the operator symbol at name[i:] when
// it follows the word "operator", else 0.
func operatorLen(name string, i int) int {
	if !strings.HasSuffix(strings.TrimRight(name[:i], " "), "operator") {
		return 0
	}
	for _, op := range []string{"<<=", "<=>", ">>=", "<<", ">>", "<=", ">=", "->*", "->", "<", ">", "-=", "--", "-"} {
		if strings.HasPrefix(name[i:], op) {
			return len(op)
		}
	}
	return 0
}
