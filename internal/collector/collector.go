// Package collector builds and runs a real OpenTelemetry Collector for the
// tests of heapscope's exports: an otlp receiver (gRPC and HTTP, on
// loopback ports of its own) and a file exporter, with the profiles signal
// on (the service.profilesSupport feature gate).
//
// The binary is built once with the OpenTelemetry Collector Builder (ocb)
// of the pinned release and cached under the user's cache directory
// ($XDG_CACHE_HOME or ~/.cache)/heapscope-test/, keyed by the builder's
// release, its configuration, the Go version and this file's go.mod: later
// runs, and CI on the same machine, reuse it. A plain ocb build fails on a
// test dependency of the file exporter, so the package generates the
// sources only (--skip-get-modules --skip-compilation) and builds them
// with a go.mod of its own and -mod=mod. The first build takes minutes
// (module downloads and 54 MB of binary); a lock file serializes builds of
// test binaries that run at once.
package collector

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pprofile"
	"golang.org/x/sys/unix"
)

// Release is the Collector release built: the same as the pdata that
// package export encodes with (export.CollectorRelease).
const Release = "v0.165.0"

// pdataRelease is the pdata and confmap modules' release that goes with it.
const pdataRelease = "v1.71.0"

const builderConfig = `dist:
  name: otelcol-heapscope-test
  description: OpenTelemetry Collector for heapscope's export tests
  output_path: DIST
receivers:
  - gomod: go.opentelemetry.io/collector/receiver/otlpreceiver ` + Release + `
exporters:
  - gomod: github.com/open-telemetry/opentelemetry-collector-contrib/exporter/fileexporter ` + Release + `
providers:
  - gomod: go.opentelemetry.io/collector/confmap/provider/envprovider ` + pdataRelease + `
  - gomod: go.opentelemetry.io/collector/confmap/provider/fileprovider ` + pdataRelease + `
`

const goMod = `module otelcol-heapscope-test

go 1.26

require (
	go.opentelemetry.io/collector/component ` + pdataRelease + `
	go.opentelemetry.io/collector/confmap ` + pdataRelease + `
	go.opentelemetry.io/collector/confmap/provider/envprovider ` + pdataRelease + `
	go.opentelemetry.io/collector/confmap/provider/fileprovider ` + pdataRelease + `
	go.opentelemetry.io/collector/otelcol ` + Release + `
	go.opentelemetry.io/collector/receiver/otlpreceiver ` + Release + `
	github.com/open-telemetry/opentelemetry-collector-contrib/exporter/fileexporter ` + Release + `
)
`

// runConfig is the collector's configuration; the ports and the output
// file come from its environment.
const runConfig = `receivers:
  otlp:
    protocols:
      grpc:
        endpoint: 127.0.0.1:${env:HEAPSCOPE_TEST_GRPC_PORT}
      http:
        endpoint: 127.0.0.1:${env:HEAPSCOPE_TEST_HTTP_PORT}
exporters:
  file:
    path: ${env:HEAPSCOPE_TEST_OUT}
    append: true
    flush_interval: 100ms
service:
  telemetry:
    metrics:
      level: none
  pipelines:
    profiles:
      receivers: [otlp]
      exporters: [file]
`

var (
	buildOnce sync.Once
	buildPath string
	buildErr  error
)

// Binary returns the path of the built collector, building it on first
// use. A failed build fails the test (go and the module proxy are what
// every test here needs).
func Binary(tb testing.TB) string {
	tb.Helper()
	buildOnce.Do(func() { buildPath, buildErr = build() })
	if buildErr != nil {
		tb.Fatalf("building the OpenTelemetry Collector %s: %v", Release, buildErr)
	}
	return buildPath
}

func cacheKey() string {
	h := sha256.New()
	for _, s := range []string{Release, builderConfig, goMod, runtime.Version(), runtime.GOARCH} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil)[:8])
}

