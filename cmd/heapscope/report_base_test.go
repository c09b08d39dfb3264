package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/heapscope/heapscope/internal/testutil"
	"github.com/heapscope/heapscope/report"
)

// report --base is the report of the new trace and `heapscope diff`'s
// answer: in JSON, the report's document with the diff's as "diff"; in
// text, the report's text and then the diff's.
func TestReportBase(t *testing.T) {
	t.Cleanup(testutil.Cleanup)
	base, new := diffTraces(t)
	dir := filepath.Dir(base)
	run := func(name string, args ...string) []byte {
		t.Helper()
		out := filepath.Join(dir, name)
		if code, errs := runCLI(t, append(args, "-o", out)...); code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errs)
		}
		b, err := os.ReadFile(out)
		rmust(t, err)
		return b
	}

	var got struct {
		report.JSON
		Diff *report.DiffJSON `json:"diff"`
	}
	rmust(t, json.Unmarshal(run("both.json", "report", "--format", "json", "--base", base, new), &got))
	var rep report.JSON
	rmust(t, json.Unmarshal(run("report.json", "report", "--format", "json", new), &rep))
	var diff report.DiffJSON
	rmust(t, json.Unmarshal(run("diff.json", "diff", "--format", "json", base, new), &diff))
	if got.Diff == nil {
		t.Fatal("report --base --format json has no diff")
	}
	if !reflect.DeepEqual(*got.Diff, diff) {
		t.Errorf("report --base's diff %+v, heapscope diff's %+v", got.Diff.Change, diff.Change)
	}
	if want := (report.Delta{LeakedBytes: 3000, LeakedBlocks: 3, Bytes: 3000, Calls: 3}); got.Diff.Change != want {
		t.Errorf("change %+v, want %+v", got.Diff.Change, want)
	}
	if !reflect.DeepEqual(got.Summary, rep.Summary) || len(got.Leaks) != len(rep.Leaks) {
		t.Errorf("report --base's report differs from report's: %+v, %+v", got.Summary, rep.Summary)
	}

	text := string(run("both.txt", "report", "--base", base, new))
	want := string(run("report.txt", "report", new)) + "\n" + string(run("diff.txt", "diff", base, new))
	if text != want {
		t.Errorf("report --base's text:\n%s\nwant the report's and then the diff's:\n%s", text, want)
	}
	if code, _ := runCLI(t, "report", "--format", "html", "--base", base, new); code != 2 {
		t.Errorf("report --format html --base: exit %d, want a usage error (2)", code)
	}
}
