package report

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"unicode/utf8"

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
	Version     int              `json:"version"`
	Trace       JSONTrace        `json:"trace"`
	Summary     JSONSummary      `json:"summary"`
	Leaks       []JSONLive       `json:"leaks"`
	Peak        []JSONLive       `json:"peak"`
	Allocations []JSONSite       `json:"allocations"`
	Histogram   []JSONBucket     `json:"histogram"`
	Timeline    []JSONPoint      `json:"timeline"`
	Processes   []JSONProcess    `json:"processes"`
	Suppressed  []JSONSuppressed `json:"suppressed"`
	Limitations []string         `json:"limitations"`
	Warnings    []string         `json:"warnings"`
	// Definitions say what the counts mean: "temporary", "unmatched_frees".
	Definitions map[string]string `json:"definitions"`
	// UnmatchedFreeCauses are the possible causes of the unmatched frees,
	// from what the trace says of itself; [] when there are none.
	UnmatchedFreeCauses []string `json:"unmatched_free_causes"`
	// Unknown names the fields this trace cannot give (written as 0).
	Unknown []string    `json:"unknown"`
	Window  *JSONWindow `json:"window,omitempty"`
	Stats   *JSONStats  `json:"stats,omitempty"`
	// Rundowns are what censuses found live before the trace, Resident
	// the processes' resident memory explained (see census.go).
	Rundowns []JSONRundown  `json:"rundowns,omitempty"`
	Resident []JSONResident `json:"resident,omitempty"`
	// LeakCheck is what the trace's heap scans found; absent when it has
	// none (then leaks are every block live at the end).
	LeakCheck *JSONLeakCheck `json:"leak_check,omitempty"`
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
	// SampleRate is the sampling rate in bytes (0: every event recorded);
	// when set, every count of the document is an estimate, Estimated says
	// so in words, and SampledAllocations is the number recorded.
	SampleRate         int64  `json:"sample_rate"`
	Estimated          string `json:"estimated,omitempty"`
	SampledAllocations uint64 `json:"sampled_allocations"`
	// StandardErrors are, for a sampled trace, the standard errors in
	// bytes of the main estimates (absent when exact, or not known: a
	// window of serve's index, an aggregate trace).
	StandardErrors *JSONErrors `json:"standard_errors,omitempty"`
}

// JSONErrors are the standard errors of a sampled trace's estimates, in
// bytes: about two in three estimates are within one of the truth.
type JSONErrors struct {
	BytesAllocated float64 `json:"bytes_allocated"`
	PeakBytes      float64 `json:"peak_bytes"`
	LeakedBytes    float64 `json:"leaked_bytes"`
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
	SuppressedBytes      uint64 `json:"suppressed_bytes"`
	SuppressedBlocks     uint64 `json:"suppressed_blocks"`
	TemporaryAllocations uint64 `json:"temporary_allocations"`
	// HeaptrackTemporary is the temporaries by heaptrack's definition
	// (definitions.temporary), for a comparison with heaptrack.
	HeaptrackTemporary uint64 `json:"heaptrack_temporary_allocations"`
	UnmatchedFrees     uint64 `json:"unmatched_frees"`
	FailedAllocations  uint64 `json:"failed_allocations"`
	MissedFrees        uint64 `json:"missed_frees"`
}

// JSONLive is a site's live blocks: at the end (leaks) or at the peak.
type JSONLive struct {
	Bytes  uint64 `json:"bytes"`
	Blocks uint64 `json:"blocks"`
	Name   string `json:"name"` // the site's name: its first frame that is not an allocator wrapper
	// Classes splits a leak's blocks by reachability class, when the
	// trace holds a leak check.
	Classes *JSONClasses `json:"classes,omitempty"`
	PIDs    []uint32     `json:"pids"`
	Stack   []JSONFrame  `json:"stack"`
}

// JSONSite is a site's allocation totals.
type JSONSite struct {
	Allocations   uint64 `json:"allocations"`
	Reallocations uint64 `json:"reallocations"`
	Bytes         uint64 `json:"bytes"`
	Temporary     uint64 `json:"temporary"`
	Frees         uint64 `json:"frees"`
	Failed        uint64 `json:"failed"`
	LeakedBytes   uint64 `json:"leaked_bytes"`
	PeakBytes     uint64 `json:"peak_bytes"`
	// Suppressed is the rule that suppressed the site's leaks, whose
	// bytes are then not in LeakedBytes; "" when none did.
	Suppressed string      `json:"suppressed,omitempty"`
	Name       string      `json:"name"` // as JSONLive's
	PIDs       []uint32    `json:"pids"`
	Stack      []JSONFrame `json:"stack"`
}

