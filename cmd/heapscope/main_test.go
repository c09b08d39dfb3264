package main

import (
	"bytes"
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
