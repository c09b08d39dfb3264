package report

import (
	"fmt"
	"math"

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

// Estimate says, for a sampled trace, that its counts are estimates and at
// what rate it was sampled ("estimated (sampled every 64 KiB on
// average)"); "" for an exact trace. Every view of a sampled trace shows
// it beside its numbers.
func (r *Report) Estimate() string { return estimatedNote(r.Profile) }

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

// StandardErrors returns, for a sampled trace, the standard errors (in
// bytes) of the estimates of the bytes allocated, of the peak and of the
// leaks (suppressed ones left out), from the model's variances (see
// analyze.SampleVariance); ok is false when there are none (an exact
// trace, or one whose variances are not known).
func (r *Report) StandardErrors() (bytes, peak, leaked float64, ok bool) {
	p := r.Profile
	if !p.Estimated() {
		return 0, 0, 0, false
	}
	var pv, lv float64
	for _, s := range r.Sites {
		for _, st := range s.members {
			pv += st.PeakVar
			if s.SuppressedBy == nil {
				lv += st.LiveVar
			}
		}
	}
	if p.Summary.BytesVar == 0 && pv == 0 && lv == 0 {
		return 0, 0, 0, false
	}
	return math.Sqrt(p.Summary.BytesVar), math.Sqrt(pv), math.Sqrt(lv), true
}

func (r *Report) jsonErrors() *JSONErrors {
	b, p, l, ok := r.StandardErrors()
	if !ok {
		return nil
	}
	return &JSONErrors{BytesAllocated: math.Round(b), PeakBytes: math.Round(p), LeakedBytes: math.Round(l)}
}

// plusMinus is " ±X" of a standard error, or "" without one.
func plusMinus(se float64, ok bool) string {
	if !ok {
		return ""
	}
	return " ±" + fmtBytes(uint64(math.Round(se)))
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