// JSONSuppressed is what one suppression rule took out of the leaks.
type JSONSuppressed struct {
	Rule        string `json:"rule"`   // "leak:PATTERN", or "default:NAME"
	Source      string `json:"source"` // "FILE:LINE", or "default"
	Description string `json:"description,omitempty"`
	Bytes       uint64 `json:"bytes"`
	Blocks      uint64 `json:"blocks"`
	Sites       int    `json:"sites"`
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
	// The process's own totals (see ProcessTotals).
	Allocations   uint64 `json:"allocations"`
	Reallocations uint64 `json:"reallocations"`
	Bytes         uint64 `json:"bytes_allocated"`
	Frees         uint64 `json:"frees"`
	LeakedBytes   uint64 `json:"leaked_bytes"`
	LeakedBlocks  uint64 `json:"leaked_blocks"`
	PeakBytes     uint64 `json:"peak_bytes"`
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
func (r *Report) Document(top int) *JSON { return r.document(top, true) }

func (r *Report) document(top int, sites bool) *JSON {
	p := r.Profile
	leakedBytes, leakedBlocks := r.Leaked()
	supBytes, supBlocks, _ := r.SuppressedTotal()
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
			SampleRate: p.SampleRate, Estimated: estimatedNote(p), SampledAllocations: p.Summary.Sampled,
			StandardErrors: r.jsonErrors(),
		},
		Summary: JSONSummary{
			Allocations:          p.Summary.Allocations,
			Reallocations:        p.Summary.Reallocations,
			Frees:                p.Summary.Frees,
			BytesAllocated:       p.Summary.Bytes,
			PeakBytes:            p.Peak.Bytes,
			PeakBlocks:           p.Peak.Blocks,
			PeakTimeNs:           int64(r.rel(p.Peak.Time)),
			LeakedBytes:          leakedBytes,
			LeakedBlocks:         leakedBlocks,
			SuppressedBytes:      supBytes,
			SuppressedBlocks:     supBlocks,
			TemporaryAllocations: p.Summary.Temporary,
			HeaptrackTemporary:   p.Summary.HeaptrackTemporary,
			UnmatchedFrees:       p.Summary.UnmatchedFrees,
			FailedAllocations:    p.Summary.Failed,
			MissedFrees:          p.Summary.MissedFrees,
		},
		Leaks:               []JSONLive{},
		Peak:                []JSONLive{},
		Allocations:         []JSONSite{},
		Histogram:           []JSONBucket{},
		Timeline:            []JSONPoint{},
		Processes:           []JSONProcess{},
		Suppressed:          []JSONSuppressed{},
		Limitations:         p.Missing.Describe(),
		Warnings:            append([]string{}, r.Trace.Warnings...),
		Definitions:         map[string]string{"temporary": TemporaryDefinition, "unmatched_frees": UnmatchedDefinition},
		UnmatchedFreeCauses: append([]string{}, r.UnmatchedCauses()...),
		Unknown:             append([]string{}, r.UnknownFields()...),
	}
	if d.Limitations == nil {
		d.Limitations = []string{}
	}
	totals := r.ByProcess()
	for _, pr := range p.Processes {
		d.Trace.PIDs = append(d.Trace.PIDs, pr.PID)
		jp := JSONProcess{PID: pr.PID, PPID: pr.PPID, Exe: pr.Exe, Cmdline: pr.Cmdline, Exited: pr.Exited}
		if pt := totals[pr.PID]; pt != nil {
			jp.Allocations, jp.Reallocations, jp.Bytes, jp.Frees = pt.Allocations, pt.Reallocations, pt.Bytes, pt.Frees
			jp.LeakedBytes, jp.LeakedBlocks, jp.PeakBytes = pt.LiveBytes, pt.LiveBlocks, pt.PeakBytes
		}
		if jp.Cmdline == nil {
			jp.Cmdline = []string{}
		}
		if pr.Exited {
			jp.Status, jp.Signal = pr.Exit.Status, pr.Exit.Signal
		}
		d.Processes = append(d.Processes, jp)
	}
	for _, s := range r.Suppressed {
		d.Suppressed = append(d.Suppressed, JSONSuppressed{Rule: s.Rule.Text, Source: s.Rule.Source,
			Description: s.Rule.Description, Bytes: s.Bytes, Blocks: s.Blocks, Sites: s.Sites})
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
	d.LeakCheck = r.leakCheckJSON()
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
	if sites {
		for _, s := range r.sorted(byLeaked, top) {
			d.Leaks = append(d.Leaks, JSONLive{Bytes: s.LiveBytes, Blocks: s.LiveBlocks, Name: s.Name(), Classes: r.siteClasses(s), PIDs: s.PIDs, Stack: jsonStack(s.Stack())})
		}
		for _, s := range r.sorted(byPeak, top) {
			d.Peak = append(d.Peak, JSONLive{Bytes: s.PeakBytes, Blocks: s.PeakBlocks, Name: s.Name(), PIDs: s.PIDs, Stack: jsonStack(s.Stack())})
		}
		for _, s := range r.sortedAll(top) {
			d.Allocations = append(d.Allocations, JSONSite{
				Allocations: s.Allocations, Reallocations: s.Reallocations, Bytes: s.Bytes,
				Temporary: s.Temporary, Frees: s.Frees, Failed: s.Failed,
				LeakedBytes: s.LiveBytes, PeakBytes: s.PeakBytes, Suppressed: ruleText(s), Name: s.Name(), PIDs: s.PIDs, Stack: jsonStack(s.Stack()),
			})
		}
	}
	if !p.Missing.Has(analyze.NoHistogram) {
		for _, b := range p.Histogram {
			d.Histogram = append(d.Histogram, JSONBucket{Le: b.Le, Count: b.Count})
		}
	}
	for _, pt := range p.Timeline {
		d.Timeline = append(d.Timeline, JSONPoint{TNs: int64(r.rel(pt.Time)), LiveBytes: pt.Bytes, LiveBlocks: pt.Blocks})
	}
	d.Rundowns, d.Resident = r.CensusJSON()
	return d
}

