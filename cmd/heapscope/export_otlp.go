package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"

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
func exportOTLP(lf *loadFlags, path, out string) error {
	if len(lf.suppressions) > 0 {
		return usagef("--suppressions does not apply to --format otlp (inuse_* is everything live)")
	}
	if out == "" || out == "-" {
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
	return writeNew(out, func(w io.Writer) error {
		_, err := w.Write(b)
		return err
	})
}

// writeNew writes a file as the trace files are written: a new file, mode
// 0600, created O_EXCL|O_NOFOLLOW under a temporary name in the target's
// folder and renamed into place once whole, so that a failed write leaves
// nothing and a symbolic link at the name is replaced, never followed. A
// file at the name is replaced only if it is a regular file of this user's.
//
// TODO(lead): switch to the shared safe-file helper (internal/safefile,
// branch r5-websec) when it lands.
func writeNew(path string, write func(io.Writer) error) error {
	if fi, err := os.Lstat(path); err == nil {
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !fi.Mode().IsRegular() || !ok || int(st.Uid) != os.Geteuid() {
			return fmt.Errorf("%s exists and is not a regular file of yours: not replaced", path)
		}
	}
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	var f *os.File
	var tmp string
	for i := 0; ; i++ {
		tmp = filepath.Join(dir, fmt.Sprintf(".%s.heapscope-%d-%d", base, os.Getpid(), i))
		fd, err := unix.Open(tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if err == unix.EEXIST && i < 100 {
			continue
		}
		if err != nil {
			return &os.PathError{Op: "create", Path: tmp, Err: err}
		}
		f = os.NewFile(uintptr(fd), tmp)
		break
	}
	err := write(f)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
	}
	return err
}
