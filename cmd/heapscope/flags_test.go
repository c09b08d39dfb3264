package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/heapscope/heapscope/internal/testutil"
)

// goFieldNames are Properties' Go fields: a user types flags, and an error
// must name those.
var goFieldNames = regexp.MustCompile(`MaxFileSize|\bBuffers\b|BufferSize|FlushInterval|MaxFrames|TimeResolution|\bFile\b|FileMode|Families|StackEvents|OnFull|Sample:`)

// TestSessionFlagErrors: a value out of range is an error that names the
// flag and its range, with exit status 2 (a usage error); 0 is never read
// as "the default".
func TestSessionFlagErrors(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "t.hst")
	for _, c := range []struct {
		flags []string
		want  string
	}{
		{[]string{"--buffer-size", "0"}, "--buffer-size 0: must be 4KiB to 1MiB"},
		{[]string{"--buffer-size", "2048"}, "--buffer-size 2048: must be 4KiB to 1MiB"},
		{[]string{"--buffer-size", "2KiB"}, "--buffer-size 2KiB: must be 4KiB to 1MiB"},
		{[]string{"--buffer-size", "4x"}, `--buffer-size: size "4x": unknown unit "x"`},
		{[]string{"--buffers", "0"}, "--buffers 0: must be 1 to 65536"},
		{[]string{"--buffer-size", "1024", "--buffers", "5000"}, "--buffers 5000: must be 1 to 4096 (with --buffer-size 1024)"},
		{[]string{"--max-frames", "0"}, "--max-frames 0: must be 1 to 127"},
		{[]string{"--max-frames", "128"}, "--max-frames 128: must be 1 to 127"},
		{[]string{"--flush-interval", "0"}, "--flush-interval 0s: must be more than 0"},
		{[]string{"--time-resolution", "0"}, "--time-resolution 0s: must be 1ns to 1s"},
		{[]string{"--name", ""}, "--name: must be 1 to 1024 characters, not empty"},
		{[]string{"--name", strings.Repeat("n", 1025)}, "--name: must be 1 to 1024 characters, not 1025"},
		{[]string{"--max-size", "-1"}, "--max-size -1: must be 0 (unlimited) or at least 64KiB"},
		{[]string{"--max-size", "32KiB", "--log-mode", "circular"}, "--max-size 32KiB: must be 0 (unlimited) or at least 64KiB"},
		{[]string{"--log-mode", "circular"}, "--max-size"},
		{[]string{"--log-mode", "newfile", "--max-size", "1"}, "-o"},
		{[]string{"--stacks", ""}, "flag --stacks: empty"},
		{[]string{"--sample", "-64KiB"}, `--sample: size "-64KiB": negative`},
		{[]string{"--sample", "lots"}, `--sample: size "lots": not a size`},
		{[]string{"--sample", "1.5"}, `--sample: size "1.5": not a whole number of bytes`},
		{[]string{"--sample", "64XB"}, `--sample: size "64XB": unknown unit "xb"`},
		{[]string{"--sample", "2TiB"}, `--sample 2TiB: must be 0 (every event) or 1B to 1TiB`},
	} {
		for _, cmd := range []string{"run", "attach"} {
			args := append([]string{cmd, "-o", out}, c.flags...)
			if cmd == "run" {
				args = append(args, "--", "true")
			} else {
				args = append(args, "-p", "1")
			}
			code, stderr := exitCode(t, cli(t, args...))
			if code != 2 || !strings.Contains(stderr, c.want) {
				t.Errorf("%s %q: exit %d, stderr %q; want exit 2 and %q", cmd, c.flags, code, stderr, c.want)
			}
			if m := goFieldNames.FindString(stderr); m != "" {
				t.Errorf("%s %q: the error names the Go field %s, not a flag: %q", cmd, c.flags, m, stderr)
			}
		}
	}
	if _, err := os.Stat(out); err == nil {
		t.Errorf("a rejected command left a trace file")
	}
}

