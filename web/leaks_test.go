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
// stacks symbolized; GET is refused.
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

	resp, err := client.Get(srv.URL + "/api/leaks")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET /api/leaks: %d, want 405", resp.StatusCode)
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
}
