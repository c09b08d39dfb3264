package heapscope

import (
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// TestForwardSignals: a SIGTERM sent to the process that launched a
// program under tracing reaches the program, which ends of it; the
// session ends with it and gives its status.
func TestForwardSignals(t *testing.T) {
	s, err := Launch("forward-signals", Properties{FileMode: RealTime}, exec.Command("/bin/sleep", "30"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	stop := s.ForwardSignals()
	defer stop()
	syscall.Kill(syscall.Getpid(), syscall.SIGTERM)
	exited, _ := s.ProgramExited()
	select {
	case <-exited:
	case <-time.After(20 * time.Second):
		t.Fatal("the program still runs 20 s after SIGTERM")
	}
	s.Wait()
	if got, _ := s.ExitStatus(); got != 128+int(syscall.SIGTERM) {
		t.Errorf("exit status %d, want %d (SIGTERM)", got, 128+int(syscall.SIGTERM))
	}
}
