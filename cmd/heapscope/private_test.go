package main

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"github.com/heapscope/heapscope/internal/testutil"
)

// TestRunWarnsPrivateAllocator runs programs with the preload provider
// (run, and top --): one
// with jemalloc's entry point under Rust's jemallocator prefix draws a
// one-line warning naming it and the eBPF provider, and still runs; a plain
// one draws none.
func TestRunWarnsPrivateAllocator(t *testing.T) {
	for _, c := range []struct {
		name  string
		flags []string
		warn  []string // what the warning says; nil: no warning
	}{
		{"rjem", []string{"-DNAME=_rjem_malloc"}, []string{"jemalloc", "_rjem_malloc", "--provider ebpf"}},
		{"plain", nil, nil},
	} {
		for _, verb := range []string{"run", "top"} {
			t.Run(c.name+"/"+verb, func(t *testing.T) {
				bin := testutil.MustBuild(t, "private_alloc", testutil.Options{Flags: c.flags})
				args := []string{"run", "-q"}
				if verb == "top" { // plain: its output is not a terminal
					args = []string{"top", "--interval", "200ms"}
				}
				cmd := cli(t, append(args, "-o", filepath.Join(t.TempDir(), "t.hst"), "--", bin, "10")...)
				var stdout bytes.Buffer
				cmd.Stdout = &stdout
				code, stderr := exitCode(t, cmd)
				if code != 0 || verb == "run" && stdout.String() != "done 10\n" {
					t.Fatalf("exit %d, output %q; want 0, the program's\n%s", code, stdout.String(), stderr)
				}
				var warnings []string
				for _, l := range strings.Split(stderr, "\n") {
					if strings.Contains(l, "warning") {
						warnings = append(warnings, l)
					}
				}
				switch {
				case c.warn == nil && len(warnings) > 0:
					t.Errorf("warned of a plain program: %q", warnings)
				case c.warn != nil && len(warnings) != 1:
					t.Errorf("%d warning lines, want 1:\n%s", len(warnings), stderr)
				case c.warn != nil:
					for _, w := range c.warn {
						if !strings.Contains(warnings[0], w) {
							t.Errorf("warning %q does not say %q", warnings[0], w)
						}
					}
				}
			})
		}
	}
}
