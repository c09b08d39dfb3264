// Package testutil builds the C workloads in testdata/workloads for tests and
// benchmarks, and decides whether a test that needs eBPF may skip.
package testutil

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
)

// Options select how a workload is compiled.
type Options struct {
	// NoFramePointers builds with -fomit-frame-pointer; the default keeps them.
	NoFramePointers bool
	// Opt is the optimisation level, "0", "1", "2", "3" or "s"; the default is "2".
	Opt string
	// Static links statically.
	Static bool
	// CXX compiles with g++ instead of gcc (the source is .cc).
	CXX bool
	// Flags are further compiler flags.
	Flags []string
}

func (o Options) args() []string {
	opt := o.Opt
	if opt == "" {
		opt = "2"
	}
	args := []string{"-g", "-O" + opt, "-pthread"}
	if o.NoFramePointers {
		args = append(args, "-fomit-frame-pointer")
	} else {
		args = append(args, "-fno-omit-frame-pointer", "-mno-omit-leaf-frame-pointer")
	}
	if o.Static {
		args = append(args, "-static")
	}
	return append(args, o.Flags...)
}

var (
	mu     sync.Mutex
	dir    string
	builds = map[string]string{}
	extra  []string // other folders to remove, see SelfForOtherUser
)

// Root returns the module's root directory (where go.mod is).
func Root() (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", fmt.Errorf("testutil: cannot find own source")
	}
	return filepath.Abs(filepath.Join(filepath.Dir(file), "..", ".."))
}

// Source returns the path of a workload's source file.
func Source(name string, o Options) (string, error) {
	root, err := Root()
	if err != nil {
		return "", err
	}
	ext := ".c"
	if o.CXX {
		ext = ".cc"
	}
	return filepath.Join(root, "testdata", "workloads", name+ext), nil
}

// Build compiles testdata/workloads/NAME.c (or .cc) with o, once per process
// for each distinct name and options, into a private temporary directory, and
// returns the binary's path. The directory is removed by Cleanup.
func Build(name string, o Options) (string, error) {
	src, err := Source(name, o)
	if err != nil {
		return "", err
	}
	args := o.args()
	h := sha256.Sum256([]byte(name + "\x00" + strings.Join(args, "\x00")))
	key := hex.EncodeToString(h[:8])

	mu.Lock()
	defer mu.Unlock()
	if bin, ok := builds[key]; ok {
		return bin, nil
	}
	if dir == "" {
		d, err := os.MkdirTemp("", "heapscope-workloads-")
		if err != nil {
			return "", err
		}
		dir = d
	}
	bin := filepath.Join(dir, name+"-"+key)
	cc := "gcc"
	if o.CXX {
		cc = "g++"
	}
	cmd := exec.Command(cc, append(append(args, "-o", bin, src), "-lm")...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building %s: %v\n%s", name, err, out)
	}
	builds[key] = bin
	return bin, nil
}

// MustBuild is Build for tests: it fails the test on error.
func MustBuild(tb testing.TB, name string, o Options) string {
	tb.Helper()
	bin, err := Build(name, o)
	if err != nil {
		tb.Fatal(err)
	}
	return bin
}

// Cleanup removes the binaries Build and SelfForOtherUser made. Call it from TestMain after m.Run.
func Cleanup() {
	mu.Lock()
	defer mu.Unlock()
	if dir != "" {
		os.RemoveAll(dir)
		dir = ""
		builds = map[string]string{}
	}
	for _, d := range extra {
		os.RemoveAll(d)
	}
	extra = nil
}

// Main is a TestMain that removes built workloads when the tests end.
func Main(m *testing.M) {
	code := m.Run()
	Cleanup()
	os.Exit(code)
}

// RequireEBPFEnv is the environment variable that makes tests needing eBPF
// fail, not skip, when eBPF is unavailable. CI sets it.
const RequireEBPFEnv = "HEAPSCOPE_REQUIRE_EBPF"

// SkipWithoutEBPF skips the test, with reason, when eBPF is unavailable (err
// is the reason it is not), unless RequireEBPFEnv is set, in which case the
// test fails.
func SkipWithoutEBPF(tb testing.TB, err error) {
	tb.Helper()
	if err == nil {
		return
	}
	if os.Getenv(RequireEBPFEnv) != "" {
		tb.Fatalf("eBPF unavailable and %s is set: %v", RequireEBPFEnv, err)
	}
	tb.Skipf("eBPF unavailable, skipping: %v", err)
}

// RequireToolsEnv is the environment variable that makes tests needing a
// program or file the machine may lack (heaptrack, valgrind, gdb, tmux,
// rustc, python3.11, libstdc++) fail, not skip, when it is missing. CI sets
// it and installs them: a skip there would hide a missing install step.
const RequireToolsEnv = "HEAPSCOPE_REQUIRE_TOOLS"

// Tool returns the path of the program name, looked up in PATH (or name
// itself when it has a slash). When it is missing the test is skipped, or
// fails when RequireToolsEnv is set.
func Tool(tb testing.TB, name string) string {
	tb.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		SkipWithout(tb, err)
	}
	return path
}

// SkipWithout skips the test because something it needs is missing (err
// says what), or fails it when RequireToolsEnv is set.
func SkipWithout(tb testing.TB, err error) {
	tb.Helper()
	if os.Getenv(RequireToolsEnv) != "" {
		tb.Fatalf("missing and %s is set: %v", RequireToolsEnv, err)
	}
	tb.Skipf("missing, skipping: %v", err)
}
