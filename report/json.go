package report

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/heapscope/heapscope/analyze"
	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/symbolize"
)

// JSONVersion is the version of the JSON schema WriteJSON writes (see
// JSON.md). Fields are only ever added within a version.
const JSONVersion = 1

// JSON is the document WriteJSON writes. It is exported so that Go programs
// can read reports back with encoding/json.
type JSON struct {
	Version     int           `json:"version"`
	Trace       JSONTrace     `json:"trace"`
	Summary     JSONSummary   `json:"summary"`
	Leaks       []JSONLive    `json:"leaks"`
	Peak        []JSONLive    `json:"peak"`
	Allocations []JSONSite    `json:"allocations"`
	Histogram   []JSONBucket  `json:"histogram"`
	Timeline    []JSONPoint   `json:"timeline"`
	Processes   []JSONProcess `json:"processes"`
	Limitations []string      `json:"limitations"`
	Warnings    []string      `json:"warnings"`
	Window      *JSONWindow   `json:"window,omitempty"`
	Stats       *JSONStats    `json:"stats,omitempty"`
}

// JSONTrace describes the trace.
type JSONTrace struct {
	File       string   `json:"file"`
	Session    string   `json:"session"`
	Provider   string   `json:"provider"`
	PIDs       []uint32 `json:"pids"`
	DurationNs int64    `json:"duration_ns"`
	Events     uint64   `json:"events"`      // heap events read (in the window)
	LostEvents uint64   `json:"lost_events"` // from the last stats record; 0 when none
	Aggregate  bool     `json:"aggregate"`   // from snapshots, not every event
}

// JSONSummary holds the totals.
type JSONSummary struct {
	Allocations          uint64 `json:"allocations"`
	Reallocations        uint64 `json:"reallocations"`
	Frees                uint64 `json:"frees"`
	BytesAllocated       uint64 `json:"bytes_allocated"`
	PeakBytes            uint64 `json:"peak_bytes"`
	PeakBlocks           uint64 `json:"peak_blocks"`
	PeakTimeNs           int64  `json:"peak_time_ns"`
	LeakedBytes          uint64 `json:"leaked_bytes"`
	LeakedBlocks         uint64 `json:"leaked_blocks"`
	TemporaryAllocations uint64 `json:"temporary_allocations"`
	UnmatchedFrees       uint64 `json:"unmatched_frees"`
	FailedAllocations    uint64 `json:"failed_allocations"`
	MissedFrees          uint64 `json:"missed_frees"`
}

// JSONLive is a site's live blocks: at the end (leaks) or at the peak.
type JSONLive struct {
	Bytes  uint64      `json:"bytes"`
	Blocks uint64      `json:"blocks"`
	PIDs   []uint32    `json:"pids"`
	Stack  []JSONFrame `json:"stack"`
}

// JSONSite is a site's allocation totals.
type JSONSite struct {
	Allocations   uint64      `json:"allocations"`
	Reallocations uint64      `json:"reallocations"`
	Bytes         uint64      `json:"bytes"`
	Temporary     uint64      `json:"temporary"`
	Frees         uint64      `json:"frees"`
	Failed        uint64      `json:"failed"`
	LeakedBytes   uint64      `json:"leaked_bytes"`
	PeakBytes     uint64      `json:"peak_bytes"`
	PIDs          []uint32    `json:"pids"`
	Stack         []JSONFrame `json:"stack"`
}

// JSONFrame is one frame. Address is hexadecimal ("0x401136"), the return
// address in the process; Module is the file's path.
type JSONFrame struct {
	Function string `json:"function"`
	File     string `json:"file"`
	Line     int    `json:"line"`
	Module   string `json:"module"`
	Address  string `json:"address"`
	Offset   string `json:"offset"`
	Inlined  bool   `json:"inlined"`
}

// JSONBucket is a bucket of the size histogram: Count allocations of more
// than the previous bucket's Le and at most Le bytes (not cumulative).
type JSONBucket struct {
	Le    uint64 `json:"le"`
	Count uint64 `json:"count"`
}

// JSONPoint is a point of the timeline.
type JSONPoint struct {
	TNs        int64  `json:"t_ns"`
	LiveBytes  uint64 `json:"live_bytes"`
	LiveBlocks uint64 `json:"live_blocks"`
}

// JSONProcess is a traced process.
type JSONProcess struct {
	PID     uint32   `json:"pid"`
	PPID    uint32   `json:"ppid"`
	Exe     string   `json:"exe"`
	Cmdline []string `json:"cmdline"`
	Exited  bool     `json:"exited"`
	Status  int32    `json:"exit_status"`
	Signal  int32    `json:"signal"`
}

// JSONWindow is the --from/--to window, relative to the trace's start.
type JSONWindow struct {
	FromNs int64 `json:"from_ns"`
	ToNs   int64 `json:"to_ns"` // 0: the end
}

// JSONStats is the session's last statistics record.
type JSONStats struct {
	Delivered  uint64            `json:"delivered"`
	Lost       map[string]uint64 `json:"lost"` // by reason
	StacksLost uint64            `json:"stacks_lost"`
	Unmatched  uint64            `json:"unmatched"`
	Bytes      uint64            `json:"bytes"`
}

