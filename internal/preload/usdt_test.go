package preload

import (
	"debug/elf"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/heapscope/heapscope/analyze"
	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/internal/testutil"
	"github.com/heapscope/heapscope/internal/usdt"
)

// interposerProbes reads the otel_memory probes of the interposer as it is
// written for the traced programs, and checks them as OpenTelemetry's
// contract has them: one site each, alloc with three unsigned 8-byte
// arguments, free with one, each with a semaphore of its own in .probes, a
// nop at each site's file offset.
func interposerProbes(t *testing.T) (path string, alloc, free usdt.Probe) {
	t.Helper()
	path, err := LibraryPath()
	if err != nil {
		t.Fatal(err)
	}
	ps, err := usdt.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	a, f := usdt.Find(ps, "otel_memory", "alloc"), usdt.Find(ps, "otel_memory", "free")
	if len(a) != 1 || len(f) != 1 || len(ps) != 2 {
		t.Fatalf("probes of %s: %+v", path, ps)
	}
	alloc, free = a[0], f[0]
	if len(alloc.Args) != 3 || len(free.Args) != 1 {
		t.Fatalf("alloc args %+v, free args %+v", alloc.Args, free.Args)
	}
	for _, arg := range append(alloc.Args, free.Args...) {
		if arg.Size != 8 || arg.Signed || arg.Kind != usdt.ArgRegister {
			t.Errorf("argument %+v: want an unsigned 8-byte value in a register", arg)
		}
	}
	ef, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer ef.Close()
	probes := ef.Section(".probes")
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []usdt.Probe{alloc, free} {
		if p.Semaphore == 0 || probes == nil || p.Semaphore < probes.Addr || p.Semaphore+2 > probes.Addr+probes.Size {
			t.Errorf("%s: semaphore %#x outside .probes %v", p.Name, p.Semaphore, probes)
		}
		if p.Offset >= uint64(len(raw)) || raw[p.Offset] != 0x90 {
			t.Errorf("%s: no nop at file offset %#x", p.Name, p.Offset)
		}
	}
	if alloc.Semaphore == free.Semaphore {
		t.Errorf("one semaphore for both probes: %#x", alloc.Semaphore)
	}
	// binutils reads the same notes.
	out, err := exec.Command(testutil.Tool(t, "readelf"), "-n", path).Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []usdt.Probe{alloc, free} {
		want := fmt.Sprintf("Provider: otel_memory\n    Name: %s\n    Location: %#016x, Base: %#016x, Semaphore: %#016x\n    Arguments: %s\n",
			p.Name, p.Address, p.Base, p.Semaphore, p.ArgsSpec)
		if !strings.Contains(string(out), want) {
			t.Errorf("readelf -n does not say\n%s\nit says\n%s", want, out)
		}
	}
	return path, alloc, free
}

// uprobeHit is one probe hit, as tracefs prints it: in process pid.
type uprobeHit struct {
	pid               int
	name              string
	ptr, size, weight uint64
}

// withUprobes attaches uprobes to the probes at their file offsets in
// path, with their semaphores as reference counters (tracefs, in a trace
// instance of the test's own), runs f, and returns the hits.
func withUprobes(t *testing.T, path string, alloc, free usdt.Probe, f func()) []uprobeHit {
	t.Helper()
	const tracefs = "/sys/kernel/tracing"
	if _, err := os.Stat(tracefs + "/uprobe_events"); err != nil || os.Geteuid() != 0 {
		testutil.SkipWithout(t, fmt.Errorf("tracefs uprobes as root: %v", err))
	}
	group := fmt.Sprintf("heapscope_emit_%d", os.Getpid())
	fetch := func(p usdt.Probe, names ...string) string {
		var s []string
		for i, a := range p.Args {
			field, _, ok := usdt.PtRegsX86(a.Reg)
			if !ok {
				t.Fatalf("argument %+v", a)
			}
			s = append(s, fmt.Sprintf("%s=%%%s:u64", names[i], field))
		}
		return strings.Join(s, " ")
	}
	defs := []string{
		fmt.Sprintf("p:%s/alloc %s:%#x(%#x) %s", group, path, alloc.Offset, alloc.SemaphoreOffset, fetch(alloc, "ptr", "size", "weight")),
		fmt.Sprintf("p:%s/free %s:%#x(%#x) %s", group, path, free.Offset, free.SemaphoreOffset, fetch(free, "ptr")),
	}
	appendLine := func(p, line string) error {
		fd, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			return err
		}
		_, err = fd.WriteString(line + "\n")
		if cerr := fd.Close(); err == nil {
			err = cerr
		}
		return err
	}
	inst := filepath.Join(tracefs, "instances", group)
	if err := os.Mkdir(inst, 0o700); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(inst)
	if err := os.WriteFile(filepath.Join(inst, "buffer_size_kb"), []byte("16384"), 0); err != nil {
		t.Fatal(err)
	}
	// Each hit names its thread and its process ("-TID (PID)").
	if err := os.WriteFile(filepath.Join(inst, "options", "record-tgid"), []byte("1"), 0); err != nil {
		t.Fatal(err)
	}
	for _, d := range defs {
		if err := appendLine(tracefs+"/uprobe_events", d); err != nil {
			t.Fatalf("%s: %v", d, err)
		}
	}
	enable := filepath.Join(inst, "events", group, "enable")
	defer func() {
		os.WriteFile(enable, []byte("0"), 0)
		for _, n := range []string{"alloc", "free"} {
			appendLine(tracefs+"/uprobe_events", "-:"+group+"/"+n)
		}
	}()
	if err := os.WriteFile(enable, []byte("1"), 0); err != nil {
		t.Fatal(err)
	}
	f()
	os.WriteFile(enable, []byte("0"), 0)
	trace, err := os.ReadFile(filepath.Join(inst, "trace"))
	if err != nil {
		t.Fatal(err)
	}
	// "# entries-in-buffer/entries-written: 2000/2000   #P:2": none lost.
	if m := regexp.MustCompile(`entries-in-buffer/entries-written: (\d+)/(\d+)`).FindSubmatch(trace); m == nil || string(m[1]) != string(m[2]) {
		t.Fatalf("the trace buffer lost hits: %q", m)
	}
	line := regexp.MustCompile(`-\d+\s+\(\s*(\d+)\)\s+\[\d+\].* (alloc|free): \(\S+\)((?: \w+=\S+)+)`)
	var hits []uprobeHit
	for _, m := range line.FindAllStringSubmatch(string(trace), -1) {
		h := uprobeHit{name: m[2]}
		h.pid, _ = strconv.Atoi(m[1])
		for _, kv := range strings.Fields(m[3]) {
			k, v, _ := strings.Cut(kv, "=")
			n, err := strconv.ParseUint(v, 0, 64)
			if err != nil {
				t.Fatalf("%q: %v", m[0], err)
			}
			switch k {
			case "ptr":
				h.ptr = n
			case "size":
				h.size = n
			case "weight":
				h.weight = n
			}
		}
		hits = append(hits, h)
	}
	return hits
}