// CacheDir is where the binary is kept.
func CacheDir() (string, error) {
	d, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(d, "heapscope-test", "otelcol-"+Release+"-"+cacheKey()), nil
}

func build() (string, error) {
	dir, err := CacheDir()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "otelcol")
	if ok, err := usable(bin); ok || err != nil {
		return bin, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	lock, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_CREATE|os.O_RDWR|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return "", err
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		return "", err
	}
	if ok, err := usable(bin); ok || err != nil { // another test binary built it
		return bin, err
	}
	work, err := os.MkdirTemp(dir, "build-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(work)
	dist := filepath.Join(work, "dist")
	cfg := filepath.Join(work, "builder.yaml")
	if err := os.WriteFile(cfg, []byte(strings.Replace(builderConfig, "DIST", dist, 1)), 0o600); err != nil {
		return "", err
	}
	ocb := exec.Command("go", "run", "go.opentelemetry.io/collector/cmd/builder@"+Release,
		"--config", cfg, "--skip-get-modules", "--skip-compilation")
	ocb.Dir = work
	if out, err := ocb.CombinedOutput(); err != nil {
		return "", fmt.Errorf("ocb: %v\n%s", err, out)
	}
	if err := os.WriteFile(filepath.Join(dist, "go.mod"), []byte(goMod), 0o600); err != nil {
		return "", err
	}
	tmp := bin + ".tmp"
	gob := exec.Command("go", "build", "-trimpath", "-o", tmp, ".")
	gob.Dir = dist
	gob.Env = append(os.Environ(), "GOFLAGS=-mod=mod -buildvcs=false", "CGO_ENABLED=0")
	if out, err := gob.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build: %v\n%s", err, out)
	}
	return bin, os.Rename(tmp, bin)
}

// usable reports whether bin is a built collector: a regular file of ours,
// not writable by others.
func usable(bin string) (bool, error) {
	fi, err := os.Lstat(bin)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !fi.Mode().IsRegular() || !ok || int(st.Uid) != os.Getuid() || fi.Mode().Perm()&0o022 != 0 {
		return false, fmt.Errorf("%s is not a regular file of this user's that only it can write", bin)
	}
	return true, nil
}

// Collector is a running collector.
type Collector struct {
	GRPC string // host:port of the otlp receiver's gRPC server
	HTTP string // host:port of its HTTP server
	Out  string // the file exporter's output

	tb   testing.TB
	bin  string
	conf string
	cmd  *exec.Cmd
	log  *bytes.Buffer
	done chan struct{}
}

// Start runs a collector on free loopback ports, writing to a file in a
// temporary directory of the test; it is killed when the test ends.
func Start(tb testing.TB) *Collector {
	tb.Helper()
	dir := tb.TempDir()
	c := &Collector{tb: tb, bin: Binary(tb), conf: filepath.Join(dir, "config.yaml"), Out: filepath.Join(dir, "profiles.json")}
	if err := os.WriteFile(c.conf, []byte(runConfig), 0o600); err != nil {
		tb.Fatal(err)
	}
	c.GRPC, c.HTTP = freePort(tb), freePort(tb)
	c.start()
	tb.Cleanup(c.Kill)
	return c
}

func freePort(tb testing.TB) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func port(addr string) string {
	_, p, _ := net.SplitHostPort(addr)
	return p
}

