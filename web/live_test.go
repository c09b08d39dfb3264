package web

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/heapscope/heapscope"
	"github.com/heapscope/heapscope/internal/testutil"
	"github.com/heapscope/heapscope/query"
)

// stepper is a running session_steps workload: it allocates on command.
type stepper struct {
	in  io.WriteCloser
	out *bufio.Reader
}

func (s *stepper) do(t *testing.T, cmd string) {
	t.Helper()
	fmt.Fprintln(s.in, cmd)
	if line, err := s.out.ReadString('\n'); err != nil || strings.TrimSpace(line) != "ok" {
		t.Fatalf("workload said %q (%v)", line, err)
	}
}

// An unknown session is a clear error.
func TestLiveUnknownSession(t *testing.T) {
	_, err := NewLive("no-such-session-heapscope-web", query.Options{}, time.Second)
	if !errors.Is(err, heapscope.ErrNotRunning) || strings.Count(err.Error(), "no-such-session-heapscope-web") != 1 {
		t.Errorf("unknown session: %v", err)
	}
}

// The page of a live session follows it without reloading: the leaks grow
// as the program allocates, and when the session ends the page says so
// and keeps its last state.
func TestPageLive(t *testing.T) {
	ctx := browser(t)
	cmd := exec.Command(testutil.MustBuild(t, "session_steps", testutil.Options{}))
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	name := fmt.Sprintf("web-live-%d", time.Now().UnixNano())
	props := heapscope.Properties{File: filepath.Join(t.TempDir(), "live.hst"), FlushInterval: 100 * time.Millisecond}
	s, err := heapscope.Launch(name, props, cmd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Stop(); cmd.Process.Kill() })
	st := &stepper{in: in, out: bufio.NewReader(out)}
	if line, err := st.out.ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("workload said %q (%v)", line, err)
	}
	st.do(t, "a 10 1000")

	live, err := NewLive(name, query.Options{}, 200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go live.Run(rctx)
	srv := newTestServer(t, live)

	leaked := func() string {
		return `document.querySelector('#summary-table td[data-k="leaked_bytes"]').getAttribute("data-v")`
	}
	waitFor := func(what, js string) {
		t.Helper()
		if _, err := chromedp.Run(ctx, chromedp.Poll[bool](js, chromedp.WithPollingTimeout(20*time.Second))); err != nil {
			t.Fatalf("waiting for %s: %v (leaked on the page: %s)", what, err, eval[string](t, ctx, leaked()))
		}
	}
	// A healthy session's file is not closed yet: no warning says it was
	// killed or ran out of disk.
	var sum Summary
	getJSON(t, srv.URL+"/api/summary", &sum)
	for _, w := range sum.Warnings {
		if strings.Contains(w, "killed") {
			t.Errorf("a running session's page warns %q", w)
		}
	}
	settle(t, ctx, visit(srv, "/"))
	do(t, ctx, chromedp.Evaluate[chromedp.Void](`window.notReloaded = true`))
	// The program's stdio buffers are live too: count from what the page
	// shows once the first 10 blocks are there.
	waitFor("the first 10000 bytes", `Number(`+leaked()+`) >= 10000`)
	first, _ := strconv.ParseUint(eval[string](t, ctx, leaked()), 10, 64)
	st.do(t, "a 5 2000")
	want := strconv.FormatUint(first+10000, 10)
	waitFor("10000 more leaked bytes", leaked()+` === "`+want+`"`)
	// Every view follows, not only the summary: the overview's leaks, and
	// the whole trace's AIFO is what is live at its end.
	waitFor("the top leak", `document.querySelector("#top-leaks tr[data-v]") !== null`)
	do(t, ctx, chromedp.Click(chromedp.ID("tab-classes")))
	waitFor("the window's classes", `(document.querySelector("#class-aifo td") || {getAttribute: () => ""}).getAttribute("data-v") === "`+want+`"`)
	screenshot(t, ctx, artefacts(t), "live")
	in.Close() // the program exits; the session ends with it
	if err := s.Wait(); err != nil {
		t.Logf("session: %v", err)
	}
	waitFor("the end of the session", `document.getElementById("live").getAttribute("data-running") === "false"`)
	if !eval[bool](t, ctx, `window.notReloaded === true`) {
		t.Error("the page reloaded")
	}
	if got := eval[string](t, ctx, leaked()); got != want {
		t.Errorf("after the end, leaked %s", got)
	}
	if st := live.State(); st.Running || st.Version < 2 {
		t.Errorf("live state %+v", st)
	}
}
