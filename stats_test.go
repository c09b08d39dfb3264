package heapscope

import (
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/internal/testutil"
	"github.com/heapscope/heapscope/tracefile"
)

// countSink counts the events a trace file holds.
type countSink struct {
	event.Sink
	n     uint64
	stats event.Stats
}

func (c *countSink) Events(evs []event.Event) error { c.n += uint64(len(evs)); return nil }
func (c *countSink) Stats(s event.Stats) error      { c.stats = s; return nil }

// TestFileLossesCounted fills a sequential and a circular file of 1 MB and
// checks that the events the file could not keep are lost, not delivered,
// in the session's Stats and in the file's stats record alike: delivered
// is what the file holds, and delivered + lost is every call.
func TestFileLossesCounted(t *testing.T) {
	bin := testutil.MustBuild(t, "churn", testutil.Options{})
	for _, c := range []struct {
		mode   LogFileMode
		reason event.LostReason
	}{{Sequential, event.LostFileLimit}, {Circular, event.LostOverwritten}} {
		t.Run(c.mode.String(), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "t.hst")
			props := Properties{LogFileMode: c.mode, LogFileName: path, MaximumFileSize: 1, TimeResolution: time.Nanosecond}
			s, err := Launch("file-losses-"+c.mode.String(), props, exec.Command(bin, "1000000", "1"), DefaultStacks)
			if err != nil {
				t.Fatal(err)
			}
			s.Wait()
			st := s.Stats()
			r, err := tracefile.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			file := countSink{Sink: event.Discard}
			if err := r.Replay(&file, tracefile.Window{}); err != nil {
				t.Fatal(err)
			}
			t.Logf("session: delivered %d, lost %v; file: %d events, stats delivered %d, lost %v",
				st.Delivered, st.Lost, file.n, file.stats.Delivered, file.stats.Lost)
			if st.Lost[c.reason] == 0 {
				t.Fatalf("no events lost to the %v file of 1 MB", c.mode)
			}
			if file.stats.Delivered != file.n || st.Delivered != file.n {
				t.Errorf("delivered %d (session) and %d (file's record), want the %d events in the file", st.Delivered, file.stats.Delivered, file.n)
			}
			if calls := st.Delivered + st.TotalLost(); calls < 2_000_000 || calls > 2_000_100 || file.stats.Delivered+file.stats.TotalLost() != calls {
				t.Errorf("delivered + lost: %d (session), %d (file's record), want 2,000,000 and a few", calls, file.stats.Delivered+file.stats.TotalLost())
			}
		})
	}
}
