// Package suppress decides which leaks a report shows as suppressed instead
// of listing them: those named in a suppression file, in LeakSanitizer's
// format (as heaptrack reads it too), and, by default, the memory the C and
// C++ runtimes keep for the life of a process by design.
//
// A suppression file holds one rule a line:
//
//	# a comment
//	leak:PATTERN
//
// A leak is suppressed by the first rule whose PATTERN matches the function,
// the module (the file's path) or the source file of any frame of the
// leak's stack. A pattern matches a name that contains it; '*' matches any
// run of characters, a leading '^' anchors the pattern at the start of the
// name and a trailing '$' at its end, as in the sanitizers.
//
// The default rules are narrower: each looks only at the frames at the top
// of the stack that belong to one runtime library (the library that made
// the allocation), so that a program's own leak that merely passed through
// the C library (strdup, std::string) is never suppressed by them. They
// cover libstdc++'s emergency exception pool (made by one of its static
// constructors, eh_alloc.cc), stdio's buffers, the dynamic loader's own
// allocations (link maps, search paths), the C library's NSS caches and the
// static buffers of getpwnam and its kind, and its time zone and locale
// data. Suppression hides nothing: reports give the suppressed total and
// the rules that matched.
package suppress

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"

	"github.com/heapscope/heapscope/symbolize"
)

// ErrSyntax is wrapped by the errors of a suppression file that cannot be
// read as one.
var ErrSyntax = errors.New("bad suppression")

// Rule is one suppression.
type Rule struct {
	// Text is the rule as written ("leak:PATTERN"), or for a default rule
	// its name ("default:stdio").
	Text string
	// Source is where the rule comes from: "FILE:LINE", or "default".
	Source string
	// Description says, for a default rule, what the runtime keeps.
	Description string

	pattern string       // a file rule's pattern
	def     *defaultRule // a default rule's test
}

// Default reports whether r is one of the built-in rules.
func (r *Rule) Default() bool { return r.def != nil }

// Parse reads rules in LeakSanitizer's format from rd; name is the file's
// name, for Source and for errors.
func Parse(rd io.Reader, name string) ([]*Rule, error) {
	var rules []*Rule
	sc := bufio.NewScanner(rd)
	sc.Buffer(nil, 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		typ, pat, ok := strings.Cut(line, ":")
		typ, pat = strings.TrimSpace(typ), strings.TrimSpace(pat)
		switch {
		case !ok:
			return nil, fmt.Errorf("%s:%d: %q is not TYPE:PATTERN: %w", name, n, line, ErrSyntax)
		case typ != "leak":
			return nil, fmt.Errorf("%s:%d: unknown suppression type %q (heapscope reads leak:PATTERN): %w", name, n, typ, ErrSyntax)
		case pat == "":
			return nil, fmt.Errorf("%s:%d: empty pattern: %w", name, n, ErrSyntax)
		}
		rules = append(rules, &Rule{Text: "leak:" + pat, Source: fmt.Sprintf("%s:%d", name, n), pattern: pat})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading %s: %w", name, err)
	}
	return rules, nil
}

// ReadFile reads the suppression file at path.
func ReadFile(path string) ([]*Rule, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return Parse(f, path)
}

// Options configure a Matcher.
type Options struct {
	// Sysroot is prepended to module paths where a default rule reads a
	// module's file (as symbolize.Options.Sysroot).
	Sysroot string
}

// Matcher matches stacks against rules. It is not safe for concurrent use.
type Matcher struct {
	rules []*Rule
	elf   *elfCache
}

// NewMatcher returns a Matcher of rules, tried in order.
func NewMatcher(rules []*Rule, o Options) *Matcher {
	return &Matcher{rules: rules, elf: newELFCache(o.Sysroot)}
}

// Match returns the first rule that suppresses a leak of stack (innermost
// frame first, the allocator's frames removed), or nil.
func (m *Matcher) Match(stack []symbolize.Frame) *Rule {
	for _, r := range m.rules {
		if r.def != nil {
			if r.def.match(stack, m.elf) {
				return r
			}
			continue
		}
		for i := range stack {
			f := &stack[i]
			if TemplateMatch(r.pattern, f.Function) || TemplateMatch(r.pattern, f.Module) || TemplateMatch(r.pattern, f.File) {
				return r
			}
		}
	}
	return nil
}

// TemplateMatch reports whether the sanitizers' pattern templ matches s: s
// contains templ, where '*' in templ matches any run of characters, a
// leading '^' anchors it at the start of s and a trailing '$' at the end.
// An empty s matches nothing.
func TemplateMatch(templ, s string) bool {
	if s == "" {
		return false
	}
	start := strings.HasPrefix(templ, "^")
	if start {
		templ = templ[1:]
	}
	asterisk := false
	for templ != "" {
		switch templ[0] {
		case '*':
			templ = templ[1:]
			start, asterisk = false, true
			continue
		case '$':
			return s == "" || asterisk
		}
		if s == "" {
			return false
		}
		// The literal run up to the next '*' or '$'.
		end := strings.IndexAny(templ, "*$")
		if end < 0 {
			end = len(templ)
		}
		lit := templ[:end]
		i := strings.Index(s, lit)
		if i < 0 || start && i != 0 {
			return false
		}
		s, templ = s[i+len(lit):], templ[end:]
		start, asterisk = false, false
	}
	return true
}

