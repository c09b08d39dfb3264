package event

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

func TestParseFamily(t *testing.T) {
	f, err := ParseFamily("malloc,free,cxx")
	if err != nil {
		t.Fatal(err)
	}
	if f != FamilyMalloc|FamilyFree|FamilyCXX {
		t.Errorf("got %v", f)
	}
	if f.String() != "malloc,free,cxx" {
		t.Errorf("String() = %q", f.String())
	}
	if f, _ := ParseFamily("heap"); f != FamilyHeap {
		t.Errorf("heap = %v", f)
	}
	if _, err := ParseFamily("malloc,bogus"); err == nil {
		t.Error("bogus family accepted")
	}
}

func TestFuncFamily(t *testing.T) {
	for f := FuncMalloc; f < numFuncs; f++ {
		if f.Family() == 0 {
			t.Errorf("%v has no family", f)
		}
	}
}

func TestKindSet(t *testing.T) {
	s := KindsOf(KindAlloc, KindRealloc)
	if !s.Has(KindAlloc) || !s.Has(KindRealloc) || s.Has(KindFree) {
		t.Errorf("set %v", s)
	}
	if s.String() != "alloc,realloc" {
		t.Errorf("String() = %q", s.String())
	}
	for k := KindAlloc; k < numKinds; k++ {
		p, err := ParseKind(k.String())
		if err != nil || p != k {
			t.Errorf("ParseKind(%q) = %v, %v", k, p, err)
		}
	}
}

type countSink struct {
	Sink
	events int
}

func (c *countSink) Events(ev []Event) error { c.events += len(ev); return nil }

func TestTee(t *testing.T) {
	a, b := &countSink{Sink: Discard}, &countSink{Sink: Discard}
	s := Tee(a, b)
	if err := s.Events(make([]Event, 3)); err != nil {
		t.Fatal(err)
	}
	if a.events != 3 || b.events != 3 {
		t.Errorf("a=%d b=%d", a.events, b.events)
	}
}

// TestCommandLine checks that bash reads the line back as the same words.
func TestCommandLine(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	args := []string{"python3", "-c", "import os\nprint('hi')\t# \"x\"", "", "a b", "it's", `back\slash`, "$HOME", "ok-_./=:,+@%", "\x01\x7f"}
	line := Process{Cmdline: args}.CommandLine()
	if strings.ContainsAny(line, "\n\t") {
		t.Errorf("CommandLine() = %q: not one line", line)
	}
	out, err := exec.Command(bash, "-c", `for a in `+line+`; do printf '%s\0' "$a"; done`).Output()
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00")
	if !slices.Equal(got, args) {
		t.Errorf("bash read %q back as %q, want %q", line, got, args)
	}
}
