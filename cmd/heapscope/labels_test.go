package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// openPTY opens a pseudo-terminal and returns its controlling side and the
// terminal a program writes to.
func openPTY(t *testing.T) (*os.File, *os.File) {
	t.Helper()
	ptmx, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ptmx.Close() })
	if err := unix.IoctlSetPointerInt(int(ptmx.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(int(ptmx.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	tty, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tty.Close() })
	return ptmx, tty
}

// TestExportRefusesTerminal: export without -o does not write a binary
// profile to a terminal; collapsed stacks (text) and -o - are written.
func TestExportRefusesTerminal(t *testing.T) {
	dir := t.TempDir()
	trace := filepath.Join(dir, "t.hst")
	writeSynthTrace(t, trace, 0)
	_, tty := openPTY(t)
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"export", trace}, 2, "needs -o FILE"},
		{[]string{"export", "--format", "pprof", trace}, 2, "needs -o FILE"},
		{[]string{"export", "--format", "collapsed", trace}, 0, ""},
		{[]string{"export", "-o", "-", trace}, 0, ""},
	} {
		cmd := cli(t, c.args...)
		cmd.Stdout = tty
		code, stderr := exitCode(t, cmd)
		if code != c.code || !strings.Contains(stderr, c.want) {
			t.Errorf("%q to a terminal: exit %d, %q; want %d and %q", c.args, code, stderr, c.code, c.want)
		}
	}
	// Not a terminal: written.
	f, err := os.Create(filepath.Join(dir, "out.pb.gz"))
	rmust(t, err)
	defer f.Close()
	cmd := cli(t, "export", trace)
	cmd.Stdout = f
	if code, stderr := exitCode(t, cmd); code != 0 {
		t.Errorf("export to a file on standard output: exit %d: %s", code, stderr)
	}
	if fi, err := f.Stat(); err != nil || fi.Size() == 0 {
		t.Errorf("nothing written: %v", err)
	}
}

// TestReportFullNames: the text report elides template arguments unless
// --full-names is given.
func TestReportFullNames(t *testing.T) {
	dir := t.TempDir()
	trace := runtimeTrace(t, dir)
	for _, c := range []struct {
		flags      []string
		want, lack string
	}{
		{nil, "std::__cxx11::basic_string<…>::", "std::char_traits<char>"},
		{[]string{"--full-names"}, "std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> >::", "<…>"},
	} {
		out := filepath.Join(dir, "r.txt")
		if code, stderr := runCLI(t, append(append([]string{"report", "-o", out}, c.flags...), trace)...); code != 0 {
			t.Fatalf("report: %d %s", code, stderr)
		}
		b, _ := os.ReadFile(out)
		if !strings.Contains(string(b), c.want) || strings.Contains(string(b), c.lack) {
			t.Errorf("report %q: want %q and no %q:\n%s", c.flags, c.want, c.lack, b)
		}
	}
}
