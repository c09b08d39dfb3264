package heapscope

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// TestTopLeaseExpiresWhileReading: when no client asks for the lease while
// the session reads its trace file back, the totals are dropped; a client
// that asks after the session ended gets the totals (of what the session
// has in hand: none), not the progress of the dropped read-back for ever.
func TestTopLeaseExpiresWhileReading(t *testing.T) {
	// python3 churns the C allocator for a while (a trace file of tens of
	// MB, which takes far longer to read back than the lease below), then
	// says so and waits.
	cmd := exec.Command("/usr/bin/python3.11", "-c", "import sys, time\ndata=[]\nfor i in range(800000):\n"+
		"    data.append({'k':i,'s':str(i)*3,'l':[i,i+1,i+2]})\n    if len(data)>1000: data.pop(0)\n"+
		"print('ready', flush=True)\ntime.sleep(120)\n")
	cmd.Env = append(os.Environ(), "PYTHONMALLOC=malloc")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	s, err := Launch("top-lease", Properties{File: filepath.Join(t.TempDir(), "lease.hst"), FlushInterval: 100 * time.Millisecond}, cmd)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Kill()
		s.Stop()
	}()
	if line, _ := bufio.NewReader(stdout).ReadString('\n'); line != "ready\n" {
		t.Fatalf("workload said %q", line)
	}
	time.Sleep(time.Second) // the collector has the events
	defer func(l, w time.Duration) { topLease, readBackWait = l, w }(topLease, readBackWait)
	topLease, readBackWait = 12*time.Millisecond, 0
	r, err := s.Top(TopQuery{Client: "t"})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("reading %d bytes back", r.ReadSize)
	if !r.Reading {
		t.Fatalf("first query: reading %v (%d of %d bytes): want the read-back begun", r.Reading, r.ReadBytes, r.ReadSize)
	}
	// The lease expires (expireTop looks every 2 ms) while the file is
	// read back.
	ts := &s.top
	for on, reading := true, true; on; {
		time.Sleep(2 * time.Millisecond)
		ts.mu.Lock()
		on, reading = ts.on, ts.reading
		ts.mu.Unlock()
		if !on && !reading {
			t.Fatalf("the %d-byte trace file was read back before the lease expired: the case is not made", r.ReadSize)
		}
	}
	t.Logf("lease expired with %d of %d bytes read", ts.read.Load(), r.ReadSize)
	cmd.Process.Kill()
	if err := s.Stop(); err != nil {
		t.Logf("stop: %v", err) // the program was killed
	}
	topLease = 30 * time.Second
	for deadline := time.Now().Add(30 * time.Second); ; {
		if r, err = s.Top(TopQuery{Client: "t"}); err != nil {
			t.Fatal(err)
		}
		if !r.Reading {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the session ended: still reading (%d of %d bytes) 30 s on", r.ReadBytes, r.ReadSize)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !r.Ended || r.Seeded {
		t.Errorf("after the session ended: ended %v, seeded %v: want ended, not seeded (no file to read back)", r.Ended, r.Seeded)
	}
}
