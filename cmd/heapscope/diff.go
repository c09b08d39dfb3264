package main

import (
	"flag"
	"fmt"
	"io"

	"github.com/heapscope/heapscope/report"
)

func init() {
	register(&command{
		name:    "diff",
		args:    "[flags] BASE NEW",
		summary: "compare two traces stack by stack: what changed in leaks, peak, allocations and temporaries",
		help: `
Stacks are matched by their symbolized frames (function, file and line; module
and offset where a frame has no symbol), not by address, so two runs of a
program, or two builds of it, line up; traces of either provider compare.

The text starts with the totals of both traces and their change, then lists
the sites whose counts changed, the largest change first (by default the
largest of the changes in leaked, peak and allocated bytes; --sort METRIC
orders by one of alloc_space, alloc_objects, inuse_space, inuse_objects,
temporary, peak_space). --format json writes every changed site unless --top
is given.

For a pprof profile of the difference, use 'heapscope export --base BASE NEW'.`,
		setup: func(fs *flag.FlagSet) func([]string) error {
			var lf loadFlags
			lf.register(fs)
			format := fs.String("format", "text", "text or json")
			top := fs.Int("top", 0, "changed sites to show (text: default 10; json: default all)")
			sortBy := fs.String("sort", "", "order sites by the change in this metric (default: the largest byte change)")
			var out output
			out.register(fs, "-")
			return func(args []string) error {
				if len(args) != 2 {
					return usagef("want two trace files: BASE NEW")
				}
				if *format != "text" && *format != "json" {
					return usagef("--format: want text or json, not %q", *format)
				}
				if *top < 0 {
					return usagef("--top must not be negative")
				}
				o := report.DiffOptions{Top: *top}
				if *sortBy != "" {
					m, err := report.ParseMetric(*sortBy)
					if err != nil {
						return usageError{err.Error()}
					}
					o.By = &m
				}
				d, err := lf.loadDiff(args[0], args[1])
				if err != nil {
					return err
				}
				return writeOutput(out, func(w io.Writer) error {
					if *format == "json" {
						return d.WriteJSON(w, o)
					}
					return d.WriteText(w, o)
				})
			}
		},
	})
}

// loadDiff reads the two traces, one after the other: each load keeps the
// cores busy already (decoding, the model, the symbolizer), and loading
// both at once was slower on a busy 2-core machine (see bench/RESULTS-diff.md).
func (f *loadFlags) loadDiff(base, new string) (*report.Diff, error) {
	if f.progress == nil {
		f.progress = startProgress("reading", base, new)
		defer func() { f.progress.finish(); f.progress = nil }()
	}
	b, err := f.load(base)
	if err != nil {
		return nil, fmt.Errorf("base %s: %w", base, err)
	}
	n, err := f.load(new)
	if err != nil {
		return nil, fmt.Errorf("new %s: %w", new, err)
	}
	return report.NewDiff(b, n), nil
}

// exportDiff is `export --base BASE FILE`: the pprof profile of FILE minus
// BASE.
func exportDiff(lf *loadFlags, format, base, file string, out output) error {
	if format != "pprof" {
		return usagef("--base needs --format pprof")
	}
	d, err := lf.loadDiff(base, file)
	if err != nil {
		return err
	}
	return writeOutput(out, d.WritePprof)
}
