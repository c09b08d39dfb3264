// Command heapscope traces the heap of Linux processes: every allocation,
// reallocation and free, with the call stack that made it, for running
// processes (attach) or a program it launches (run); and it turns the trace
// into reports.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// command is one subcommand. Each lives in its own file and registers itself.
type command struct {
	name    string
	args    string // the usage line after the name
	summary string // one line for the command list
	help    string // further text for `heapscope NAME --help`
	// setup declares the flags; run does the work with the arguments left.
	setup func(fs *flag.FlagSet) func(args []string) error
	// flagsFirst: flags end at the first argument that is not one (run:
	// the program's own flags follow it). Other commands take flags
	// anywhere, as in `heapscope report FILE --top 5`.
	flagsFirst bool
}

var commands = map[string]*command{}

// rawArgs are the running command's arguments as given, before flag
// parsing: for a command that must know whether "--" was there.
var rawArgs []string

func register(c *command) { commands[c.name] = c }

// exitError carries an exit status out of a command without printing more.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// usageError is a mistake in the command line: printed with a hint, exit 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

func main() {
	os.Exit(mainArgs(os.Args[1:], os.Stdout, os.Stderr))
}

func mainArgs(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		printUsage(stderr)
		return 2
	}
	name := args[0]
	switch name {
	case "--version", "-version", "-V":
		name, args = "version", []string{"version"}
	case "-h", "-help", "--help", "help":
		if len(args) > 1 {
			if c, ok := commands[args[1]]; ok {
				fs := newFlagSet(c, stdout)
				c.setup(fs)
				fs.Usage()
				return 0
			}
		}
		printUsage(stdout)
		return 0
	}
	c, ok := commands[name]
	if !ok {
		fmt.Fprintf(stderr, "heapscope: unknown command %q; run 'heapscope --help'\n", name)
		return 2
	}
	fs := newFlagSet(c, io.Discard)
	run := c.setup(fs)
	rest, err := parseArgs(fs, args[1:], c.flagsFirst)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(stdout)
			fs.Usage()
			return 0
		}
		msg := longFlag.ReplaceAllString(err.Error(), "flag --$1")
		if m := undefinedFlag.FindStringSubmatch(err.Error()); m != nil {
			msg = "unknown flag " + dashed(m[1])
		}
		if s := suggestFlag(fs, err); s != "" {
			msg += "; did you mean " + s + "?"
		}
		fmt.Fprintf(stderr, "heapscope %s: %s (see 'heapscope %s --help')\n", name, msg, name)
		return 2
	}
	rawArgs = args[1:]
	err = run(rest)
	var ee exitError
	var ue usageError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.code
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "heapscope %s: %v (see 'heapscope %s --help')\n", name, err, name)
		return 2
	default:
		fmt.Fprintf(stderr, "heapscope %s: %v\n", name, err)
		return 1
	}
}

// undefinedFlag finds the flag named in the flag package's error for one
// it does not know ("flag provided but not defined: -stack").
var undefinedFlag = regexp.MustCompile(`^flag provided but not defined: -+(.+)$`)

// suggestFlag returns the flag of fs closest to the unknown one err names,
// as users type it ("--stacks"), or "" when none is close: one it begins,
// or one within an edit per three letters typed.
func suggestFlag(fs *flag.FlagSet, err error) string {
	m := undefinedFlag.FindStringSubmatch(err.Error())
	if m == nil {
		return ""
	}
	typed := m[1]
	if len(typed) < 3 {
		return "" // a letter or two: anything is close
	}
	best, bestD := "", max(1, len(typed)/3)+1
	fs.VisitAll(func(f *flag.Flag) {
		d := editDistance(typed, f.Name)
		if len(typed) >= 3 && strings.HasPrefix(f.Name, typed) {
			d = min(d, 1)
		}
		if d < bestD || d == bestD && f.Name < best {
			best, bestD = f.Name, d
		}
	})
	if best == "" {
		return ""
	}
	return dashed(best)
}

// dashed writes a flag's name as users type it: two dashes for a long flag,
// one for a letter.
func dashed(name string) string {
	if len(name) == 1 {
		return "-" + name
	}
	return "--" + name
}

// editDistance is the Levenshtein distance of a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// longFlag finds a long flag named in the flag package's errors ("invalid
// value "x" for flag -mode: ..."), to write it as users type it.
var longFlag = regexp.MustCompile(`flag -([a-z][a-z-]+)`)

// parseArgs parses args with fs and returns the arguments that are not
// flags. Unless flagsFirst, flags may follow them; "--" ends the flags.
func parseArgs(fs *flag.FlagSet, args []string, flagsFirst bool) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		left := fs.Args()
		if used := len(args) - len(left); flagsFirst || len(left) == 0 || (used > 0 && args[used-1] == "--") {
			return append(pos, left...), nil
		}
		pos, args = append(pos, left[0]), left[1:]
	}
}

func newFlagSet(c *command, out io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("heapscope "+c.name, flag.ContinueOnError)
	fs.SetOutput(out)
	fs.Usage = func() {
		out := fs.Output()
		fmt.Fprintf(out, "usage: heapscope %s %s\n\n%s\n", c.name, c.args, c.summary)
		if c.help != "" {
			fmt.Fprintf(out, "\n%s\n", strings.TrimSpace(c.help))
		}
		hasFlags := false
		fs.VisitAll(func(*flag.Flag) { hasFlags = true })
		if hasFlags {
			fmt.Fprintf(out, "\nflags:\n")
			printDefaults(out, fs)
		}
	}
	return fs
}

// printDefaults is flag.PrintDefaults with the flags as users type them:
// two dashes for a long flag (--top), one for a letter (-o).
func printDefaults(out io.Writer, fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) {
		var b strings.Builder
		dash := "--"
		if len(f.Name) == 1 {
			dash = "-"
		}
		fmt.Fprintf(&b, "  %s%s", dash, f.Name)
		typ, usage := flag.UnquoteUsage(f)
		if typ != "" {
			b.WriteString(" " + typ)
		}
		b.WriteString("\n    \t")
		b.WriteString(strings.ReplaceAll(usage, "\n", "\n    \t"))
		if d := f.DefValue; d != "" && d != "0" && d != "false" && d != "0s" && !strings.Contains(usage, "(default") {
			if typ == "string" {
				d = strconv.Quote(d)
			}
			fmt.Fprintf(&b, " (default %s)", d)
		}
		fmt.Fprintln(out, b.String())
	})
}

func printUsage(w io.Writer) {
	fmt.Fprintf(w, "heapscope traces the heap of Linux processes.\n\nusage: heapscope COMMAND [flags] [args]\n\ncommands:\n")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, commands[n].summary)
	}
	fmt.Fprintf(w, "\nRun 'heapscope COMMAND --help' for a command's flags.\n")
}
