// Package tracetest replays trace files for tests. It stands apart from
// testutil, which tracefile's own tests import.
package tracetest

import (
	"testing"

	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/internal/testutil"
	"github.com/heapscope/heapscope/tracefile"
)

// Replay replays the whole trace file at path into sink, failing the test
// on an error.
func Replay(tb testing.TB, path string, sink event.Sink) {
	tb.Helper()
	r, err := tracefile.Open(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer r.Close()
	if err := r.Replay(sink, tracefile.Window{}); err != nil {
		tb.Fatal(err)
	}
}

// Notes returns the notes of the trace file at path.
func Notes(tb testing.TB, path string) *testutil.NoteSink {
	tb.Helper()
	ns := testutil.NewNoteSink()
	Replay(tb, path, ns)
	return ns
}
