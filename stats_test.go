package heapscope

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/internal/testutil"
	"github.com/heapscope/heapscope/internal/testutil/tracetest"
)

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
			props := Properties{FileMode: c.mode, File: path, MaxFileSize: MiB, TimeResolution: time.Nanosecond}
			s, err := Launch("file-losses-"+c.mode.String(), props, exec.Command(bin, "1000000", "1"))
			if err != nil {
				t.Fatal(err)
			}
			s.Wait()
			st := s.Stats()
			file := replayCounts(t, path)
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

// TestLaunchFollowsDescendants launches a shell that starts churn in the
// background and exits at once, as a daemon's parent does: the session
// goes on until churn has exited too, and has all of its calls.
func TestLaunchFollowsDescendants(t *testing.T) {
	bin := testutil.MustBuild(t, "churn", testutil.Options{})
	path := filepath.Join(t.TempDir(), "d.hst")
	props := Properties{File: path}
	s, err := Launch("descendants", props, exec.Command("sh", "-c", bin+" 300000 1 >/dev/null & exit 0"))
	if err != nil {
		t.Fatal(err)
	}
	s.Wait()
	if st, ok := s.ExitStatus(); st != 0 || !ok {
		t.Errorf("exit status %d (%v), want the shell's 0", st, ok)
	}
	c := replayCounts(t, path)
	for pid, exe := range c.exes {
		if strings.HasPrefix(filepath.Base(exe), "churn") {
			if c.byPID[pid] < 600_000 {
				t.Errorf("churn (pid %d): %d events, want its 600,000 calls and a few", pid, c.byPID[pid])
			}
			return
		}
	}
	t.Errorf("no churn process in the trace: %v", c.exes)
}

// traceCounts counts a trace's events, in all and per process, and keeps
// its last stats record.
type traceCounts struct {
	event.Sink
	exes  map[uint32]string
	n     uint64
	byPID map[uint32]int
	stats event.Stats
}

func (c *traceCounts) Process(p event.Process) error { c.exes[p.PID] = p.Exe; return nil }
func (c *traceCounts) Stats(s event.Stats) error     { c.stats = s; return nil }
func (c *traceCounts) Events(evs []event.Event) error {
	c.n += uint64(len(evs))
	for _, e := range evs {
		c.byPID[e.PID]++
	}
	return nil
}

func replayCounts(t *testing.T, path string) *traceCounts {
	t.Helper()
	c := &traceCounts{Sink: event.Discard, exes: map[uint32]string{}, byPID: map[uint32]int{}}
	tracetest.Replay(t, path, c)
	return c
}
