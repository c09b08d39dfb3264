package main

import (
	"io"
	"runtime"

	"github.com/heapscope/heapscope/export"
	"github.com/heapscope/heapscope/symbolize"
	"github.com/heapscope/heapscope/tracefile"
)

// otlpHelp is export's help for --format otlp.
var otlpHelp = `
--format otlp writes one OTLP profiles message (an ExportProfilesServiceRequest
in protobuf, the body of a POST to a collector's /v1development/profiles) for
the whole trace, or the window --from/--to: per process a resource with
OpenTelemetry's process and host attributes, and four profiles,
alloc_objects and alloc_space (the window's allocations), inuse_objects and
inuse_space (live at its end). OTLP profiles are an alpha signal
(v1development): heapscope encodes them with the pdata of OpenTelemetry
Collector ` + export.CollectorRelease + `, and a collector of another release may not read
them. inuse_* is everything live: --suppressions does not apply. A sampled
trace's values are estimates, marked so (heapscope.estimated); the session's
lost events are attributes (heapscope.lost_events). Needs -o.`

// exportOTLP writes the OTLP profiles message of the trace at path.
func exportOTLP(lf *loadFlags, path string, out output) error {
	if len(lf.suppressions) > 0 {
		return usagef("--suppressions does not apply to --format otlp (inuse_* is everything live)")
	}
	if out.path == "" || out.path == "-" {
		return usagef("--format otlp needs -o FILE")
	}
	host := export.Host{Arch: runtime.GOARCH}
	if r, err := tracefile.Open(path); err == nil {
		host.Name = r.Header().Hostname
		r.Close()
	}
	rep, err := lf.load(path)
	if err != nil {
		return err
	}
	iv := export.FromProfile(rep.Profile, export.Clock{MonoStart: rep.Trace.Start, WallStart: rep.Trace.WallStart}, host)
	b, err := export.MarshalOTLP(iv, export.Options{Resolver: rep.Resolver(), Trim: symbolize.TrimAllocator, Version: buildVersion()})
	if err != nil {
		return err
	}
	return writeOutput(out, func(w io.Writer) error {
		_, err := w.Write(b)
		return err
	})
}
