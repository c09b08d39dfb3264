package heapscope

import (
	"context"
	"os"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/heapscope/heapscope/export"
	"github.com/heapscope/heapscope/export/push"
	"github.com/heapscope/heapscope/internal/totals"
	"github.com/heapscope/heapscope/symbolize"
)

// DefaultExportInterval is the length of an exported interval unless
// Properties.ExportInterval says otherwise.
const DefaultExportInterval = 60 * time.Second

// MinExportInterval is the shortest Properties.ExportInterval.
const MinExportInterval = time.Second

// exportCloseWait bounds how long the end of a session waits for its last
// exports to be sent: what is left then is dropped, and counted.
var exportCloseWait = 10 * time.Second

// ExportStats are the counters of one export target (Properties.Export):
// exports sent, retried, dropped. An export is one interval for OTLP and
// one process's interval for pprof.
type ExportStats = push.Stats

// exporter sends a session's interval profiles to its export targets: the
// session's totals, kept from its start, are cut into intervals every
// Properties.ExportInterval and once more at its end. A cut costs
// O(stacks) under the sink's lock (a copy of the sites), and the
// intervals are encoded and sent by each target's sender, on goroutines
// of their own: a slow or absent collector never holds up the session.
type exporter struct {
	s        *Session
	interval time.Duration
	senders  []*push.Sender
	targets  []string // each target as shown: its URL without a password
	sym      *symbolize.Symbolizer
	host     export.Host

	mu     sync.Mutex // serializes cuts
	closed bool
	deltas *export.Deltas
	nmods  int // the totals' module records taken so far
	maps   map[uint32][]export.Mapping
	seen   map[mapKey]bool
	// sentEnded: processes an interval has carried with their end (their
	// leaks): the next intervals leave them out, unless the PID runs a new
	// image.
	sentEnded map[uint32]bool
}

type mapKey struct {
	pid   uint32
	start uint64
	path  string
}

// newExporter makes the senders of s's export targets and turns on the
// totals it cuts intervals from. The targets were checked by Validate.
func newExporter(s *Session) (*exporter, error) {
	x := &exporter{
		s: s, interval: s.props.ExportInterval, sym: symbolize.New(symbolize.Options{}),
		host: hostInfo(), deltas: export.NewDeltas(s.started),
		maps: map[uint32][]export.Mapping{}, seen: map[mapKey]bool{}, sentEnded: map[uint32]bool{},
	}
	enc := export.Options{Resolver: x.sym, Trim: symbolize.TrimAllocator, Version: moduleVersion()}
	if s.props.ExportAddresses {
		enc = export.Options{Version: enc.Version}
	}
	for _, e := range s.props.Export {
		t, err := push.ParseTarget(e)
		if err != nil {
			x.abort()
			return nil, err
		}
		snd, err := push.New(push.Config{Target: t, Encode: enc})
		if err != nil {
			x.abort()
			return nil, err
		}
		x.senders = append(x.senders, snd)
		x.targets = append(x.targets, redactTarget(t))
	}
	sk := s.sink
	sk.mu.Lock()
	sk.agg = totals.NewSampled(int64(s.props.Sample))
	sk.keepAgg = true
	sk.mu.Unlock()
	return x, nil
}

// abort closes the senders of a session that did not start: nothing was
// queued.
func (x *exporter) abort() {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, snd := range x.senders {
		snd.Close(ctx)
	}
	x.sym.Close()
}

// run cuts an interval every x.interval until the session stops.
func (x *exporter) run() {
	t := time.NewTicker(x.interval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			select {
			case <-x.s.drained:
				return // Stop cuts the last one
			default:
			}
			// What the provider holds reaches the totals first: the
			// interval ends now for every event captured so far. (An
			// error is the trace file's, which Stop reports.)
			x.s.Flush()
			x.cut(false)
		case <-x.s.drained:
			return
		}
	}
}