// ruleText is the text of the rule that suppressed s's leaks, or "".
func ruleText(s *Site) string {
	if s.SuppressedBy == nil {
		return ""
	}
	return s.SuppressedBy.Text
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
// site, or at most top in each list when top > 0. It writes what Document
// returns, streaming the sites rather than building them in memory, and
// encoding each distinct frame once.
func (r *Report) WriteJSON(w io.Writer, top int) error {
	d := r.document(top, false)
	bw := bufio.NewWriterSize(w, 64<<10)
	jw := &jsonWriter{w: bw, frames: make([][]byte, len(r.table.frames)), table: r.table}
	jw.raw(`{"version":`)
	jw.int(uint64(d.Version))
	jw.field("trace", d.Trace)
	jw.field("summary", d.Summary)
	jw.raw(`,"leaks":[`)
	for i, s := range r.sorted(byLeaked, top) {
		jw.live(i, s.LiveBytes, s.LiveBlocks, r.siteClasses(s), s)
	}
	jw.raw(`],"peak":[`)
	for i, s := range r.sorted(byPeak, top) {
		jw.live(i, s.PeakBytes, s.PeakBlocks, nil, s)
	}
	jw.raw(`],"allocations":[`)
	for i, s := range r.sortedAll(top) {
		jw.sep(i)
		for j, v := range []uint64{s.Allocations, s.Reallocations, s.Bytes, s.Temporary, s.Frees, s.Failed, s.LiveBytes, s.PeakBytes} {
			jw.raw(siteFields[j])
			jw.int(v)
		}
		if s.SuppressedBy != nil {
			jw.raw(`,"suppressed":`)
			jw.bytes(appendString(nil, s.SuppressedBy.Text))
		}
		jw.tail(s)
	}
	jw.raw("]")
	jw.field("histogram", d.Histogram)
	jw.field("timeline", d.Timeline)
	jw.field("processes", d.Processes)
	jw.field("suppressed", d.Suppressed)
	jw.field("limitations", d.Limitations)
	jw.field("warnings", d.Warnings)
	jw.field("definitions", d.Definitions)
	jw.field("unmatched_free_causes", d.UnmatchedFreeCauses)
	jw.field("unknown", d.Unknown)
	if d.Window != nil {
		jw.field("window", d.Window)
	}
	if d.Stats != nil {
		jw.field("stats", d.Stats)
	}
	if len(d.Rundowns) > 0 {
		jw.field("rundowns", d.Rundowns)
	}
	if len(d.Resident) > 0 {
		jw.field("resident", d.Resident)
	}
	if d.LeakCheck != nil {
		jw.field("leak_check", d.LeakCheck)
	}
	jw.raw("}\n")
	if jw.err != nil {
		return jw.err
	}
	return bw.Flush()
}

// The fields of JSONSite before its pids, in order.
var siteFields = []string{`{"allocations":`, `,"reallocations":`, `,"bytes":`, `,"temporary":`,
	`,"frees":`, `,"failed":`, `,"leaked_bytes":`, `,"peak_bytes":`}

// jsonWriter writes the parts of the JSON document; the first error sticks.
type jsonWriter struct {
	w      *bufio.Writer
	buf    []byte
	frames [][]byte // each frame's encoding, made on first use
	table  *frameTable
	err    error
}

func (j *jsonWriter) raw(s string) {
	if j.err == nil {
		_, j.err = j.w.WriteString(s)
	}
}

func (j *jsonWriter) bytes(b []byte) {
	if j.err == nil {
		_, j.err = j.w.Write(b)
	}
}

func (j *jsonWriter) int(v uint64) {
	j.buf = strconv.AppendUint(j.buf[:0], v, 10)
	j.bytes(j.buf)
}

func (j *jsonWriter) sep(i int) {
	if i > 0 {
		j.raw(",\n")
	}
}

// field writes ,"name": and v encoded by encoding/json.
func (j *jsonWriter) field(name string, v any) {
	b, err := json.Marshal(v)
	if err != nil && j.err == nil {
		j.err = err
	}
	j.raw(`,"` + name + `":`)
	j.bytes(b)
}

func (j *jsonWriter) live(i int, bytes, blocks uint64, cls *JSONClasses, s *Site) {
	j.sep(i)
	j.raw(`{"bytes":`)
	j.int(bytes)
	j.raw(`,"blocks":`)
	j.int(blocks)
	if cls != nil {
		j.field("classes", cls)
	}
	j.tail(s)
}

// tail writes a site's name, pids and stack and closes it.
func (j *jsonWriter) tail(s *Site) {
	j.raw(`,"name":`)
	j.buf = appendString(j.buf[:0], s.Name())
	j.bytes(j.buf)
	j.raw(`,"pids":[`)
	for i, pid := range s.PIDs {
		if i > 0 {
			j.raw(",")
		}
		j.int(uint64(pid))
	}
	j.raw(`],"stack":[`)
	for i, id := range s.ids {
		if i > 0 {
			j.raw(",")
		}
		if j.frames[id] == nil {
			j.frames[id] = appendFrame(nil, &j.table.frames[id])
		}
		j.bytes(j.frames[id])
	}
	j.raw("]}")
}

// appendFrame appends f as a JSONFrame object.
func appendFrame(b []byte, f *symbolize.Frame) []byte {
	b = append(b, `{"function":`...)
	b = appendString(b, f.Function)
	b = append(b, `,"file":`...)
	b = appendString(b, f.File)
	b = append(b, `,"line":`...)
	b = strconv.AppendInt(b, int64(f.Line), 10)
	b = append(b, `,"module":`...)
	b = appendString(b, f.Module)
	b = append(b, `,"address":"0x`...)
	b = strconv.AppendUint(b, f.Address, 16)
	b = append(b, `","offset":"0x`...)
	b = strconv.AppendUint(b, f.Offset, 16)
	b = append(b, `","inlined":`...)
	b = strconv.AppendBool(b, f.Inlined)
	return append(b, '}')
}

// appendString appends s as a JSON string: quotes, backslashes and control
// characters escaped, invalid UTF-8 replaced by U+FFFD, as encoding/json
// does (which also escapes <, > and &; this need not).
func appendString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' && c < utf8.RuneSelf {
			i++
			continue
		}
		if c < utf8.RuneSelf {
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\t':
				b = append(b, '\\', 't')
			case '\r':
				b = append(b, '\\', 'r')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i++
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
