package report

import (
	"fmt"

	"github.com/heapscope/heapscope/analyze"
)

// estimatedNote is what a report says beside every number of a sampled
// trace's profile; "" for an exact one.
func estimatedNote(p *analyze.Profile) string {
	if p == nil || !p.Estimated() {
		return ""
	}
	return fmt.Sprintf("estimated (sampled every %s on average)", fmtRate(p.SampleRate))
}

// fmtRate writes a sampling rate as the user typed it when it is a whole
// number of KiB or MiB.
func fmtRate(r int64) string {
	switch {
	case r >= 1<<20 && r%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", r>>20)
	case r >= 1<<10 && r%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", r>>10)
	}
	return fmt.Sprintf("%d bytes", r)
}

// joinNote adds the estimate note to a section's note.
func joinNote(note string, p *analyze.Profile) string {
	e := estimatedNote(p)
	switch {
	case e == "":
		return note
	case note == "":
		return e
	}
	return note + "; " + e
}
