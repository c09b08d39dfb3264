package census

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/heapscope/heapscope/internal/proc"
)

// stopped is a process stopped for a test: every thread seized and
// interrupted from one locked OS thread (ptrace's rule), its memory read
// through /proc/PID/mem. It stands in for internal/stopped until that
// lands, and does only what the tests need.
type stopped struct {
	pid    int
	mem    *os.File
	target Target
	resume chan struct{}
	done   chan error
}

// stop stops every thread of pid. The test must call resume; a test that
// fails first resumes through Cleanup.
func stop(tb testing.TB, pid int) *stopped {
	tb.Helper()
	s := &stopped{pid: pid, resume: make(chan struct{}), done: make(chan error, 1)}
	ready := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		var threads []Thread
		seized := map[int]bool{}
		detach := func() {
			for tid := range seized {
				unix.PtraceDetach(tid)
			}
		}
		// Threads started while seizing: list again until no new one.
		for round := 0; ; round++ {
			ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
			if err != nil {
				detach()
				ready <- err
				return
			}
			grew := false
			for _, e := range ents {
				tid, _ := strconv.Atoi(e.Name())
				if tid == 0 || seized[tid] {
					continue
				}
				if err := unix.PtraceSeize(tid); err != nil {
					continue // exited
				}
				seized[tid] = true
				grew = true
				if err := unix.PtraceInterrupt(tid); err != nil {
					continue
				}
				var ws unix.WaitStatus
				if _, err := unix.Wait4(tid, &ws, unix.WALL, nil); err != nil {
					continue
				}
				var regs unix.PtraceRegs
				if err := unix.PtraceGetRegs(tid, &regs); err != nil {
					detach()
					ready <- fmt.Errorf("registers of %d: %w", tid, err)
					return
				}
				threads = append(threads, Thread{TID: tid, FSBase: regs.Fs_base})
			}
			if !grew || round > 100 {
				break
			}
		}
		s.target.Threads = threads
		ready <- nil
		<-s.resume
		detach()
		s.done <- nil
	}()
	if err := <-ready; err != nil {
		tb.Fatal(err)
	}
	mem, err := os.Open(fmt.Sprintf("/proc/%d/mem", pid))
	if err != nil {
		close(s.resume)
		tb.Fatal(err)
	}
	s.mem = mem
	maps, err := proc.ReadMaps(pid)
	if err != nil {
		s.Resume()
		tb.Fatal(err)
	}
	s.target.PID, s.target.Mem, s.target.Maps = pid, mem, maps
	tb.Cleanup(s.Resume)
	return s
}

// Resume lets the process run again; later calls do nothing.
func (s *stopped) Resume() {
	if s.resume == nil {
		return
	}
	close(s.resume)
	s.resume = nil
	<-s.done
	s.mem.Close()
}
