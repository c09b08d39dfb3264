package heapscope

import (
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/heapscope/heapscope/tracefile"
)

// createWriter opens the session's trace file, under a temporary name until
// the session commits it.
func createWriter(s *Session) (traceWriter, error) {
	var props []tracefile.Property
	for _, kv := range s.props.text() {
		props = append(props, tracefile.Property{Key: kv[0], Value: kv[1]})
	}
	if s.launched {
		// traced from its first instruction: no block predates tracing
		props = append(props, tracefile.Property{Key: "launched", Value: "true"})
	}
	h := tracefile.Header{
		Session:    s.name,
		Provider:   string(s.props.Provider),
		Properties: props,
		Clock:      "CLOCK_MONOTONIC",
		MaxSize:    int64(s.props.MaxFileSize),
		SampleRate: int64(s.props.Sample),
	}
	h.Hostname, _ = os.Hostname()
	var uts unix.Utsname
	if unix.Uname(&uts) == nil {
		h.Kernel = unix.ByteSliceToString(uts.Release[:])
	}
	h.WallStart, h.MonoStart = clockPair()
	h.Mode = s.props.FileMode
	return tracefile.Create(s.props.File, h, tracefile.Options{
		FlushInterval: s.props.FlushInterval, TimeResolution: s.props.TimeResolution,
		// The path is untouched until the session has started (commit).
		Hold: true, Replace: s.props.Overwrite,
	})
}

// clockPair reads the wall clock and CLOCK_MONOTONIC as close together as it
// can, so event times (monotonic) map to wall time.
func clockPair() (time.Time, int64) {
	var ts unix.Timespec
	wall := time.Now()
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return wall, ts.Nano()
}
