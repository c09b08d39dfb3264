package ebpf

import (
	"os/exec"
	"testing"

	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/internal/testutil"
)

// TestThreadExitFreesIgnored launches preload_threads (20 waves of 8
// threads, each making 100 malloc/free pairs) held at its exec, as `run
// --provider ebpf` does. At each thread's exit glibc frees the thread's
// tcache and every chunk cached in it (tcache_thread_shutdown): chunks the
// program had already freed, and a block it never saw allocated. Those
// are glibc's calls, not the program's: no free may be unmatched, and every
// one of the program's 16,000 frees is counted.
func TestThreadExitFreesIgnored(t *testing.T) {
	bin := testutil.MustBuild(t, "preload_threads", testutil.Options{})
	rec := newRecorder(t)
	tr := newTracer(t, Config{}, rec)
	cmd := exec.Command(bin, "20", "8", "100")
	startHeld(t, cmd, func(pid int) error { return tr.Attach(pid, Launched()) })
	pid := cmd.Process.Pid
	cmd.Wait()
	if err := tr.ReportExit(pid, cmd.ProcessState.ExitCode(), 0); err != nil {
		t.Fatal(err)
	}
	<-tr.Done()
	if cmd.ProcessState.ExitCode() != 0 {
		t.Fatalf("workload exited with %v", cmd.ProcessState)
	}
	live := map[uint64]uint64{}
	var unmatched, frees40, frees int
	for _, e := range rec.eventsOf(pid) {
		switch e.Kind {
		case event.KindAlloc:
			live[e.Addr] = e.Size
		case event.KindRealloc:
			if e.OldAddr != 0 {
				if _, ok := live[e.OldAddr]; !ok {
					unmatched++
				}
				delete(live, e.OldAddr)
			}
			if e.Addr != 0 {
				live[e.Addr] = e.Size
			}
		case event.KindFree:
			frees++
			size, ok := live[e.Addr]
			if !ok {
				unmatched++
				continue
			}
			if size == 40 {
				frees40++
			}
			delete(live, e.Addr)
		}
	}
	t.Logf("%d frees, %d of blocks of 40 bytes, %d unmatched", frees, frees40, unmatched)
	if unmatched != 0 {
		t.Errorf("%d unmatched frees: glibc's own frees at thread exit were taken for the program's", unmatched)
	}
	if frees40 < 20*8*100 {
		t.Errorf("%d frees of the program's blocks of 40 bytes, want its %d", frees40, 20*8*100)
	}
}
