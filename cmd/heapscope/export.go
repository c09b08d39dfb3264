package main

import (
	"flag"
	"io"
	"os"

	"github.com/heapscope/heapscope/report"
	"golang.org/x/sys/unix"
)

func init() {
	register(&command{
		name:    "export",
		args:    "[flags] FILE",
		summary: "export a trace as a pprof profile, collapsed stacks or OTLP profiles",
		help: `
--format pprof writes a gzipped pprof profile with the sample types of Go heap
profiles (alloc_objects, alloc_space, inuse_objects, inuse_space; "in use"
meaning live at the end of the trace): open it with 'go tool pprof' or any
pprof viewer.

--format collapsed writes one line per stack, root first, frames joined by ';',
then the value of --metric: the input of flamegraph.pl and speedscope.
Metrics: alloc_space, alloc_objects, inuse_space, inuse_objects, temporary,
peak_space.

--pid, --exe, --suppressions and --no-default-suppressions are report's:
suppressed leaks are not "in use" (inuse_*). Without -o, a pprof profile
(binary) is not written to a terminal.


--base BASE (pprof only) writes the difference FILE minus BASE, stacks matched
by their symbolized frames as 'heapscope diff' does: what 'go tool pprof -base'
shows, with negative values where FILE has less.
` + otlpHelp,
		setup: func(fs *flag.FlagSet) func([]string) error {
			var lf loadFlags
			lf.register(fs)
			format := fs.String("format", "pprof", "pprof, collapsed or otlp")
			metric := fs.String("metric", "alloc_space", "collapsed: the value of each stack")
			var out output
			out.register(fs, "")
			base := fs.String("base", "", "pprof: write the difference from this trace (go tool pprof -base semantics)")
			return func(args []string) error {
				if len(args) != 1 {
					return usagef("want one trace file")
				}
				m, err := report.ParseMetric(*metric)
				if err != nil {
					return usageError{err.Error()}
				}
				switch *format {
				case "pprof":
					if out.path == "" && isTerminal(os.Stdout) {
						return usagef("--format pprof needs -o FILE (or -o - for standard output)")
					}
				case "collapsed":
				case "otlp":
					if *base != "" {
						return usagef("--base applies to --format pprof, not otlp")
					}
					return exportOTLP(&lf, args[0], out)
				default:
					return usagef("--format: want pprof, collapsed or otlp, not %q", *format)
				}
				if *base != "" {
					return exportDiff(&lf, *format, *base, args[0], out)
				}
				rep, err := lf.load(args[0])
				if err != nil {
					return err
				}
				return writeOutput(out, func(w io.Writer) error {
					if *format == "pprof" {
						return rep.WritePprof(w)
					}
					return rep.WriteCollapsed(w, m)
				})
			}
		},
	})
}

// isTerminal reports whether f is a terminal: no binary is written to one.
func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}
