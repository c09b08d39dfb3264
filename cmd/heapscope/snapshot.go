package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/heapscope/heapscope"
	"github.com/heapscope/heapscope/internal/proc"
	"github.com/heapscope/heapscope/report"
)

func init() {
	register(&command{
		name:    "snapshot",
		args:    "PID [-o FILE] [--scan]",
		summary: "take a census of a running process's heap into a trace file (glibc; needs root or ptrace rights)",
		help: `
Stops the process a moment, reads its heap (glibc's malloc: every arena, the
mmapped chunks, the tcaches and bins; libc6-dbg must be installed), lets it
go, and writes a trace file holding that census: every block live (with
its usable size), what the blocks are (size class, C++ class by vtable,
strings), and the process's RSS explained. report, serve and info read it
as any trace; all its blocks were allocated before the trace. --scan also
scans the heap in the same stop for reachability and who holds each kind of
block (a longer pause).`,
		setup: func(fs *flag.FlagSet) func([]string) error {
			out := fs.String("o", "", "trace file (default heapscope.PROGRAM.PID.snapshot.hst)")
			scan := fs.Bool("scan", false, "also scan the heap for reachability and holders, in the same stop")
			overwrite := fs.Bool("overwrite", false, "replace an existing output that is a symbolic link (the link, never its target) or another user's file")
			quiet := fs.Bool("q", false, "print nothing but errors")
			return func(args []string) error {
				if len(args) != 1 {
					return usagef("takes one PID")
				}
				pid, err := strconv.Atoi(args[0])
				if err != nil || pid <= 0 {
					return usagef("%q is not a PID", args[0])
				}
				file := *out
				if file == "" {
					program := "pid"
					if exe, err := proc.Exe(pid); err == nil {
						program = filepath.Base(exe)
					}
					file = fmt.Sprintf("heapscope.%s.%d.snapshot.hst", program, pid)
				}
				r, err := heapscope.Snapshot(pid, heapscope.SnapshotOptions{File: file, Overwrite: *overwrite, Scan: *scan})
				if err != nil {
					return err
				}
				if !*quiet {
					printCensuses(os.Stderr, []heapscope.CensusResult{r})
					fmt.Fprintf(os.Stderr, "snapshot  %s\nmore:     heapscope report %s\n", file, file)
				}
				return nil
			}
		},
	})
}

// printCensuses says what the censuses at attach found, a line each, and
// why a process had none.
func printCensuses(w io.Writer, rs []heapscope.CensusResult) {
	for _, r := range rs {
		if !r.Taken {
			fmt.Fprintf(w, "heapscope: pid %d: %s\n", r.PID, r.Warning)
			continue
		}
		scan := ""
		if r.Scanned {
			scan = ", scanned"
		}
		fmt.Fprintf(w, "heapscope: census of pid %d: %s blocks, %s live (the process stopped %v%s; %v in all)\n",
			r.PID, countText(r.Blocks), report.FormatBytes(r.Bytes), r.Paused.Round(time.Microsecond), scan, r.Took.Round(time.Millisecond))
		if r.Warning != "" {
			fmt.Fprintf(w, "heapscope: pid %d: %s\n", r.PID, r.Warning)
		}
	}
}

// countText writes n with thousands separators.
func countText(n uint64) string { return infoCount(n) }

// isPID reports whether arg names a running process rather than a file: a
// number that is no file's name.
func isPID(arg string) (int, bool) {
	pid, err := strconv.Atoi(arg)
	if err != nil || pid <= 0 {
		return 0, false
	}
	if _, err := os.Stat(arg); !errors.Is(err, os.ErrNotExist) {
		return 0, false
	}
	return pid, true
}