// defaultRule suppresses what one runtime library keeps by design: a leak
// whose innermost frame is in a module that modules accepts, and where one
// of the frames at the top of the stack that are in such modules has a
// function matching one of functions, a file matching one of files, or
// (staticInit) lies in a function the module lists in .init_array (its
// static constructors, which symbols may not name).
type defaultRule struct {
	modules    func(base string) bool
	functions  []string
	files      []string
	anyFrame   bool // every function of the module matches
	staticInit bool
}

func (d *defaultRule) match(stack []symbolize.Frame, ec *elfCache) bool {
	if len(stack) == 0 || !d.modules(path.Base(stack[0].Module)) {
		return false
	}
	for i := range stack {
		f := &stack[i]
		if !d.modules(path.Base(f.Module)) {
			return false
		}
		if d.anyFrame {
			return true
		}
		for _, p := range d.functions {
			if TemplateMatch(p, f.Function) {
				return true
			}
		}
		for _, p := range d.files {
			if TemplateMatch(p, f.File) {
				return true
			}
		}
		if d.staticInit && ec.inStaticInit(f.Module, f.Offset) {
			return true
		}
	}
	return false
}

func prefixes(ps ...string) func(string) bool {
	return func(base string) bool {
		for _, p := range ps {
			if strings.HasPrefix(base, p) {
				return true
			}
		}
		return false
	}
}

var (
	isLibc      = prefixes("libc.so", "libc-")
	isLibstdcxx = prefixes("libstdc++.so")
	isLoader    = prefixes("ld-linux", "ld.so", "ld64.so")
)

// Defaults returns the built-in rules: what the C and C++ runtimes keep for
// the life of a process by design. valgrind and heaptrack instead call
// __libc_freeres and __gnu_cxx::__freeres in the traced process at its
// exit; heapscope does not change the traced program, and the eBPF provider
// could not.
func Defaults() []*Rule {
	return []*Rule{
		{
			Text: "default:libstdc++-pool", Source: "default",
			Description: "libstdc++'s emergency exception pool (eh_alloc.cc, made by a static constructor; freed only by __gnu_cxx::__freeres)",
			def: &defaultRule{modules: isLibstdcxx, staticInit: true,
				functions: []string{"(anonymous namespace)::pool::pool", "^_GLOBAL__sub_I_", "__static_initialization_and_destruction_0"},
				files:     []string{"eh_alloc.cc"}},
		},
		{
			Text: "default:stdio", Source: "default",
			Description: "stdio buffers of the C library's streams (freed only by __libc_freeres)",
			def: &defaultRule{modules: isLibc,
				functions: []string{"^_IO_file_doallocate", "^_IO_wfile_doallocate", "^_IO_doallocbuf", "^_IO_wdoallocbuf"},
				files:     []string{"libio/filedoalloc.c", "libio/wfiledoalloc.c"}},
		},
		{
			Text: "default:loader", Source: "default",
			Description: "the dynamic loader's own allocations: link maps, scopes and search paths of loaded libraries",
			def:         &defaultRule{modules: isLoader, anyFrame: true},
		},
		{
			Text: "default:nss", Source: "default",
			Description: "the C library's NSS caches (nsswitch.conf, modules) and the static results of getpwnam, getgrgid and their kind",
			def: &defaultRule{modules: isLibc,
				functions: []string{"^__nss_", "^nss_", "^global_state_allocate", "^getpw", "^getgr", "^getsp", "^gethostby", "^getservby", "^getprotoby", "^getnetby", "^getrpcby", "^__getpw", "^__getgr"},
				files:     []string{"nss/", "nss_files/"}},
		},
		{
			Text: "default:nss-modules", Source: "default",
			Description: "the caches of the NSS modules the C library loads (libnss_files and others)",
			def:         &defaultRule{modules: prefixes("libnss_"), anyFrame: true},
		},
		{
			Text: "default:tz-locale", Source: "default",
			Description: "the C library's time zone and locale data (tzset, setlocale)",
			def: &defaultRule{modules: isLibc,
				functions: []string{"^tzset", "^__tzfile_", "^__tzstring", "^__tzset", "^update_vars", "^_nl_", "^setlocale", "^__libc_setlocale", "^new_composite_name"},
				files:     []string{"time/tzset.c", "time/tzfile.c", "locale/"}},
		},
	}
}