// TestSizeFlagsTakeUnits: --buffer-size and --max-size take sizes with
// units, and bare numbers in KiB and MiB as they always did.
func TestSizeFlagsTakeUnits(t *testing.T) {
	dir := t.TempDir()
	for i, c := range []struct {
		flags []string
		want  string
	}{
		{[]string{"--buffer-size", "16"}, "buffer_size=16KiB"},
		{[]string{"--buffer-size", "16KiB"}, "buffer_size=16KiB"},
		{[]string{"--buffer-size", "1MiB"}, "buffer_size=1MiB"},
		{[]string{"--log-mode", "circular", "--max-size", "2"}, "max_file_size=2MiB"},
		{[]string{"--log-mode", "circular", "--max-size", "512KiB"}, "max_file_size=512KiB"},
	} {
		out := filepath.Join(dir, fmt.Sprintf("t%d.hst", i))
		if code, stderr := exitCode(t, cli(t, append(append([]string{"run", "-q", "-o", out}, c.flags...), "--", "true")...)); code != 0 {
			t.Fatalf("%q: exit %d: %s", c.flags, code, stderr)
		}
		info, err := cli(t, "info", out).Output()
		if err != nil || !strings.Contains(string(info), " "+c.want+" ") {
			t.Errorf("%q: info says %q (%v), want %s", c.flags, info, err, c.want)
		}
	}
}

// TestSampleExcludes: --sample with an option whose answer needs every
// event, or a bad size in aggregate mode, is a usage error that names both.
func TestSampleExcludes(t *testing.T) {
	out := filepath.Join(t.TempDir(), "t.hst")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "--sample", "64KiB", "--events", "all", "--", "true"}, "--sample: --events mmap: mmap and munmap are not sampled"},
		{[]string{"run", "--sample", "64KiB", "--provider", "ebpf", "--events", "all", "--", "true"}, "--sample: --events mmap: mmap and munmap are not sampled"},
		// Aggregate mode samples (weighed in BPF), but not a bad size.
		{[]string{"attach", "--sample", "-64KiB", "--mode", "aggregate", "-p", "1"}, `--sample: size "-64KiB": negative`},
	} {
		code, stderr := exitCode(t, cli(t, append(c.args[:1:1], append([]string{"-o", out}, c.args[1:]...)...)...))
		if code != 2 || !strings.Contains(stderr, c.want) {
			t.Errorf("%q: exit %d, stderr %q; want exit 2 and %q", c.args, code, stderr, c.want)
		}
	}
}

// TestRunNotExecutable: run's status follows the shell's convention: 127
// for a program not found, 126 for one found that cannot be executed.
func TestRunNotExecutable(t *testing.T) {
	dir := t.TempDir()
	text := filepath.Join(dir, "text")
	rmust(t, os.WriteFile(text, []byte("not a program\n"), 0o644))
	garbage := filepath.Join(dir, "garbage")
	rmust(t, os.WriteFile(garbage, []byte("\x00\x01\x02 not ELF"), 0o755))
	for _, c := range []struct {
		prog string
		code int
		want string
	}{
		{filepath.Join(dir, "missing"), 127, "no such file"},
		{"heapscope-no-such-program", 127, "not found"},
		{text, 126, "permission denied"},
		{dir, 126, "is a directory"},
		{garbage, 126, "exec format error"},
	} {
		code, stderr := exitCode(t, cli(t, "run", "-q", "-o", filepath.Join(dir, "t.hst"), "--", c.prog))
		if code != c.code || !strings.Contains(stderr, c.want) {
			t.Errorf("run %s: exit %d, stderr %q; want %d and %q", c.prog, code, stderr, c.code, c.want)
		}
	}
}

