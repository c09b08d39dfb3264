package proc

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/heapscope/heapscope/internal/testutil"
)

// TestOpenMappedFIFO: a process's executable, renamed and replaced by a
// FIFO at its path, is still opened by OpenMapped (through map_files, the
// mapped file itself), while OpenInRoot of the path, which is now the
// FIFO, and of a device, fails at once with ErrNotRegular instead of
// waiting for a writer.
func TestOpenMappedFIFO(t *testing.T) {
	dir := t.TempDir()
	exe := filepath.Join(dir, "sleeper")
	b, err := os.ReadFile("/bin/sleep")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(exe, b, 0o700); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	var m Mapping
	for i := 0; i < 500 && m.Path == ""; i++ {
		maps, _ := ReadMaps(cmd.Process.Pid)
		for _, mm := range maps {
			if mm.Exec() && mm.Path == exe {
				m = mm
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	if m.Path == "" {
		t.Fatal("the sleeper's executable mapping did not show")
	}
	if err := os.Rename(exe, exe+".old"); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(exe, 0o600); err != nil {
		t.Fatal(err)
	}
	type result struct {
		f   *os.File
		err error
	}
	within := func(what string, open func() (*os.File, error)) (*os.File, error) {
		ch := make(chan result, 1)
		go func() { f, err := open(); ch <- result{f, err} }()
		select {
		case r := <-ch:
			return r.f, r.err
		case <-time.After(20 * time.Second):
			if f, err := os.OpenFile(exe, os.O_WRONLY, 0); err == nil {
				f.Close() // lets a blocked open return
			}
			t.Fatalf("%s did not return in 20s: it opened the FIFO", what)
			return nil, nil
		}
	}
	f, err := within("OpenMapped", func() (*os.File, error) { return OpenMapped(cmd.Process.Pid, m) })
	if err != nil {
		t.Errorf("OpenMapped of the renamed executable: %v", err)
	} else {
		st, _ := f.Stat()
		if !st.Mode().IsRegular() {
			t.Errorf("OpenMapped opened %v", st.Mode())
		}
		f.Close()
	}
	for _, name := range []string{exe, "/dev/null"} {
		if f, err := within("OpenInRoot "+name, func() (*os.File, error) { return OpenInRoot(cmd.Process.Pid, name, 0) }); !errors.Is(err, ErrNotRegular) {
			if f != nil {
				f.Close()
			}
			t.Errorf("OpenInRoot(%s): %v, want ErrNotRegular", name, err)
		}
	}
}

// TestCmdlineTitle: redis-server writes its title over its argv and fills
// the rest with NULs; Cmdline gives the title, not dozens of empty
// arguments after it.
func TestCmdlineTitle(t *testing.T) {
	redis := testutil.Tool(t, "redis-server")
	dir := t.TempDir()
	cmd := exec.Command(redis, "--port", "0", "--save", "", "--appendonly", "no", "--dir", dir,
		"--unixsocket", filepath.Join(dir, "s"), "--loglevel", "warning")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	var argv []string
	for i := 0; i < 1000; i++ {
		argv, _ = Cmdline(cmd.Process.Pid)
		if len(argv) > 0 && !strings.Contains(strings.Join(argv, " "), "--loglevel") {
			break // the title is in place
		}
		time.Sleep(10 * time.Millisecond)
	}
	if len(argv) == 0 || !strings.Contains(argv[0], "redis-server") || strings.Contains(strings.Join(argv, " "), "--loglevel") {
		t.Fatalf("argv %q: want redis-server's title", argv)
	}
	for i, a := range argv {
		if a == "" {
			t.Errorf("argv %q: argument %d is empty", argv, i)
			break
		}
	}
}
