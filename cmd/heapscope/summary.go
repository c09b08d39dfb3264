package main

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
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
		self := selfCommand()
		fmt.Fprintf(w, "more:     %s report %s    (or in a browser: %s serve %s)\n", self, files[0], self, files[0])
		if self != "heapscope" {
			fmt.Fprintf(w, "install:  go install github.com/heapscope/heapscope/cmd/heapscope@latest\n")
		}
	}
}

// selfCommand is how the user can run this program again: "heapscope"
// when it is the one on the PATH, else "go run ./cmd/heapscope" when it is
// a binary go run built (in the build cache's temporary folder), else its
// path.
func selfCommand() string {
	exe, err := os.Executable()
	if err != nil {
		return "heapscope"
	}
	if p, err := exec.LookPath("heapscope"); err == nil {
		if a, err := filepath.EvalSymlinks(p); err == nil {
			if b, err := filepath.EvalSymlinks(exe); err == nil && a == b {
				return "heapscope"
			}
		}
	}
	if strings.Contains(exe, string(filepath.Separator)+"go-build") {
		return "go run ./cmd/heapscope"
	}
	return exe
}
