package benchutil

import (
	"bytes"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"runtime/pprof"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/heapscope/heapscope/internal/preload"
	"github.com/heapscope/heapscope/internal/testutil"
	"github.com/heapscope/heapscope/tracefile"
)

// BuildHeapscope builds ./cmd/heapscope, from the module's root, into
// path.
func BuildHeapscope(path string) error {
	root, err := testutil.Root()
	if err != nil {
		return err
	}
	build := exec.Command("go", "build", "-o", path, "./cmd/heapscope")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("building heapscope: %v\n%s", err, out)
	}
	return nil
}

// StartPiped starts cmd with its standard input and output piped, and
// ends the program (log.Fatal) if it cannot.
func StartPiped(cmd *exec.Cmd) (stdin io.WriteCloser, stdout io.ReadCloser) {
	stdin, stdout, err := testutil.OpenPipes(cmd)
	if err == nil {
		err = cmd.Start()
	}
	if err != nil {
		log.Fatal(err)
	}
	return stdin, stdout
}

// Record runs cmd to its end under the preload provider (with cfg) into a
// trace file at path of session name, as `heapscope run` does without the
// CLI around it.
func Record(path, session string, cfg preload.Config, cmd *exec.Cmd) error {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return err
	}
	host, _ := os.Hostname()
	tw, err := tracefile.Create(path, tracefile.Header{Session: session, Provider: "preload", Hostname: host,
		Clock: "CLOCK_MONOTONIC", MonoStart: ts.Nano(), WallStart: time.Now()}, tracefile.Options{})
	if err != nil {
		return err
	}
	c, err := preload.New(cfg, tw)
	if err != nil {
		tw.Close()
		return err
	}
	if err := c.Prepare(cmd); err != nil {
		c.Close()
		tw.Close()
		return err
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	runErr := cmd.Run()
	if cmd.ProcessState != nil {
		ws := cmd.ProcessState.Sys().(syscall.WaitStatus)
		sig := 0
		if ws.Signaled() {
			sig = int(ws.Signal())
		}
		c.Exited(cmd.Process.Pid, ws.ExitStatus(), sig)
	}
	cerr := c.Close()
	werr := tw.Close()
	if runErr != nil {
		return fmt.Errorf("%s: %v\n%s", cmd.Path, runErr, stderr.Bytes())
	}
	if cerr != nil {
		return cerr
	}
	return werr
}

// CPUProfile starts a CPU profile of the program into path, when path is
// not "", and returns what stops it; it ends the program (log.Fatal) if it
// cannot.
func CPUProfile(path string) (stop func()) {
	if path == "" {
		return func() {}
	}
	f, err := os.Create(path)
	if err != nil {
		log.Fatal(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		log.Fatal(err)
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}
}

// MustBuild is testutil.Build for the bench programs: it ends the program
// (log.Fatal) on error.
func MustBuild(name string, o testutil.Options) string {
	bin, err := testutil.Build(name, o)
	if err != nil {
		log.Fatal(err)
	}
	return bin
}
