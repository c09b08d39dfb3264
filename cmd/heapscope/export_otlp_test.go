package main

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pprofile"
	"go.opentelemetry.io/collector/pdata/pprofile/pprofileotlp"

	"github.com/heapscope/heapscope/export"
	"github.com/heapscope/heapscope/export/push"
	"github.com/heapscope/heapscope/internal/collector"
	"github.com/heapscope/heapscope/internal/testutil"
	"github.com/heapscope/heapscope/internal/tracetest"
)

func readOTLP(t *testing.T, path string) pprofile.Profiles {
	t.Helper()
	b, err := os.ReadFile(path)
	rmust(t, err)
	ps, err := (&pprofile.ProtoUnmarshaler{}).UnmarshalProfiles(b)
	rmust(t, err)
	return ps
}

func profileAttrs(t *testing.T, ps pprofile.Profiles) map[string]any {
	t.Helper()
	d := ps.Dictionary()
	prof := ps.ResourceProfiles().At(0).ScopeProfiles().At(0).Profiles().At(0)
	m, err := pprofile.FromAttributeIndices(d.AttributeTable(), prof, d)
	rmust(t, err)
	return m.AsRaw()
}

// TestExportOTLP exports a real trace of report_known: the per-function
// totals and leaks are the workload's.
func TestExportOTLP(t *testing.T) {
	bin := testutil.MustBuild(t, "report_known", testutil.Options{})
	dir := t.TempDir()
	trace := filepath.Join(dir, "known.hst")
	tracetest.Record(t, trace, bin, "50")
	out := filepath.Join(dir, "out.pb")
	if code, errs := runCLI(t, "export", "--format", "otlp", trace, "-o", out); code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	fi, err := os.Stat(out)
	rmust(t, err)
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", fi.Mode().Perm())
	}
	ps := readOTLP(t, out)
	totals, err := collector.Totals(ps)
	rmust(t, err)
	if len(totals) != 1 {
		t.Fatalf("%d processes", len(totals))
	}
	for _, byType := range totals {
		for typ, want := range map[string]map[string]int64{
			"alloc_space":   {"leak_site": 3000, "peak_site": 100000, "temp_site": 3200, "grow_site": 5000},
			"inuse_space":   {"leak_site": 3000, "calloc_site": 1024, "peak_site": 0},
			"inuse_objects": {"leak_site": 3, "calloc_site": 1},
		} {
			for fn, v := range want {
				if byType[typ][fn] != v {
					t.Errorf("%s of %s: %d, want %d", typ, fn, byType[typ][fn], v)
				}
			}
		}
	}
	raw := ps.ResourceProfiles().At(0).Resource().Attributes().AsRaw()
	// The file is the body of a POST to a collector's profiles endpoint:
	// a real collector takes it and writes the same totals.
	c := collector.Start(t)
	body, err := os.ReadFile(out)
	rmust(t, err)
	req, err := http.NewRequest(http.MethodPost, "http://"+c.HTTP+push.ProfilesPath, bytes.NewReader(body))
	rmust(t, err)
	req.Header.Set("Content-Type", "application/x-protobuf")
	req.Header.Set(pprofileotlp.DevelopmentVersionHeader, pprofileotlp.DevelopmentVersion)
	resp, err := http.DefaultClient.Do(req)
	rmust(t, err)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("the collector answered %s", resp.Status)
	}
	ms, err := c.WaitMessages(context.Background(), 1, 30*time.Second)
	rmust(t, err)
	got, err := collector.Totals(ms[0])
	rmust(t, err)
	if !reflect.DeepEqual(got, totals) {
		t.Errorf("the collector wrote %v, the file holds %v", got, totals)
	}

	// The trace names no host (tracetest's header has none): host.name
	// is left out rather than taken from the machine that exports.
	if raw["process.executable.path"] != bin || raw["host.name"] != nil || raw["host.arch"] != "amd64" {
		t.Errorf("resource %v", raw)
	}
}

// TestExportOTLPWindow: --from/--to give the window's allocations and
// what it left live; the session's lost events are an attribute that says
// it covers more than the window.
func TestExportOTLPWindow(t *testing.T) {
	trace := synthTrace(t)
	dir := t.TempDir()
	whole, win := filepath.Join(dir, "whole.pb"), filepath.Join(dir, "win.pb")
	for _, c := range [][]string{{"export", "--format", "otlp", trace, "-o", whole},
		{"export", "--format", "otlp", "--from", "500ms", "--to", "2s", trace, "-o", win}} {
		if code, errs := runCLI(t, c...); code != 0 {
			t.Fatalf("%v: exit %d: %s", c, code, errs)
		}
	}
	sum := func(ps pprofile.Profiles, k int) (n int64) {
		prof := ps.ResourceProfiles().At(0).ScopeProfiles().At(0).Profiles().At(k)
		for i := 0; i < prof.Samples().Len(); i++ {
			n += prof.Samples().At(i).Values().At(0)
		}
		return n
	}
	w, x := readOTLP(t, whole), readOTLP(t, win)
	if a, l := sum(w, 0), sum(w, 3); a != 1005 || l != 500 {
		t.Errorf("whole trace: %d allocations, %d bytes live; want 1005, 500", a, l)
	}
	if a, l := sum(x, 0), sum(x, 3); a != 505 || l != 500 {
		t.Errorf("window: %d allocations, %d bytes live; want 505, 500", a, l)
	}
	if a := profileAttrs(t, w); a[export.AttrLostEvents] != int64(3) || a[export.AttrLostFrom] != nil {
		t.Errorf("whole trace attributes %v", a)
	}
	if a := profileAttrs(t, x); a[export.AttrLostEvents] != int64(3) || a[export.AttrLostFrom] == nil {
		t.Errorf("window attributes %v", a)
	}
}

// TestExportOTLPFile: the output replaces a symbolic link at its name
// without following it, refuses a name that is not a regular file, and a
// usage mistake leaves nothing.
func TestExportOTLPFile(t *testing.T) {
	trace := synthTrace(t)
	dir := t.TempDir()
	victim := filepath.Join(dir, "victim")
	rmust(t, os.WriteFile(victim, []byte("keep"), 0o600))
	link := filepath.Join(dir, "link.pb")
	rmust(t, os.Symlink(victim, link))
	if code, errs := runCLI(t, "export", "--format", "otlp", trace, "-o", link); code == 0 {
		t.Errorf("wrote over a symbolic link: %s", errs)
	}
	if b, _ := os.ReadFile(victim); string(b) != "keep" {
		t.Errorf("the link's target was written: %q", b)
	}
	if code, _ := runCLI(t, "export", "--format", "otlp", trace, "-o", dir); code == 0 {
		t.Error("wrote over a directory")
	}
	for _, c := range [][]string{
		{"export", "--format", "otlp", trace},
		{"export", "--format", "otlp", "--base", trace, trace, "-o", filepath.Join(dir, "x")},
		{"export", "--format", "otlp", "--suppressions", victim, trace, "-o", filepath.Join(dir, "x")},
	} {
		if code, _ := runCLI(t, c...); code != 2 {
			t.Errorf("%v: exit %d, want 2", c, code)
		}
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 2 {
		t.Errorf("left behind: %v", ents)
	}
}
