package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
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
	go func() { done <- serve(ctx, pw, "127.0.0.1:0", trace, "", query.Options{}) }()
	url, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil || !strings.HasPrefix(url, "http://127.0.0.1:") {
		t.Fatalf("first line %q, %v", url, err)
	}
	r, err := http.Get(strings.TrimSpace(url) + "api/summary")
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
	if code, errs := runCLI(t, "serve", "--listen", "127.0.0.1:0", filepath.Join(t.TempDir(), "none.hst")); code == 0 || !strings.Contains(errs, "none.hst") {
		t.Errorf("serve of a missing file: exit %d, %q", code, errs)
	}
}
