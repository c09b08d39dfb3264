package web

import (
	"net/http"

	"github.com/heapscope/heapscope/report"
)

// RSS is /api/rss: the traced processes' resident memory explained, as the
// censuses at attach (or a snapshot) found it, and what those censuses
// found live before the trace. Both lists are empty for a trace without a
// census (a launched program's, or an attach with --no-census).
type RSS struct {
	// Resident has one entry per census: the process's RSS and PSS from
	// /proc/PID/smaps, split into parts that add up to them (heap in use,
	// allocator overhead, free in bins, fastbins, tcaches and top chunks,
	// mmapped chunks, other anonymous memory, file-backed pages), each
	// saying whether it was measured or estimated.
	Resident []report.JSONResident `json:"resident"`
	// Rundowns say, per census, what was live before the trace: how much
	// is left at the end, and in which kinds of block (the largest
	// maxTop of them: Capped then says so).
	Rundowns []report.JSONRundown `json:"rundowns"`
	Capped   *Capped              `json:"capped,omitempty"`
}

func (s *Server) rss(w http.ResponseWriter, r *http.Request) {
	var out RSS
	out.Rundowns, out.Resident = s.x.Report.CensusJSON()
	for i := range out.Rundowns {
		if g := out.Rundowns[i].Groups; len(g) > maxTop {
			out.Rundowns[i].Groups = g[:maxTop]
			out.Capped = &Capped{Top: maxTop}
		}
	}
	if out.Resident == nil {
		out.Resident = []report.JSONResident{}
	}
	if out.Rundowns == nil {
		out.Rundowns = []report.JSONRundown{}
	}
	writeJSON(w, out)
}
