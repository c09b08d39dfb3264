package heapscope

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/heapscope/heapscope/internal/testutil"
)

// readingSession launches python3 churning the C allocator for a while (a
// trace file that takes far longer to read back than the lease
// expireWhileReading sets) and returns once it has, while it waits.
func readingSession(t *testing.T, name string) (*Session, *exec.Cmd) {
	cmd := exec.Command("/usr/bin/python3.11", "-c", "import sys, time\ndata=[]\nfor i in range(800000):\n"+
		"    data.append({'k':i,'s':str(i)*3,'l':[i,i+1,i+2]})\n    if len(data)>1000: data.pop(0)\n"+
		"print('ready', flush=True)\ntime.sleep(120)\n")
	cmd.Env = append(os.Environ(), "PYTHONMALLOC=malloc")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	// No leak check at the exit: it reads the trace back into the totals
	// (Seeded), which the lease tests must not see.
	props := Properties{File: filepath.Join(t.TempDir(), name+".hst"), FlushInterval: 100 * time.Millisecond, LeakCheck: LeakCheckOff}
	s, err := Launch(name, props, cmd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		s.Stop()
	})
	if line, _ := bufio.NewReader(stdout).ReadString('\n'); line != "ready\n" {
		t.Fatalf("workload said %q", line)
	}
	time.Sleep(time.Second) // the collector has the events
	return s, cmd
}

// expireWhileReading asks s for its totals with a short lease and no wait
// for the read-back, lets the lease expire while the trace file is read
// back, and puts the lease back.
func expireWhileReading(t *testing.T, s *Session) TopResult {
	defer func(l, w time.Duration) { topLease, readBackWait = l, w }(topLease, readBackWait)
	topLease, readBackWait = 3*time.Millisecond, 0
	r, err := s.Top(TopQuery{Client: "t"})
	if err != nil {
		t.Fatal(err)
	}
	if !r.Reading {
		t.Fatalf("first query: reading %v (%d of %d bytes): want the read-back begun", r.Reading, r.ReadBytes, r.ReadSize)
	}
	// expireTop looks every 0.5 ms.
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
	return r
}

// startReading asks s for its totals with no wait for the read-back, which
// the query must begin.
func startReading(t *testing.T, s *Session, what string) TopResult {
	t.Helper()
	defer func(w time.Duration) { readBackWait = w }(readBackWait)
	readBackWait = 0
	r, err := s.Top(TopQuery{Client: "t"})
	if err != nil {
		t.Fatal(err)
	}
	if !r.Reading {
		t.Fatalf("%s: reading %v: want a read-back begun", what, r.Reading)
	}
	return r
}

// untilRead asks s again until the read-back r reports is done, for a
// minute at most, and returns the first answer after it.
func untilRead(t *testing.T, s *Session, r TopResult) TopResult {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); r.Reading; {
		if time.Now().After(deadline) {
			t.Fatalf("still reading (%d of %d bytes) 60 s on", r.ReadBytes, r.ReadSize)
		}
		time.Sleep(20 * time.Millisecond)
		var err error
		if r, err = s.Top(TopQuery{Client: "t"}); err != nil {
			t.Fatal(err)
		}
	}
	return r
}

// TestTopLeaseExpiresWhileReading: when no client asks for the lease while
// the session reads its trace file back, the totals are dropped; a client
// that asks after the session ended gets the totals (of what the session
// has in hand: none), not the progress of the dropped read-back for ever.
func TestTopLeaseExpiresWhileReading(t *testing.T) {
	s, cmd := readingSession(t, "top-lease")
	expireWhileReading(t, s)
	cmd.Process.Kill()
	if err := s.Stop(); err != nil {
		t.Logf("stop: %v", err) // the program was killed
	}
	r, err := s.Top(TopQuery{Client: "t"})
	if err != nil {
		t.Fatal(err)
	}
	r = untilRead(t, s, r) // the session ended: no read-back to wait for
	if !r.Ended || r.Seeded {
		t.Errorf("after the session ended: ended %v, seeded %v: want ended, not seeded (no file to read back)", r.Ended, r.Seeded)
	}
}

// TestTopReadAgainAfterLease: a client that comes back after the lease
// expired during a read-back starts another; its progress counts its own
// bytes, not those the dropped one goes on reading.
func TestTopReadAgainAfterLease(t *testing.T) {
	s, _ := readingSession(t, "top-again")
	expireWhileReading(t, s)
	r := startReading(t, s, "query after the lease")
	size := r.ReadSize
	ts := &s.top
	r = untilRead(t, s, r)
	// A reader reads a few bytes twice (headers, the index): no more.
	ts.mu.Lock()
	read := ts.read.Load()
	ts.mu.Unlock()
	if read > size+size/20 {
		t.Errorf("the read-back of %d bytes counted %d", size, read)
	}
	if !r.Seeded || len(r.Sites) == 0 {
		t.Errorf("after the read-back: seeded %v, %d sites", r.Seeded, len(r.Sites))
	}
}

// TestTopEndsWhileReading: a session that ends while its trace file is read
// back still answers once that is done, with the totals of the whole
// session, read back and live.
func TestTopEndsWhileReading(t *testing.T) {
	s, cmd := readingSession(t, "top-ends")
	r := startReading(t, s, "first query")
	cmd.Process.Kill()
	if err := s.Stop(); err != nil {
		t.Logf("stop: %v", err) // the program was killed
	}
	r = untilRead(t, s, r)
	if !r.Ended || !r.Seeded || len(r.Sites) == 0 || r.Totals.Allocs < 800000 || r.Totals.Frees == 0 {
		t.Errorf("after the read-back: ended %v, seeded %v, %d sites, totals %+v: want the session's allocations (python3 made 800,000 dicts)",
			r.Ended, r.Seeded, len(r.Sites), r.Totals)
	}
}

