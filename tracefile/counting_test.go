package tracefile

import (
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/heapscope/heapscope/event"
)

// TestOpenCounting: the progress function hears of every byte read, at
// least the whole file once a replay is done, and the reader closes its file.
func TestOpenCounting(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.hst")
	w, err := Create(path, testHeader(Sequential, 0), Options{})
	check(t, err)
	check(t, w.Process(event.Process{PID: 1, Time: 1}))
	for i := 0; i < 1000; i++ {
		check(t, w.Events([]event.Event{{Time: int64(2 + i), PID: 1, TID: 1, Kind: event.KindAlloc, Func: event.FuncMalloc,
			Addr: 0x1000 + uint64(i)*16, Size: 16}}))
	}
	check(t, w.Close())
	st, err := os.Stat(path)
	check(t, err)
	var n atomic.Int64
	r, err := OpenCounting(path, func(k int64) { n.Add(k) })
	check(t, err)
	check(t, r.Replay(event.Discard, Window{}))
	check(t, r.Close())
	if n.Load() < st.Size() {
		t.Errorf("read %d bytes of a %d-byte file", n.Load(), st.Size())
	}
}