// TestVersion: --version is the version command, and the version is a
// real one, not Go's "(devel)".
func TestVersion(t *testing.T) {
	var a, b bytes.Buffer
	flagOut, err := cli(t, "--version").Output()
	rmust(t, err)
	cmdOut, err := cli(t, "version").Output()
	rmust(t, err)
	a.Write(flagOut)
	b.Write(cmdOut)
	if a.String() != b.String() || !strings.HasPrefix(a.String(), "heapscope ") {
		t.Errorf("--version printed %q, version %q", a.String(), b.String())
	}
	if strings.Contains(a.String(), "(devel)") {
		t.Errorf("--version printed Go's placeholder: %q", a.String())
	}
	// Set at link time.
	bin := filepath.Join(t.TempDir(), "heapscope")
	if out, err := exec.Command("go", "build", "-ldflags", "-X main.version=v9.8.7", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	out, err := exec.Command(bin, "--version").Output()
	if err != nil || !strings.HasPrefix(string(out), "heapscope v9.8.7 ") {
		t.Errorf("built with -X main.version=v9.8.7: %q, %v", out, err)
	}
	// From the build information: a module version when there is one,
	// else the VCS revision.
	for _, c := range []struct {
		info debug.BuildInfo
		want string
	}{
		{debug.BuildInfo{Main: debug.Module{Version: "v1.2.3"}}, "v1.2.3"},
		{debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.time", Value: "2026-11-30T20:00:00Z"}, {Key: "vcs.modified", Value: "true"}}},
			"rev 0123456789ab+dirty (2026-11-30T20:00:00Z)"},
	} {
		if got := versionOf(&c.info); got != c.want {
			t.Errorf("versionOf(%+v) = %q, want %q", c.info, got, c.want)
		}
	}
	if got := versionOf(&debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}); strings.Contains(got, "(devel)") {
		t.Errorf("without VCS information: %q", got)
	}
}

// TestHelpShowsFlagsAsTyped: --help writes long flags with two dashes, and
// run's --stacks lists every stack kind.
func TestHelpShowsFlagsAsTyped(t *testing.T) {
	single := regexp.MustCompile(`(?m)^  -([a-z][a-z-]+)\b`)
	for name := range commands {
		var out, errb bytes.Buffer
		mainArgs([]string{name, "--help"}, &out, &errb)
		if m := single.FindStringSubmatch(out.String()); m != nil {
			t.Errorf("%s --help shows -%s with one dash", name, m[1])
		}
	}
	var out, errb bytes.Buffer
	mainArgs([]string{"run", "--help"}, &out, &errb)
	if !strings.Contains(out.String(), "  --buffer-size SIZE") || !strings.Contains(out.String(), "  -o string") {
		t.Errorf("run --help:\n%s", out.String())
	}
	i := strings.Index(out.String(), "  --stacks")
	if i < 0 {
		t.Fatalf("run --help has no --stacks:\n%s", out.String())
	}
	stacks := out.String()[i:]
	stacks = stacks[:strings.Index(stacks[2:], "\n  -")+2]
	for _, k := range []string{"alloc", "realloc", "free", "mmap", "munmap"} {
		if !regexp.MustCompile(`\b` + k + `\b`).MatchString(stacks) {
			t.Errorf("run --help's --stacks does not list %s: %q", k, stacks)
		}
	}
}

// TestEventsAllHaveStacks: the kinds traced carry a stack unless --stacks
// says otherwise: with --events all, mmap sites have their stack.
func TestEventsAllHaveStacks(t *testing.T) {
	dir := t.TempDir()
	bin := testutil.MustBuild(t, "ebpf_mmap", testutil.Options{})
	trace := filepath.Join(dir, "t.hst")
	cmd := cli(t, "run", "-q", "--events", "all", "-o", trace, "--", bin, "4")
	cmd.Stdin = strings.NewReader("go\ngo\n")
	if code, stderr := exitCode(t, cmd); code != 0 {
		t.Fatalf("run: exit %d: %s", code, stderr)
	}
	d := reportJSON(t, trace)
	if len(d.Allocations) == 0 {
		t.Fatal("no allocation sites")
	}
	for _, s := range d.Allocations {
		if len(s.Stack) == 0 || s.Stack[0].Function != "main" {
			t.Errorf("a site of %d calls without the stack of main: %+v", s.Allocations+s.Reallocations, s.Stack)
		}
	}
	// Asked for: no stacks.
	if code, stderr := exitCode(t, cli(t, "run", "-q", "--events", "all", "--stacks", "none", "-o", trace+"2", "--", bin, "1")); code != 0 {
		t.Fatalf("run --stacks none: exit %d: %s", code, stderr)
	}
	for _, s := range reportJSON(t, trace+"2").Allocations {
		if len(s.Stack) != 0 {
			t.Errorf("--stacks none recorded a stack: %+v", s.Stack)
		}
	}
}