// Document builds the JSON document, with at most top sites in each list
// when top > 0.
func (r *Report) Document(top int) *JSON {
	p := r.Profile
	d := &JSON{
		Version: JSONVersion,
		Trace: JSONTrace{
			File:       r.Trace.File,
			Session:    r.Trace.Session,
			Provider:   r.Trace.Provider,
			PIDs:       []uint32{},
			DurationNs: int64(r.Duration()),
			Events:     p.Summary.Events,
			Aggregate:  p.Aggregate,
		},
		Summary: JSONSummary{
			Allocations:          p.Summary.Allocations,
			Reallocations:        p.Summary.Reallocations,
			Frees:                p.Summary.Frees,
			BytesAllocated:       p.Summary.BytesAllocated,
			PeakBytes:            p.Peak.Bytes,
			PeakBlocks:           p.Peak.Blocks,
			PeakTimeNs:           int64(r.rel(p.Peak.Time)),
			LeakedBytes:          p.Summary.LeakedBytes,
			LeakedBlocks:         p.Summary.LeakedBlocks,
			TemporaryAllocations: p.Summary.Temporary,
			UnmatchedFrees:       p.Summary.UnmatchedFrees,
			FailedAllocations:    p.Summary.Failed,
			MissedFrees:          p.Summary.MissedFrees,
		},
		Leaks:       []JSONLive{},
		Peak:        []JSONLive{},
		Allocations: []JSONSite{},
		Histogram:   []JSONBucket{},
		Timeline:    []JSONPoint{},
		Processes:   []JSONProcess{},
		Limitations: p.Missing.Describe(),
		Warnings:    append([]string{}, r.Trace.Warnings...),
	}
	if d.Limitations == nil {
		d.Limitations = []string{}
	}
	for _, pr := range p.Processes {
		d.Trace.PIDs = append(d.Trace.PIDs, pr.PID)
		jp := JSONProcess{PID: pr.PID, PPID: pr.PPID, Exe: pr.Exe, Cmdline: pr.Cmdline, Exited: pr.Exited}
		if jp.Cmdline == nil {
			jp.Cmdline = []string{}
		}
		if pr.Exited {
			jp.Status, jp.Signal = pr.Exit.Status, pr.Exit.Signal
		}
		d.Processes = append(d.Processes, jp)
	}
	if p.HasStats {
		d.Trace.LostEvents = p.Stats.TotalLost()
		js := &JSONStats{Delivered: p.Stats.Delivered, Lost: map[string]uint64{},
			StacksLost: p.Stats.StacksLost, Unmatched: p.Stats.Unmatched, Bytes: p.Stats.Bytes}
		for i, n := range p.Stats.Lost {
			js.Lost[event.LostReason(i).String()] = n
		}
		d.Stats = js
	}
	if p.From != 0 || p.To != 0 {
		w := &JSONWindow{}
		if p.From != 0 {
			w.FromNs = int64(r.rel(p.From))
		}
		if p.To != 0 {
			w.ToNs = int64(r.rel(p.To))
		}
		d.Window = w
	}
	for _, s := range r.sorted(byLeaked, top) {
		d.Leaks = append(d.Leaks, JSONLive{Bytes: s.LeakedBytes, Blocks: s.LeakedBlocks, PIDs: s.PIDs, Stack: jsonStack(s.Stack)})
	}
	for _, s := range r.sorted(byPeak, top) {
		d.Peak = append(d.Peak, JSONLive{Bytes: s.PeakBytes, Blocks: s.PeakBlocks, PIDs: s.PIDs, Stack: jsonStack(s.Stack)})
	}
	for _, s := range r.sortedAll(top) {
		d.Allocations = append(d.Allocations, JSONSite{
			Allocations: s.Allocations, Reallocations: s.Reallocations, Bytes: s.Bytes,
			Temporary: s.Temporary, Frees: s.Frees, Failed: s.Failed,
			LeakedBytes: s.LeakedBytes, PeakBytes: s.PeakBytes, PIDs: s.PIDs, Stack: jsonStack(s.Stack),
		})
	}
	if !p.Missing.Has(analyze.NoHistogram) {
		for _, b := range p.Histogram {
			d.Histogram = append(d.Histogram, JSONBucket{Le: b.Le, Count: b.Count})
		}
	}
	for _, pt := range p.Timeline {
		d.Timeline = append(d.Timeline, JSONPoint{TNs: int64(r.rel(pt.Time)), LiveBytes: pt.Bytes, LiveBlocks: pt.Blocks})
	}
	return d
}

// sortedAll returns every site by allocation calls, then bytes, at most top.
func (r *Report) sortedAll(top int) []*Site {
	return r.sorted(func(s *Site) uint64 { return byCalls(s) + 1 }, top)
}

func jsonStack(fs []symbolize.Frame) []JSONFrame {
	out := make([]JSONFrame, len(fs))
	for i, f := range fs {
		out[i] = JSONFrame{
			Function: f.Function, File: f.File, Line: f.Line, Module: f.Module,
			Address: fmt.Sprintf("0x%x", f.Address), Offset: fmt.Sprintf("0x%x", f.Offset), Inlined: f.Inlined,
		}
	}
	return out
}

// WriteJSON writes the report as one JSON document (see JSON.md): every
// site, or at most top in each list when top > 0.
func (r *Report) WriteJSON(w io.Writer, top int) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r.Document(top))
}
