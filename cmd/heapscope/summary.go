package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/heapscope/heapscope"
)

// printSummary tells, at the end of run or attach, what the session captured
// and where its trace is.
func printSummary(w io.Writer, st heapscope.Status, files []string) {
	fmt.Fprintf(w, "heapscope: session %q ended\n", st.Name)
	printStats(w, st)
	if len(files) > 0 {
		fmt.Fprintf(w, "trace     %s\n", strings.Join(files, ", "))
	}
}
