package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/heapscope/heapscope"
	"github.com/heapscope/heapscope/report"
	"github.com/heapscope/heapscope/suppress"
)

// printSummary tells, at the end of run or attach, what the session captured
// and where its trace is: the report's summary, its top leaks and peak
// consumers, and the session's counters.
func printSummary(w io.Writer, st heapscope.Status, files []string) {
	var rep *report.Report
	if len(files) == 1 {
		// Newfile and circular traces are reported file by file.
		var err error
		if rep, err = report.Load(files[0], report.LoadOptions{Suppressions: suppress.Defaults()}); err != nil {
			fmt.Fprintf(w, "heapscope: session %q ended\n", st.Name)
			fmt.Fprintf(w, "heapscope: cannot summarize %s: %v\n", files[0], err)
			printStats(w, st)
			printTrace(w, files)
			return
		}
	}
	printSummaryOf(w, st, files, rep)
}

// printSummaryOf is printSummary with the trace's report loaded (nil: none
// to show).
func printSummaryOf(w io.Writer, st heapscope.Status, files []string, rep *report.Report) {
	fmt.Fprintf(w, "heapscope: session %q ended\n", st.Name)
	if rep != nil {
		fmt.Fprintln(w)
		rep.WriteText(w, report.TextOptions{Brief: true})
	}
	printStats(w, st)
	printTrace(w, files)
}

func printTrace(w io.Writer, files []string) {
	if len(files) > 0 {
		fmt.Fprintf(w, "trace     %s\n", strings.Join(files, ", "))
		fmt.Fprintf(w, "more:     heapscope report %s\n", files[0])
	}
}
