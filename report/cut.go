package report

import (
	"fmt"
	"path"
	"sort"
	"strconv"
	"strings"

	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/tracefile"
)

// stackRoots are the functions a whole stack ends in: the program's entry
// and the C library's thread start. A stack that ends elsewhere was cut
// short by its unwinder.
var stackRoots = map[string]bool{
	"_start": true, "__libc_start_main": true, "__libc_start_main_impl": true, "__libc_start_call_main": true,
	"start_thread": true, "clone": true, "clone3": true, "__clone": true, "__clone3": true, "__clone_internal": true,
}

// CutNote says once, naming the modules, when stacks end early: the
// unwinder stopped in a module it could not walk (a frame-pointer walk in
// code built without frame pointers, code without unwind information) or
// the depth limit maxFrames was reached; it suggests the fix. unwind is
// the trace's unwinder ("fp", "dwarf", "tables", "" if unknown). It returns
// "" when every stack with frames reaches its thread's first frame.
func (r *Report) CutNote(unwind string, maxFrames int) string {
	var total, cutBytes, deepBytes uint64
	cutSites, deepSites, sites := 0, 0, 0
	byModule := map[string]uint64{}
	for _, s := range r.Sites {
		if len(s.ids) == 0 || s.BeforeTrace() {
			continue
		}
		sites++
		total += s.Bytes
		deep := false
		for _, m := range s.members {
			if maxFrames > 0 && len(m.Frames) >= maxFrames {
				deep = true
			}
		}
		if deep {
			deepSites++
			deepBytes += s.Bytes
			continue
		}
		last := r.table.frames[s.ids[len(s.ids)-1]]
		if stackRoots[last.Function] {
			continue
		}
		// a stripped program's _start has no name: its caller's is enough
		if n := len(s.ids); n >= 2 && last.Function == "" && strings.HasPrefix(r.table.frames[s.ids[n-2]].Function, "__libc_start_main") {
			continue
		}
		cutSites++
		cutBytes += s.Bytes
		mod := path.Base(last.Module)
		if last.Module == "" {
			mod = "unknown code"
		}
		byModule[mod] += s.Bytes + 1
	}
	var notes []string
	if cutSites > 0 {
		mods := make([]string, 0, len(byModule))
		for m := range byModule {
			mods = append(mods, m)
		}
		sort.Slice(mods, func(i, j int) bool {
			if byModule[mods[i]] != byModule[mods[j]] {
				return byModule[mods[i]] > byModule[mods[j]]
			}
			return mods[i] < mods[j]
		})
		if len(mods) > 5 {
			mods = append(mods[:5], fmt.Sprintf("%d more", len(mods)-5))
		}
		why := "the unwinder had no rule there (allocations before tracing was set up, walked with frame pointers; code without unwind information or generated at run time)"
		fix := ""
		if unwind == "fp" || unwind == "" {
			why = "probably code built without frame pointers"
			fix = "; record with `heapscope run` (its default, --unwind tables) or --unwind dwarf for complete stacks"
		}
		notes = append(notes, fmt.Sprintf("stacks cut short: %d of %d sites (%s of allocated bytes) stop in %s: %s%s",
			cutSites, sites, percent(cutBytes, total), strings.Join(mods, ", "), why, fix))
	}
	if deepSites > 0 {
		fix := fmt.Sprintf("raise --max-frames (up to %d)", event.MaxFrames)
		if maxFrames >= event.MaxFrames {
			fix = "the most heapscope records: their outermost frames are missing (deep recursion?)"
		}
		notes = append(notes, fmt.Sprintf("stacks cut by the depth limit: %d of %d sites (%s of allocated bytes) have %d frames, the most recorded; %s",
			deepSites, sites, percent(deepBytes, total), maxFrames, fix))
	}
	return strings.Join(notes, "; ")
}

func percent(part, total uint64) string {
	if total == 0 {
		return "0%"
	}
	return fmt.Sprintf("%.0f%%", 100*float64(part)/float64(total))
}

// headerUnwind returns the unwinder and the depth limit the trace was
// recorded with, from its header's properties.
// Describe adds to the report what the trace's header says: the session's
// properties, and the note on stacks cut short (CutNote) among the warnings.
// Load calls it; a report made with New from another pass over the trace
// (serve's index) calls it too, so that both say the same.
func (r *Report) Describe(h tracefile.Header) {
	if note := r.CutNote(headerUnwind(h)); note != "" {
		r.Trace.Warnings = append(r.Trace.Warnings, note)
	}
	if len(h.Properties) > 0 {
		r.Trace.Properties = map[string]string{}
		for _, kv := range h.Properties {
			r.Trace.Properties[kv.Key] = kv.Value
		}
	}
}

func headerUnwind(h tracefile.Header) (unwind string, maxFrames int) {
	for _, p := range h.Properties {
		switch p.Key {
		case "unwind":
			unwind = p.Value
		case "max_frames":
			maxFrames, _ = strconv.Atoi(p.Value)
		}
	}
	return unwind, maxFrames
}
