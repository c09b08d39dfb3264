package ebpf

import (
	"os/exec"
	"testing"
	"time"

	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/internal/testutil"
)

// TestAttachMidCall attaches to a process that is already in a tight
// malloc/free loop, detaches and attaches again, several times. A call
// whose entry was seen but whose return was not (the entry probe went live
// before the return probe, or the return probe went away first) must not
// leave its thread believing it is still inside that call: every later
// allocation would be taken for a nested one and dropped, and every free
// would look unmatched. And while only some probes are live, as they come
// and go (for milliseconds: many of churn's calls), blocks must not look
// leaked: there may be frees of blocks not seen allocated, as of any block
// from before tracing, but no allocation whose free is not seen.
func TestAttachMidCall(t *testing.T) {
	bin := testutil.MustBuild(t, "churn", testutil.Options{})
	rec := newRecorder(t)
	tr := newTracer(t, Config{}, rec)
	cmd := exec.Command(bin, "2000000000", "1")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	pid := cmd.Process.Pid
	time.Sleep(50 * time.Millisecond) // into its loop
	seen := 0
	for round := 0; round < 6; round++ {
		if err := tr.Attach(pid); err != nil {
			t.Fatal(err)
		}
		// Until it has made enough calls (a thread left inside a call
		// makes none: the wait times out), not for a fixed time, which on
		// a loaded machine is too few calls.
		for deadline := time.Now().Add(20 * time.Second); len(rec.eventsOf(pid))-seen < 4000 && time.Now().Before(deadline); {
			time.Sleep(20 * time.Millisecond)
			mustFlush(t, tr)
		}
		if err := tr.Detach(pid); err != nil {
			t.Fatal(err)
		}
		evs := rec.eventsOf(pid)[seen:]
		seen += len(evs)
		// churn frees each block right after allocating it.
		var pairs, unmatched, unfreed int
		var live uint64
		for _, e := range evs {
			switch e.Kind {
			case event.KindAlloc:
				if live != 0 {
					unfreed++
				}
				live = e.Addr
			case event.KindFree:
				if e.Addr == live {
					pairs++
				} else {
					unmatched++
				}
				live = 0
			}
		}
		t.Logf("round %d: %d pairs, %d frees unmatched, %d blocks not seen freed", round, pairs, unmatched, unfreed)
		if pairs < 1000 || unfreed > 1 {
			t.Errorf("round %d: %d pairs, %d frees of blocks not seen allocated, %d blocks not seen freed", round, pairs, unmatched, unfreed)
		}
	}
}
