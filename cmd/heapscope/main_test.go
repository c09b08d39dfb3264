package main

import (
	"bytes"
	"flag"
	"io"
	"slices"
	"strings"
	"testing"
)

func TestHelpListsCommands(t *testing.T) {
	var out, errb bytes.Buffer
	if code := mainArgs([]string{"--help"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	for name := range commands {
		if !strings.Contains(out.String(), "  "+name+" ") {
			t.Errorf("--help does not list %q:\n%s", name, out.String())
		}
	}
}

func TestEveryCommandHasHelp(t *testing.T) {
	for name := range commands {
		var out, errb bytes.Buffer
		if code := mainArgs([]string{name, "--help"}, &out, &errb); code != 0 {
			t.Errorf("%s --help: exit %d", name, code)
		}
		if !strings.Contains(errb.String()+out.String(), "usage: heapscope "+name) {
			t.Errorf("%s --help printed %q", name, errb.String()+out.String())
		}
	}
}

func TestUnknownCommand(t *testing.T) {
	var out, errb bytes.Buffer
	if code := mainArgs([]string{"frobnicate"}, &out, &errb); code != 2 {
		t.Errorf("exit %d, want 2", code)
	}
	if !strings.Contains(errb.String(), "unknown command") {
		t.Errorf("stderr %q", errb.String())
	}
}

func TestBadFlag(t *testing.T) {
	var out, errb bytes.Buffer
	if code := mainArgs([]string{"version", "--no-such-flag"}, &out, &errb); code != 2 {
		t.Errorf("exit %d, want 2", code)
	}
}

func TestParseArgs(t *testing.T) {
	for _, c := range []struct {
		args       []string
		flagsFirst bool
		want       []string
		top        int
	}{
		{[]string{"f.hst", "--top", "3"}, false, []string{"f.hst"}, 3},
		{[]string{"--top", "3", "a", "b", "--top", "4"}, false, []string{"a", "b"}, 4},
		{[]string{"a", "--", "--top", "5"}, false, []string{"a", "--top", "5"}, 0},
		{[]string{"--top", "2", "--", "prog", "--top", "5"}, true, []string{"prog", "--top", "5"}, 2},
		{[]string{"prog", "--top", "5"}, true, []string{"prog", "--top", "5"}, 0},
	} {
		fs := flag.NewFlagSet("x", flag.ContinueOnError)
		top := fs.Int("top", 0, "")
		got, err := parseArgs(fs, c.args, c.flagsFirst)
		if err != nil || !slices.Equal(got, c.want) || *top != c.top {
			t.Errorf("parseArgs(%q, %v) = %q, %v, top %d; want %q, top %d", c.args, c.flagsFirst, got, err, *top, c.want, c.top)
		}
	}
}

// TestUnknownFlagSuggested: a mistyped flag is answered with the flag meant
// (issue 25 item 14), and a flag like no other with none.
func TestUnknownFlagSuggested(t *testing.T) {
	for _, c := range []struct{ args, want string }{
		{"run --stack alloc -- true", "unknown flag --stack; did you mean --stacks?"},
		{"run --sampel 4KiB -- true", "unknown flag --sampel; did you mean --sample?"},
		{"report --fromm 1s x.hst", "unknown flag --fromm; did you mean --from?"},
		{"run -x -- true", "unknown flag -x (see"},
		{"run --zzzzzz -- true", "unknown flag --zzzzzz (see"},
	} {
		var stderr strings.Builder
		if code := mainArgs(strings.Fields(c.args), io.Discard, &stderr); code != 2 {
			t.Errorf("%s: exit %d, want 2", c.args, code)
		}
		if !strings.Contains(stderr.String(), c.want) {
			t.Errorf("%s: %q, want %q", c.args, stderr.String(), c.want)
		}
	}
}
