package suppress

import (
	"errors"
	"strings"
	"testing"

	"github.com/heapscope/heapscope/symbolize"
)

func TestTemplateMatch(t *testing.T) {
	for _, c := range []struct {
		templ, s string
		want     bool
	}{
		{"foo", "foo", true},
		{"foo", "xfoox", true},
		{"foo", "fo", false},
		{"foo", "", false},
		{"^foo", "foobar", true},
		{"^foo", "xfoo", false},
		{"foo$", "xfoo", true},
		{"foo$", "foox", false},
		{"^foo$", "foo", true},
		{"f*o", "fxxxo", true},
		{"f*o", "of", false},
		{"^std::*::_M_mutate$", "std::__cxx11::basic_string<char>::_M_mutate", true},
		{"libfoo.so", "/usr/lib/libfoo.so.1", true},
		{"*", "anything", true},
		{"a*$", "abc", true},
	} {
		if got := TemplateMatch(c.templ, c.s); got != c.want {
			t.Errorf("TemplateMatch(%q, %q) = %v, want %v", c.templ, c.s, got, c.want)
		}
	}
}

func TestParse(t *testing.T) {
	rules, err := Parse(strings.NewReader("# comment\n\n  leak:own_leak  \nleak:libfoo.so\n"), "supp.txt")
	if err != nil {
		t.Fatal(err)
	}
	if len(rules) != 2 || rules[0].Text != "leak:own_leak" || rules[0].Source != "supp.txt:3" || rules[1].Source != "supp.txt:4" {
		t.Fatalf("rules %+v", rules)
	}
	for _, bad := range []string{"leak\n", "race:foo\n", "leak:\n"} {
		_, err := Parse(strings.NewReader("# x\n"+bad), "f")
		if !errors.Is(err, ErrSyntax) || !strings.Contains(err.Error(), "f:2") {
			t.Errorf("Parse(%q): %v; want ErrSyntax at f:2", bad, err)
		}
	}
}

func TestMatch(t *testing.T) {
	rules, err := Parse(strings.NewReader("leak:^helper$\nleak:widget.c\nleak:libplugin\n"), "s")
	if err != nil {
		t.Fatal(err)
	}
	m := NewMatcher(append(rules, Defaults()...), Options{})
	libc := "/lib/x86_64-linux-gnu/libc.so.6"
	for _, c := range []struct {
		stack []symbolize.Frame
		want  string
	}{
		{[]symbolize.Frame{{Function: "own", Module: "/bin/p"}, {Function: "helper", Module: "/bin/p"}}, "leak:^helper$"},
		{[]symbolize.Frame{{Function: "helper2", Module: "/bin/p"}}, ""},
		{[]symbolize.Frame{{Function: "f", File: "/src/widget.c", Module: "/bin/p"}}, "leak:widget.c"},
		{[]symbolize.Frame{{Module: "/usr/lib/libplugin.so", Offset: 0x10}}, "leak:libplugin"},
		{[]symbolize.Frame{{Function: "_IO_file_doallocate", Module: libc}, {Function: "main", Module: "/bin/p"}}, "default:stdio"},
		{[]symbolize.Frame{{Function: "__nss_module_allocate", Module: libc}}, "default:nss"},
		{[]symbolize.Frame{{Function: "_dl_map_object_deps", Module: "/lib64/ld-linux-x86-64.so.2"}}, "default:loader"},
		// A program's own leak through the C library is not the runtime's.
		{[]symbolize.Frame{{Function: "__strdup", Module: libc}, {Function: "main", Module: "/bin/p"}}, ""},
		{[]symbolize.Frame{{Function: "main", Module: "/bin/p"}, {Function: "_IO_file_doallocate", Module: libc}}, ""},
		{nil, ""},
	} {
		got := ""
		if r := m.Match(c.stack); r != nil {
			got = r.Text
		}
		if got != c.want {
			t.Errorf("Match(%+v) = %q, want %q", c.stack, got, c.want)
		}
	}
}

// TestFDEStartsRejectsJunk: a damaged .eh_frame_hdr gives nothing, never a
// panic.
func TestFDEStartsRejectsJunk(t *testing.T) {
	for _, b := range [][]byte{nil, {1}, {1, 0x1b, 0x03, 0x3b}, {1, 0x1b, 0x03, 0x3b, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0x7f}, {2, 0, 0, 0}} {
		if got := fdeStarts(b, 0x1000); got != nil {
			t.Errorf("fdeStarts(%x) = %v", b, got)
		}
	}
}