// cut sends the interval from the previous cut to now; last is the
// session's end, after which nothing more is cut.
func (x *exporter) cut(last bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.closed {
		return
	}
	x.closed = last
	end := time.Now()
	sk := x.s.sink
	sk.mu.Lock()
	v := sk.agg.View(0, 0, x.nmods)
	sk.mu.Unlock()
	st := x.s.Stats()
	for _, m := range v.Modules {
		x.sym.AddModule(m)
		k := mapKey{m.PID, m.Start, m.Path}
		if !x.seen[k] {
			x.seen[k] = true
			x.maps[m.PID] = append(x.maps[m.PID], export.Mapping{Start: m.Start, Limit: m.End, Offset: m.Offset, File: m.Path, BuildID: m.BuildID})
		}
	}
	x.nmods = v.NModules

	cum := &export.Interval{End: end, Host: x.host, SampleRate: int64(x.s.props.Sample), Lost: st.TotalLost(), StacksLost: st.StacksLost}
	byPID := map[uint32]int{}
	for _, p := range v.Processes {
		if !p.Ended {
			delete(x.sentEnded, p.PID)
		} else if x.sentEnded[p.PID] {
			continue
		}
		byPID[p.PID] = len(cum.Processes)
		cum.Processes = append(cum.Processes, export.Process{PID: p.PID, PPID: p.PPID, Exe: p.Exe, Cmdline: p.Cmdline, Mappings: x.maps[p.PID]})
	}
	for _, st := range v.Stacks() {
		i, ok := byPID[st.PID]
		if !ok {
			continue
		}
		cum.Processes[i].Stacks = append(cum.Processes[i].Stacks, export.Stack{ID: uint64(st.ID), Frames: st.Frames,
			Allocs: st.Allocs, AllocBytes: st.AllocBytes, LiveObjects: st.LiveBlocks, LiveBytes: st.LiveBytes})
	}
	iv := x.deltas.Next(cum)
	for _, p := range v.Processes {
		if p.Ended {
			x.sentEnded[p.PID] = true
		}
	}
	// A process with nothing allocated in the interval and nothing live
	// has nothing to show.
	kept := iv.Processes[:0]
	for _, p := range iv.Processes {
		if len(p.Stacks) > 0 {
			kept = append(kept, p)
		}
	}
	iv.Processes = kept
	for _, snd := range x.senders {
		// The senders only read the interval.
		snd.Send(iv)
	}
}

// close cuts the last interval (the session's events are all in) and
// waits, up to exportCloseWait, for the senders to send what they hold.
func (x *exporter) close() {
	x.cut(true)
	ctx, cancel := context.WithTimeout(context.Background(), exportCloseWait)
	defer cancel()
	var wg sync.WaitGroup
	for _, snd := range x.senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			snd.Close(ctx)
		}()
	}
	wg.Wait()
	x.sym.Close()
}

// stats returns each target's counters.
func (x *exporter) stats() []ExportStats {
	out := make([]ExportStats, len(x.senders))
	for i, snd := range x.senders {
		out[i] = snd.Stats()
		out[i].Target = x.targets[i]
	}
	return out
}

// redactTarget writes t with its URL's password, if any, replaced by
// "xxxxx": targets are shown and written to the trace.
func redactTarget(t push.Target) string {
	return t.Format.String() + "=" + t.URL.Redacted()
}

// hostInfo is the machine, as OpenTelemetry's host attributes name it.
func hostInfo() export.Host {
	h := export.Host{Arch: runtime.GOARCH}
	h.Name, _ = os.Hostname()
	if b, err := os.ReadFile("/etc/machine-id"); err == nil {
		h.ID = strings.TrimSpace(string(b))
	}
	return h
}

// modulePath is heapscope's module.
const modulePath = "github.com/heapscope/heapscope"

// moduleVersion is heapscope's version in the build's module information
// (the instrumentation scope's version), "" when it has none.
func moduleVersion() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	if info.Main.Path == modulePath {
		if v := info.Main.Version; v != "(devel)" {
			return v
		}
		for _, s := range info.Settings {
			if s.Key == "vcs.revision" && len(s.Value) >= 12 {
				return "rev " + s.Value[:12]
			}
		}
		return ""
	}
	for _, d := range info.Deps {
		if d.Path == modulePath {
			return d.Version
		}
	}
	return ""
}