// TestEmitUSDT traces sample_threads sampled, with the otel_memory probes
// asked for and a tracer attached to them as OpenTelemetry's profiler
// attaches (uprobes at the probes' file offsets, the semaphores as their
// reference counters): each sampled allocation the trace holds is one
// alloc hit with its address and size and a weight of S/(1-e^(-S/R))
// bytes, each sampled block's free (a realloc's old block included) one
// free hit, and nothing else fires. Without EmitUSDT, nothing fires.
func TestEmitUSDT(t *testing.T) {
	bin := testutil.MustBuild(t, "sample_threads", testutil.Options{})
	path, alloc, free := interposerProbes(t)
	const rate = 16 << 10
	var r *result
	hits := withUprobes(t, path, alloc, free, func() {
		r = trace(t, Config{SampleRate: rate, SampleSeed: 7, EmitUSDT: true}, bin, "3000")
	})
	type key struct {
		ptr, size uint64
	}
	var wantAllocs, gotAllocs []key
	var wantFrees, gotFrees []uint64
	for _, e := range r.of(r.pid) {
		switch e.Kind {
		case event.KindAlloc:
			wantAllocs = append(wantAllocs, key{e.Addr, e.Size})
		case event.KindFree:
			wantFrees = append(wantFrees, e.Addr)
		case event.KindRealloc:
			if e.OldAddr != 0 {
				wantFrees = append(wantFrees, e.OldAddr)
			}
			if e.Addr != 0 {
				wantAllocs = append(wantAllocs, key{e.Addr, e.Size})
			}
		}
	}
	for _, h := range hits {
		if h.pid != r.pid {
			continue // another process that maps the interposer
		}
		if h.name == "free" {
			gotFrees = append(gotFrees, h.ptr)
			continue
		}
		gotAllocs = append(gotAllocs, key{h.ptr, h.size})
		b, _ := analyze.SampleWeights(h.size, rate)
		if math.Abs(float64(h.weight)-math.Round(b)) > 1 {
			t.Errorf("alloc of %d bytes: weight %d, want %.0f", h.size, h.weight, math.Round(b))
		}
	}
	for _, s := range [][]key{wantAllocs, gotAllocs} {
		sort.Slice(s, func(i, j int) bool { return s[i].ptr < s[j].ptr || s[i].ptr == s[j].ptr && s[i].size < s[j].size })
	}
	sort.Slice(wantFrees, func(i, j int) bool { return wantFrees[i] < wantFrees[j] })
	sort.Slice(gotFrees, func(i, j int) bool { return gotFrees[i] < gotFrees[j] })
	if len(wantAllocs) < 100 || fmt.Sprint(gotAllocs) != fmt.Sprint(wantAllocs) || fmt.Sprint(gotFrees) != fmt.Sprint(wantFrees) {
		t.Errorf("the trace holds %d sampled allocations and %d frees; the probes fired %d and %d (equal: allocations %v, frees %v)",
			len(wantAllocs), len(wantFrees), len(gotAllocs), len(gotFrees),
			fmt.Sprint(gotAllocs) == fmt.Sprint(wantAllocs), fmt.Sprint(gotFrees) == fmt.Sprint(wantFrees))
	}
	t.Logf("%d allocations and %d frees sampled, each fired", len(wantAllocs), len(wantFrees))

	// The session did not ask: the semaphores are raised, nothing fires.
	hits = withUprobes(t, path, alloc, free, func() {
		r = trace(t, Config{SampleRate: rate, SampleSeed: 7}, bin, "3000")
	})
	for _, h := range hits {
		if h.pid == r.pid {
			t.Fatalf("without EmitUSDT: %+v", h)
		}
	}
}
