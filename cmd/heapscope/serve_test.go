package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/heapscope/heapscope/internal/testutil"
	"github.com/heapscope/heapscope/internal/tracetest"
	"github.com/heapscope/heapscope/query"
)

// serve prints the URL as its first line, answers there, and ends when its
// context does; a port in use is a clear error, before the trace is read.
func TestServe(t *testing.T) {
	t.Cleanup(testutil.Cleanup)
	bin := testutil.MustBuild(t, "report_known", testutil.Options{})
	trace := filepath.Join(t.TempDir(), "known.hst")
	tracetest.Record(t, trace, bin)

	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() { done <- serve(ctx, pw, serveFlags{listen: "127.0.0.1:0"}, trace, "", query.Options{}) }()
	url, err := bufio.NewReader(pr).ReadString('\n')
	base, token, _ := strings.Cut(strings.TrimSpace(url), "?token=")
	if err != nil || !strings.HasPrefix(url, "http://127.0.0.1:") || len(token) < 32 {
		t.Fatalf("first line %q, %v: want the URL with a token", url, err)
	}
	if r, err := http.Get(base + "api/summary"); err != nil || r.StatusCode != http.StatusUnauthorized {
		t.Fatalf("the API without the token: %v, %v", r.Status, err)
	}
	req, _ := http.NewRequest(http.MethodGet, base+"api/summary", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	r, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var sum struct {
		Summary struct {
			LeakedBytes uint64 `json:"leaked_bytes"`
		}
	}
	err = json.NewDecoder(r.Body).Decode(&sum)
	r.Body.Close()
	if err != nil || sum.Summary.LeakedBytes != 4024 {
		t.Errorf("summary %+v, %v", sum, err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("serve after Ctrl-C: %v", err)
	}

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	code, errs := runCLI(t, "serve", "--listen", l.Addr().String(), trace)
	if code == 0 || !strings.Contains(errs, "address already in use") || !strings.Contains(errs, l.Addr().String()) {
		t.Errorf("serve on a port in use: exit %d, %q", code, errs)
	}
	// Other machines reach 0.0.0.0: only with --allow-remote, and a warning.
	if code, errs := runCLI(t, "serve", "--listen", "0.0.0.0:0", trace); code == 0 || !strings.Contains(errs, "--allow-remote") {
		t.Errorf("serve --listen 0.0.0.0:0: exit %d, %q; want a refusal naming --allow-remote", code, errs)
	}
	remote := cli(t, "serve", "--allow-remote", "--listen", "0.0.0.0:0", trace)
	var remoteErr testutil.SyncBuffer
	remote.Stderr = &remoteErr
	rout, _ := remote.StdoutPipe()
	must(t, remote.Start())
	line, _ := bufio.NewReader(rout).ReadString('\n')
	remote.Process.Signal(os.Interrupt)
	remote.Wait()
	if !strings.Contains(line, "?token=") || !strings.Contains(remoteErr.String(), "warning: serving on") ||
		!strings.Contains(remoteErr.String(), "other machines can reach") {
		t.Errorf("serve --allow-remote --listen 0.0.0.0:0: printed %q, warned %q", line, remoteErr.String())
	}
	if code, errs := runCLI(t, "serve", "--listen", "127.0.0.1:0", filepath.Join(t.TempDir(), "none.hst")); code == 0 || !strings.Contains(errs, "none.hst") {
		t.Errorf("serve of a missing file: exit %d, %q", code, errs)
	}
	if code, errs := runCLI(t, "serve", "--session", "no-such-session-heapscope-cmd"); code == 0 || !strings.Contains(errs, "no-such-session-heapscope-cmd") {
		t.Errorf("serve of an unknown session: exit %d, %q", code, errs)
	}
}

// report --format html writes one page holding the trace's answers.
func TestReportHTML(t *testing.T) {
	t.Cleanup(testutil.Cleanup)
	bin := testutil.MustBuild(t, "report_known", testutil.Options{})
	dir := t.TempDir()
	trace := filepath.Join(dir, "known.hst")
	tracetest.Record(t, trace, bin)
	out := filepath.Join(dir, "known.html")
	if code, errs := runCLI(t, "report", "--format", "html", "-o", out, trace); code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if s := string(b); !strings.Contains(s, "window.HEAPSCOPE_DATA") || !strings.Contains(s, `"leaked_bytes":4024`) || strings.Contains(s, `src="app.js"`) {
		t.Errorf("the page lacks its data or its script (%d bytes)", len(b))
	}
	if code, _ := runCLI(t, "report", "--format", "html", "--from", "1ms", "-o", out, trace); code != 2 {
		t.Errorf("html with a window: exit %d, want a usage error", code)
	}
}

// report --format html (and serve, through the same flags) honors report's
// filters: the suppressions (the page's summary counts the runtime's leaks
// of report_runtime as suppressed, as report's JSON does, and not with
// --no-default-suppressions) and --exe (the shim's trace, one process).
func TestReportHTMLFilters(t *testing.T) {
	t.Cleanup(testutil.Cleanup)
	dir := t.TempDir()
	html := func(args ...string) string {
		t.Helper()
		out := filepath.Join(dir, "r.html")
		if code, errs := runCLI(t, append([]string{"report", "--format", "html", "-o", out}, args...)...); code != 0 {
			t.Fatalf("report --format html %q: exit %d: %s", args, code, errs)
		}
		b, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	trace := runtimeTrace(t, dir)
	want := reportJSON(t, trace).Summary
	if want.SuppressedBytes == 0 {
		t.Fatal("report_runtime: report suppressed nothing")
	}
	sup := fmt.Sprintf(`"suppressed_bytes":%d,`, want.SuppressedBytes)
	if s := html(trace); !strings.Contains(s, sup) || !strings.Contains(s, fmt.Sprintf(`"leaked_bytes":%d,`, want.LeakedBytes)) {
		t.Errorf("the page's summary lacks %s and leaked_bytes %d", sup, want.LeakedBytes)
	}
	if s := html("--no-default-suppressions", trace); strings.Contains(s, sup) || !strings.Contains(s, `"suppressed_bytes":0,`) {
		t.Errorf("--no-default-suppressions: the page still suppresses")
	}

	known := testutil.MustBuild(t, "report_known", testutil.Options{})
	shim := testutil.MustBuild(t, "report_shim", testutil.Options{})
	strace := traceRun(t, dir, "shim.hst", shim, known)
	shimExe, knownExe := `"exe":"`+shim+`"`, `"exe":"`+known+`"`
	if s := html(strace); !strings.Contains(s, shimExe) || !strings.Contains(s, knownExe) {
		t.Errorf("the shim's page lacks a process: %s, %s", shimExe, knownExe)
	}
	if s := html("--exe", filepath.Base(known), strace); strings.Contains(s, shimExe) || !strings.Contains(s, knownExe) {
		t.Errorf("--exe %s: the page has the shim, or lacks the workload", filepath.Base(known))
	}
	if code, errs := runCLI(t, "report", "--format", "html", "--exe", "no-such-program", "-o", filepath.Join(dir, "x.html"), strace); code == 0 || !strings.Contains(errs, "no such process") {
		t.Errorf("--exe of nothing: exit %d, %q", code, errs)
	}
}
