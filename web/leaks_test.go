package web

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/heapscope/heapscope"
	"github.com/heapscope/heapscope/internal/testutil"
	"github.com/heapscope/heapscope/query"
)

// TestLiveLeaks: POST /api/leaks checks the followed session's program
// while it runs: scan_planted's planted classes come back, with their
// stacks symbolized; GET is the trace's verdict, none before the check and
// the check's once the trace is indexed again; another method is refused.
func TestLiveLeaks(t *testing.T) {
	cmd := exec.Command(testutil.MustBuild(t, "scan_planted", testutil.Options{}))
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	name := fmt.Sprintf("web-leaks-%d", time.Now().UnixNano())
	props := heapscope.Properties{File: filepath.Join(t.TempDir(), "l.hst"), FlushInterval: 100 * time.Millisecond, LeakCheck: heapscope.LeakCheckOff}
	s, err := heapscope.Launch(name, props, cmd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { io.WriteString(in, "go\n"); s.Wait() })
	br := bufio.NewReader(out)
	for {
		l, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("scan_planted: %v", err)
		}
		if strings.HasPrefix(l, "ready ") {
			break
		}
	}
	live, err := NewLive(name, query.Options{}, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go live.Run(ctx)
	srv := newTestServer(t, live)

	// GET is the trace's verdict: none yet (no check at exit, none asked).
	var before TraceLeaks
	getJSON(t, srv.URL+"/api/leaks", &before)
	if before.LeakCheck != nil || len(before.Lists) != 0 || before.Live.Blocks == 0 {
		t.Errorf("GET /api/leaks before a check: %+v", before)
	}
	req, _ := http.NewRequest(http.MethodPut, srv.URL+"/api/leaks", nil)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("PUT /api/leaks: %d, want 405", resp.StatusCode)
	}

	resp, err = client.Post(srv.URL+"/api/leaks?top=20", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("POST /api/leaks: %d %s", resp.StatusCode, b)
	}
	var r LeaksJSON
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		t.Fatal(err)
	}
	if len(r.Processes) != 1 {
		t.Fatalf("%+v", r)
	}
	p := r.Processes[0]
	// scan_planted's own blocks: list 0, cycle a, leaker definitely lost
	// (3032+3128+3272 bytes), and no other block of the program is.
	if p.Error != "" || p.Partial || !p.Complete || p.PausedNs <= 0 || p.Classes.DefinitelyLost.Bytes != 3032+3128+3272 {
		t.Errorf("check: %+v", p)
	}
	found := false
	for _, s := range p.Sites {
		if s.Class == "definite" && len(s.Stack) > 1 && s.Stack[0].Function == "plant" && s.Stack[1].Function == "main" {
			found = true
		}
	}
	if !found {
		t.Errorf("no definitely lost site of plant: %+v", p.Sites)
	}
	// The trace holds the verdict, indexed again: the summary of the whole
	// trace and that of the process (the filter's, the index's report)
	// give the same classes.
	lost := p.Classes.DefinitelyLost.Bytes + p.Classes.IndirectlyLost.Bytes
	var sum Summary
	for end := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		sum = Summary{}
		getJSON(t, srv.URL+"/api/summary", &sum)
		if sum.JSON != nil && sum.LeakCheck != nil || time.Now().After(end) {
			break
		}
	}
	if sum.JSON == nil || sum.LeakCheck == nil || sum.LeakCheck.Lost.Bytes != lost {
		t.Fatalf("the summary after the check: leak check %+v, want %d bytes lost", sum.LeakCheck, lost)
	}
	var one Summary
	getJSON(t, fmt.Sprintf("%s/api/summary?pid=%d", srv.URL, p.PID), &one)
	if one.LeakCheck == nil || one.LeakCheck.Lost != sum.LeakCheck.Lost || one.LeakCheck.StillReachable != sum.LeakCheck.StillReachable || one.LeakCheck.PossiblyLost != sum.LeakCheck.PossiblyLost {
		t.Errorf("the summary of pid %d: leak check %+v, the whole trace's %+v", p.PID, one.LeakCheck, sum.LeakCheck)
	}
	// The verdict went into the trace: the next index has it.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		var after TraceLeaks
		getJSON(t, srv.URL+"/api/leaks", &after)
		if lc := after.LeakCheck; lc != nil {
			if lc.DefinitelyLost.Bytes != p.Classes.DefinitelyLost.Bytes || len(after.Lists) != 4 || after.Lists[0].Class != "lost" ||
				after.Lists[0].Total != lc.Lost || len(after.Lists[0].Sites) == 0 {
				t.Errorf("GET /api/leaks after the check: %+v", after)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("GET /api/leaks: no verdict a minute after the check")
		}
	}
}

// TestTraceLeaksParams: GET /api/leaks is of the whole trace: a trace
// without a check has no verdict and its live blocks; a window, a filter or
// a bad top is a 400; a trace file (no session) cannot be checked now.
func TestTraceLeaksParams(t *testing.T) {
	x, srv := serveTrace(t, trace(t, "serve_phases"))
	var v TraceLeaks
	getJSON(t, srv.URL+"/api/leaks?top=3", &v)
	lb, lk := x.Report.Leaked()
	if v.LeakCheck != nil || v.Lists == nil || len(v.Lists) != 0 || v.Live.Bytes != lb || v.Live.Blocks != lk || v.Capped != nil {
		t.Errorf("serve_phases: %+v", v)
	}
	for _, q := range []string{"pid=1", "from_ns=10", "top=-1", "top=x"} {
		resp, err := client.Get(srv.URL + "/api/leaks?" + q)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("GET /api/leaks?%s: %d, want 400", q, resp.StatusCode)
		}
	}
	resp, err := client.Post(srv.URL+"/api/leaks", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST /api/leaks of a trace file: %d, want 405", resp.StatusCode)
	}
}