// TestTopSeeded: a Top client that comes to a session late sees what the
// session traced before it asked (read back from the trace file), then the
// growth of top_grow's grow_heap since its previous query, sorted first.
func TestTopSeeded(t *testing.T) {
	bin := testutil.MustBuild(t, "top_grow", testutil.Options{})
	cmd := exec.Command(bin, "30")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	props := Properties{File: filepath.Join(t.TempDir(), "seed.hst"), FlushInterval: 100 * time.Millisecond}
	s, err := Launch("top-seeded", props, cmd)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Kill()
		s.Stop()
	}()
	if line, _ := bufio.NewReader(stdout).ReadString('\n'); line != "started\n" {
		t.Fatalf("workload said %q", line)
	}
	time.Sleep(1500 * time.Millisecond)
	// 200,000 B/s for 1.5 s: 300 blocks of 1000 bytes before the first query.
	// The first query starts reading them back and answers, here at once
	// (a query waits readBackWait for a short file), with how far that
	// is; the totals come once it is done.
	defer func(w time.Duration) { readBackWait = w }(readBackWait)
	readBackWait = 0
	r, err := Top("top-seeded", TopQuery{Client: "t", N: 5})
	if err != nil {
		t.Fatal(err)
	}
	if !r.Reading || r.ReadSize == 0 || r.Seeded || len(r.Sites) != 0 {
		t.Fatalf("first query: reading %v (%d of %d bytes), seeded %v, %d sites: want the read-back begun, no totals yet",
			r.Reading, r.ReadBytes, r.ReadSize, r.Seeded, len(r.Sites))
	}
	for deadline := time.Now().Add(30 * time.Second); r.Reading && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
		if r, err = Top("top-seeded", TopQuery{Client: "t", N: 5}); err != nil {
			t.Fatal(err)
		}
	}
	if !r.Seeded || len(r.Sites) == 0 || r.Sites[0].LiveBlocks < 250 || r.Sites[0].LiveBytes != 1000*r.Sites[0].LiveBlocks {
		t.Fatalf("first query: seeded %v, sites %+v: want the 1000-byte blocks of the first 1.5 s (about 300)", r.Seeded, r.Sites)
	}
	if len(r.Processes) != 1 || r.Processes[0].PID != uint32(cmd.Process.Pid) || len(r.Processes[0].Threads) != 1 || len(r.Modules) == 0 {
		t.Errorf("processes %+v, %d modules", r.Processes, len(r.Modules))
	}
	first := r.Sites[0]
	time.Sleep(time.Second)
	r, err = Top("top-seeded", TopQuery{Client: "t", N: 5, Order: TopByGrowth, Modules: r.NModules})
	if err != nil {
		t.Fatal(err)
	}
	g := float64(r.Sites[0].Growth) / (float64(r.Elapsed) / 1e9)
	if r.Sites[0].Frames[0] != first.Frames[0] || g < 180000 || g > 220000 {
		t.Errorf("growth %d B in %v (%.0f B/s) at %#x, want 200,000 B/s ±10%% at %#x", r.Sites[0].Growth, time.Duration(r.Elapsed), g, r.Sites[0].Frames[0], first.Frames[0])
	}
	if len(r.Modules) != 0 {
		t.Errorf("%d modules sent again", len(r.Modules))
	}
	// The churn site: a temporary every millisecond.
	r, err = s.Top(TopQuery{Client: "u", N: 1, Order: TopByTemporary, PID: uint32(cmd.Process.Pid), TID: uint32(cmd.Process.Pid)})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Sites) != 1 || r.Sites[0].Temporary < 1000 || r.Sites[0].TID != uint32(cmd.Process.Pid) {
		t.Errorf("by temporaries: %+v", r.Sites)
	}
	if _, err := s.Top(TopQuery{N: MaxTopSites + 1}); err == nil {
		t.Errorf("a query of %d sites was answered", MaxTopSites+1)
	}
}

// TestTopClientsBounded: a session remembers at most maxTopClients clients
// (each holds every site's live bytes: 3,000 names took 815 MB, issue 27
// #11), forgetting the one that asked least recently; one that keeps
// asking keeps its growth.
func TestTopClientsBounded(t *testing.T) {
	bin := testutil.MustBuild(t, "top_grow", testutil.Options{})
	cmd := exec.Command(bin, "30")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	s, err := Launch("top-clients", Properties{File: filepath.Join(t.TempDir(), "c.hst")}, cmd)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Kill()
		s.Stop()
	}()
	if line, _ := bufio.NewReader(stdout).ReadString('\n'); line != "started\n" {
		t.Fatalf("workload said %q", line)
	}
	defer func(w time.Duration) { readBackWait = w }(readBackWait)
	readBackWait = 0
	ask := func(name string) {
		t.Helper()
		if _, err := s.Top(TopQuery{Client: name}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 3 * maxTopClients {
		ask("steady")
		ask(fmt.Sprintf("client-%d", i))
	}
	ts := &s.top
	ts.mu.Lock()
	n, steady := len(ts.clients), ts.clients["steady"] != nil
	last := ts.clients[fmt.Sprintf("client-%d", 3*maxTopClients-1)] != nil
	ts.mu.Unlock()
	if n > maxTopClients || !steady || !last {
		t.Errorf("after %d clients: %d remembered (at most %d), the steady one %v, the last %v", 3*maxTopClients+1, n, maxTopClients, steady, last)
	}
}