// start runs the collector and waits until both servers accept
// connections.
func (c *Collector) start() {
	c.tb.Helper()
	c.log = &bytes.Buffer{}
	c.cmd = exec.Command(c.bin, "--config", "file:"+c.conf, "--feature-gates=service.profilesSupport")
	c.cmd.Env = append(os.Environ(), "HEAPSCOPE_TEST_GRPC_PORT="+port(c.GRPC),
		"HEAPSCOPE_TEST_HTTP_PORT="+port(c.HTTP), "HEAPSCOPE_TEST_OUT="+c.Out)
	c.cmd.Stdout, c.cmd.Stderr = c.log, c.log
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := c.cmd.Start(); err != nil {
		c.tb.Fatal(err)
	}
	c.done = make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) {
		cmd.Wait()
		close(done)
	}(c.cmd, c.done)
	deadline := time.Now().Add(30 * time.Second)
	for _, addr := range []string{c.GRPC, c.HTTP} {
		for {
			conn, err := net.DialTimeout("tcp", addr, time.Second)
			if err == nil {
				conn.Close()
				break
			}
			select {
			case <-c.done:
				c.tb.Fatalf("the collector exited: %s", c.log)
			default:
			}
			if time.Now().After(deadline) {
				c.Kill()
				c.tb.Fatalf("the collector did not listen on %s in 30 s: %s", addr, c.log)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// Kill kills the collector (SIGKILL: what it wrote is what a crash leaves)
// and waits for it to exit.
func (c *Collector) Kill() {
	if c.cmd == nil || c.cmd.Process == nil {
		return
	}
	select {
	case <-c.done:
	default:
		c.cmd.Process.Kill()
		<-c.done
	}
}

// Restart starts the collector again on the same ports and output file
// (which the file exporter appends to).
func (c *Collector) Restart() {
	c.tb.Helper()
	c.Kill()
	c.start()
}

// Stop stops the collector with SIGSTOP, and waits until each of its
// threads is stopped: it then accepts connections (the kernel does) and
// answers nothing, as a hung collector does. Continue resumes it.
func (c *Collector) Stop() {
	c.tb.Helper()
	pid := c.PID()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		c.tb.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !allStopped(pid) {
		if time.Now().After(deadline) {
			c.tb.Fatalf("collector %d not stopped after 10 s", pid)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// allStopped reports whether every thread of pid is in state T.
func allStopped(pid int) bool {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil || len(tasks) == 0 {
		return false
	}
	for _, t := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, t.Name()))
		if err != nil {
			return false
		}
		// The state follows the command's closing parenthesis.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 || i+2 >= len(b) || b[i+2] != 'T' {
			return false
		}
	}
	return true
}

// Continue resumes a collector that Stop stopped.
func (c *Collector) Continue() {
	syscall.Kill(c.PID(), syscall.SIGCONT)
}

// PID is the running collector's process ID.
func (c *Collector) PID() int { return c.cmd.Process.Pid }

// Log returns what the collector printed.
func (c *Collector) Log() string { return c.log.String() }

// Messages returns the export messages the file exporter has written so
// far, one per line, in order. A last line without its newline is not
// whole yet and is left out (the exporter may write a message and its
// newline in two writes, a flush apart).
func (c *Collector) Messages() ([]pprofile.Profiles, error) {
	b, err := os.ReadFile(c.Out)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []pprofile.Profiles
	var u pprofile.JSONUnmarshaler
	for n := 1; ; n++ {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			return out, nil
		}
		line := b[:i]
		b = b[i+1:]
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		// One message per line: two run together (a collector killed
		// between a message and its newline) are an error, not the first.
		if !json.Valid(line) {
			return out, fmt.Errorf("%s line %d is not one JSON message", c.Out, n)
		}
		p, err := u.UnmarshalProfiles(line)
		if err != nil {
			return out, fmt.Errorf("%s line %d: %w", c.Out, n, err)
		}
		out = append(out, p)
	}
}

// WaitMessages waits until the file holds at least n messages (the file
// exporter flushes every 100 ms), for at most d.
func (c *Collector) WaitMessages(ctx context.Context, n int, d time.Duration) ([]pprofile.Profiles, error) {
	deadline := time.Now().Add(d)
	for {
		ms, err := c.Messages()
		if err == nil && len(ms) >= n {
			return ms, nil
		}
		if time.Now().After(deadline) {
			if err == nil {
				err = fmt.Errorf("%d messages of %d after %s", len(ms), n, d)
			}
			return ms, err
		}
		select {
		case <-ctx.Done():
			return ms, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// String describes the collector for test messages.
func (c *Collector) String() string {
	pid := 0
	if c.cmd != nil && c.cmd.Process != nil {
		pid = c.cmd.Process.Pid
	}
	return "collector " + Release + " pid " + strconv.Itoa(pid) + " grpc " + c.GRPC + " http " + c.HTTP
}

// Totals sums the samples of OTLP profiles by process, sample type and
// function: of each sample, the innermost function its stack names (the
// first line of its first location that has one), "" when none does. It is
// how the tests compare what a collector received with a workload's
// known totals.
func Totals(ps pprofile.Profiles) (map[int64]map[string]map[string]int64, error) {
	return TotalsIn(ps)
}

// TotalsIn is Totals with each sample counted for the innermost of its
// stack's functions (inlined ones included) that is one of names, "" when
// none is; with no names, Totals'.
func TotalsIn(ps pprofile.Profiles, names ...string) (map[int64]map[string]map[string]int64, error) {
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	d := ps.Dictionary()
	strs := d.StringTable()
	str := func(i int32) string {
		if i < 0 || int(i) >= strs.Len() {
			return ""
		}
		return strs.At(int(i))
	}
	out := map[int64]map[string]map[string]int64{}
	for i := 0; i < ps.ResourceProfiles().Len(); i++ {
		rp := ps.ResourceProfiles().At(i)
		pidv, ok := rp.Resource().Attributes().Get("process.pid")
		if !ok {
			return nil, fmt.Errorf("resource %d has no process.pid", i)
		}
		pid := pidv.Int()
		if out[pid] == nil {
			out[pid] = map[string]map[string]int64{}
		}
		for j := 0; j < rp.ScopeProfiles().Len(); j++ {
			sp := rp.ScopeProfiles().At(j)
			for k := 0; k < sp.Profiles().Len(); k++ {
				prof := sp.Profiles().At(k)
				typ := str(prof.SampleType().TypeStrindex())
				m := out[pid][typ]
				if m == nil {
					m = map[string]int64{}
					out[pid][typ] = m
				}
				for s := 0; s < prof.Samples().Len(); s++ {
					smp := prof.Samples().At(s)
					fn, err := leaf(d, smp.StackIndex(), want)
					if err != nil {
						return nil, err
					}
					var v int64
					for x := 0; x < smp.Values().Len(); x++ {
						v += smp.Values().At(x)
					}
					m[fn] += v
				}
			}
		}
	}
	return out, nil
}

// leaf returns the innermost function of a stack, or, with want, the
// innermost one in want.
func leaf(d pprofile.ProfilesDictionary, stack int32, want map[string]bool) (string, error) {
	if stack <= 0 || int(stack) >= d.StackTable().Len() {
		return "", fmt.Errorf("stack index %d of %d", stack, d.StackTable().Len())
	}
	locs := d.StackTable().At(int(stack)).LocationIndices()
	for i := 0; i < locs.Len(); i++ {
		li := locs.At(i)
		if li <= 0 || int(li) >= d.LocationTable().Len() {
			return "", fmt.Errorf("location index %d of %d", li, d.LocationTable().Len())
		}
		lines := d.LocationTable().At(int(li)).Lines()
		for j := 0; j < lines.Len(); j++ {
			fi := lines.At(j).FunctionIndex()
			if fi <= 0 || int(fi) >= d.FunctionTable().Len() {
				return "", fmt.Errorf("function index %d of %d", fi, d.FunctionTable().Len())
			}
			ni := d.FunctionTable().At(int(fi)).NameStrindex()
			if ni < 0 || int(ni) >= d.StringTable().Len() {
				return "", fmt.Errorf("string index %d of %d", ni, d.StringTable().Len())
			}
			if name := d.StringTable().At(int(ni)); len(want) == 0 || want[name] {
				return name, nil
			}
		}
	}
	return "", nil
}
