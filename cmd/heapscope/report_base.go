package main

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/heapscope/heapscope/report"
)

// reportWithBase is `report --format json --base`: the JSON report with
// the diff against the base as one more member.
type reportWithBase struct {
	*report.JSON
	Diff *report.DiffJSON `json:"diff"`
}

// writeReportWithBase is `report --base BASE FILE`: FILE's report, then
// its diff against BASE (report.NewDiff, as `heapscope diff BASE FILE`).
func writeReportWithBase(lf *loadFlags, base, file, format string, top int, fullNames bool, out output) error {
	d, err := lf.loadDiff(base, file)
	if err != nil {
		return err
	}
	o := report.DiffOptions{Top: top}
	return writeOutput(out, func(w io.Writer) error {
		if format == "json" {
			e := json.NewEncoder(w)
			e.SetIndent("", "  ")
			return e.Encode(reportWithBase{JSON: d.New.Document(top), Diff: d.Document(o)})
		}
		if err := d.New.WriteText(w, report.TextOptions{Top: top, FullNames: fullNames}); err != nil {
			return err
		}
		if _, err := fmt.Fprintln(w); err != nil {
			return err
		}
		return d.WriteText(w, o)
	})
}
