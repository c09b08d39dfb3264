package event

import (
	"encoding"
	"errors"
	"strings"
	"testing"
)

// textValue is what each configuration enumeration implements.
type textValue interface {
	encoding.TextMarshaler
	String() string
}

// TestConfigText: every value of every enumeration writes its name and
// parses back to itself; an unknown name is an error that wraps
// ErrInvalidFlags and lists every valid name.
func TestConfigText(t *testing.T) {
	for _, c := range []struct {
		values []textValue
		parse  func(string) (textValue, error)
	}{
		{[]textValue{Sequential, Circular, NewFile, RealTime},
			func(s string) (textValue, error) { v, err := ParseLogFileMode(s); return v, err }},
		{[]textValue{Stream, Aggregate},
			func(s string) (textValue, error) { v, err := ParseCaptureMode(s); return v, err }},
		{[]textValue{OnFullDefault, Block, Drop},
			func(s string) (textValue, error) { v, err := ParseOnFull(s); return v, err }},
		{[]textValue{UnwindFP, UnwindDWARF, UnwindTables},
			func(s string) (textValue, error) { v, err := ParseUnwind(s); return v, err }},
		{[]textValue{ProviderPreload, ProviderEBPF},
			func(s string) (textValue, error) { v, err := ParseProvider(s); return v, err }},
	} {
		var names []string
		for _, v := range c.values {
			b, err := v.MarshalText()
			if err != nil || string(b) != v.String() {
				t.Errorf("%v.MarshalText() = %q, %v; want its String", v, b, err)
			}
			got, err := c.parse(string(b))
			if err != nil || got != v {
				t.Errorf("parsing %q: %v, %v; want %v", b, got, err, v)
			}
			names = append(names, string(b))
		}
		_, err := c.parse("sideways")
		if !errors.Is(err, ErrInvalidFlags) {
			t.Errorf("parsing sideways (one of %q): %v, want ErrInvalidFlags", names, err)
			continue
		}
		for _, n := range names {
			if !strings.Contains(err.Error(), n) {
				t.Errorf("the error %q does not list %q", err, n)
			}
		}
	}
}

// TestConfigNumbers: log file modes are stored in trace files, unwinders
// are passed to the interposer, by number: the numbers do not move.
func TestConfigNumbers(t *testing.T) {
	if Sequential != 0 || Circular != 1 || NewFile != 2 || RealTime != 3 {
		t.Errorf("log file modes renumbered: %d %d %d %d", Sequential, Circular, NewFile, RealTime)
	}
	if UnwindFP != 0 || UnwindDWARF != 1 || UnwindTables != 2 {
		t.Errorf("unwinders renumbered: %d %d %d", UnwindFP, UnwindDWARF, UnwindTables)
	}
	if LogFileMode(9).String() != "mode(9)" {
		t.Errorf("LogFileMode(9) = %q", LogFileMode(9))
	}
}

// TestKindSetText: a stack kind set writes and parses as a list, "none",
// "all" or "default", and the empty text is an error.
func TestKindSetText(t *testing.T) {
	for _, c := range []struct {
		s    KindSet
		text string
	}{
		{0, "default"},
		{NoStacks, "none"},
		{DefaultStacks, "alloc,realloc"},
		{KindsOf(KindFree, KindMunmap), "free,munmap"},
	} {
		b, _ := c.s.MarshalText()
		if string(b) != c.text {
			t.Errorf("%#x writes %q, want %q", uint8(c.s), b, c.text)
		}
		var got KindSet
		if err := got.UnmarshalText(b); err != nil || got != c.s {
			t.Errorf("%q parses to %#x, %v; want %#x", b, uint8(got), err, uint8(c.s))
		}
	}
	if s, err := ParseKindSet("all"); err != nil || s != AllKinds || s.String() != "alloc,realloc,free,mmap,munmap" {
		t.Errorf("all: %v, %v", s, err)
	}
	for _, bad := range []string{"", "alloc,sbrk"} {
		if _, err := ParseKindSet(bad); !errors.Is(err, ErrInvalidFlags) || !strings.Contains(err.Error(), "munmap") {
			t.Errorf("%q: %v, want ErrInvalidFlags listing the kinds", bad, err)
		}
	}
}
