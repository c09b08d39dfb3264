package usdt

import (
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/heapscope/heapscope/internal/testutil"
)

func TestMain(m *testing.M) { testutil.Main(m) }

// readelfProbe is one probe as binutils' readelf -n prints it.
type readelfProbe struct {
	provider, name            string
	location, base, semaphore uint64
	args                      string
}

// readelfProbes runs readelf -n on path: the independent reading the
// parser is checked against.
func readelfProbes(t *testing.T, path string) []readelfProbe {
	t.Helper()
	out, err := exec.Command(testutil.Tool(t, "readelf"), "-n", path).Output()
	if err != nil {
		t.Fatalf("readelf -n %s: %v", path, err)
	}
	var ps []readelfProbe
	var cur *readelfProbe
	for _, line := range strings.Split(string(out), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(line, "Provider: "):
			ps = append(ps, readelfProbe{provider: strings.TrimPrefix(line, "Provider: ")})
			cur = &ps[len(ps)-1]
		case cur == nil:
		case strings.HasPrefix(line, "Name: "):
			cur.name = strings.TrimPrefix(line, "Name: ")
		case strings.HasPrefix(line, "Location: "):
			var err error
			for _, f := range strings.Split(line, ", ") {
				k, v, _ := strings.Cut(f, ": ")
				n, perr := strconv.ParseUint(strings.TrimPrefix(v, "0x"), 16, 64)
				if perr != nil {
					err = perr
				}
				switch k {
				case "Location":
					cur.location = n
				case "Base":
					cur.base = n
				case "Semaphore":
					cur.semaphore = n
				}
			}
			if err != nil {
				t.Fatalf("readelf line %q: %v", line, err)
			}
		case strings.HasPrefix(line, "Arguments:"):
			cur.args = strings.TrimSpace(strings.TrimPrefix(line, "Arguments:"))
		}
	}
	return ps
}

// checkFile compares the parser with readelf on path, and checks what
// readelf does not say: that each probe's file offset holds the nop that
// <sys/sdt.h> emits, and that each semaphore's file offset is inside the
// .probes section at the semaphore's address.
func checkFile(t *testing.T, path string) []Probe {
	t.Helper()
	ps, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	want := readelfProbes(t, path)
	if len(ps) != len(want) {
		t.Fatalf("%s: %d probes, readelf lists %d", path, len(ps), len(want))
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	ef, err := elf.NewFile(strings.NewReader(string(raw)))
	if err != nil {
		t.Fatal(err)
	}
	base := ef.Section(".stapsdt.base")
	probes := ef.Section(".probes")
	for i, p := range ps {
		w := want[i]
		if p.Provider != w.provider || p.Name != w.name || p.Base != w.base || p.Semaphore != w.semaphore || p.ArgsSpec != w.args {
			t.Errorf("%s probe %d: got %s:%s base %#x semaphore %#x args %q, readelf %+v",
				path, i, p.Provider, p.Name, p.Base, p.Semaphore, p.ArgsSpec, w)
		}
		// readelf prints the recorded address; the parser moves it by
		// .stapsdt.base's displacement, 0 in a file never prelinked.
		if base == nil || base.Addr != w.base {
			t.Errorf("%s: .stapsdt.base at %v, the notes say %#x", path, base, w.base)
		} else if p.Address != w.location {
			t.Errorf("%s %s:%s: address %#x, readelf %#x", path, p.Provider, p.Name, p.Address, w.location)
		}
		if p.Offset >= uint64(len(raw)) || raw[p.Offset] != 0x90 {
			t.Errorf("%s %s:%s: no nop at file offset %#x", path, p.Provider, p.Name, p.Offset)
		}
		if p.ArgsErr != nil {
			t.Errorf("%s %s:%s: %v", path, p.Provider, p.Name, p.ArgsErr)
		}
		if got := len(p.Args); got != len(strings.Fields(w.args)) {
			t.Errorf("%s %s:%s: %d arguments from %q", path, p.Provider, p.Name, got, w.args)
		}
		if p.Semaphore == 0 {
			if p.SemaphoreOffset != 0 {
				t.Errorf("%s %s:%s: semaphore offset %#x without a semaphore", path, p.Provider, p.Name, p.SemaphoreOffset)
			}
			continue
		}
		if probes == nil || p.Semaphore < probes.Addr || p.Semaphore+2 > probes.Addr+probes.Size {
			t.Errorf("%s %s:%s: semaphore %#x outside .probes %v", path, p.Provider, p.Name, p.Semaphore, probes)
		} else if off := probes.Offset + (p.Semaphore - probes.Addr); p.SemaphoreOffset != off {
			t.Errorf("%s %s:%s: semaphore offset %#x, want %#x", path, p.Provider, p.Name, p.SemaphoreOffset, off)
		}
	}
	return ps
}

// TestWorkload reads the probes of usdt_sampler, which implements
// OpenTelemetry's otel_memory contract with <sys/sdt.h>.
func TestWorkload(t *testing.T) {
	for _, o := range []testutil.Options{{}, {Opt: "0"}, {NoFramePointers: true, Flags: []string{"-fPIE", "-pie"}}, {Flags: []string{"-no-pie"}}} {
		t.Run(fmt.Sprintf("%+v", o), func(t *testing.T) {
			bin := testutil.MustBuild(t, "usdt_sampler", o)
			ps := checkFile(t, bin)
			alloc := Find(ps, "otel_memory", "alloc")
			free := Find(ps, "otel_memory", "free")
			if len(alloc) != 1 || len(free) != 1 || len(ps) != 2 {
				t.Fatalf("probes %+v", ps)
			}
			if len(alloc[0].Args) != 3 || len(free[0].Args) != 1 {
				t.Fatalf("alloc args %+v, free args %+v", alloc[0].Args, free[0].Args)
			}
			for _, a := range append(alloc[0].Args, free[0].Args...) {
				// Pointers, size_t and uint64_t: unsigned 8-byte values.
				if a.Size != 8 || a.Signed {
					t.Errorf("argument %+v: want an unsigned 8-byte value", a)
				}
			}
			if alloc[0].Semaphore == 0 || free[0].Semaphore == 0 || alloc[0].Semaphore == free[0].Semaphore {
				t.Errorf("semaphores %#x %#x", alloc[0].Semaphore, free[0].Semaphore)
			}
		})
	}
}

// TestSystemFiles reads the probes of Debian's python3.11 (python:*, with
// semaphores) and libstdc++ (libstdcxx:throw and others, without).
func TestSystemFiles(t *testing.T) {
	py := testutil.Tool(t, "/usr/bin/python3.11")
	ps := checkFile(t, py)
	if len(Find(ps, "python", "gc__start")) != 1 {
		t.Errorf("python3.11: no python:gc__start in %+v", ps)
	}
	cxx := "/lib/x86_64-linux-gnu/libstdc++.so.6"
	if _, err := os.Stat(cxx); err != nil {
		testutil.SkipWithout(t, err)
	}
	ps = checkFile(t, cxx)
	if len(Find(ps, "libstdcxx", "throw")) != 1 {
		t.Errorf("libstdc++: no libstdcxx:throw in %+v", ps)
	}
}

// TestNoNotes: a file without the section has no probes and no error.
func TestNoNotes(t *testing.T) {
	bin := testutil.MustBuild(t, "report_known", testutil.Options{})
	ps, err := Open(bin)
	if err != nil || len(ps) != 0 {
		t.Fatalf("Open = %v, %v", ps, err)
	}
}

func TestPtRegsX86(t *testing.T) {
	for reg, want := range map[string]struct {
		field  string
		offset int
	}{"rdi": {"di", 112}, "edi": {"di", 112}, "r12": {"r12", 24}, "r12d": {"r12", 24}, "rbx": {"bx", 40},
		"al": {"ax", 80}, "r15": {"r15", 0}, "rsp": {"sp", 152}, "rip": {"ip", 128}, "r8b": {"r8", 72}} {
		f, off, ok := PtRegsX86(reg)
		if !ok || f != want.field || off != want.offset {
			t.Errorf("PtRegsX86(%q) = %q, %d, %v; want %q, %d", reg, f, off, ok, want.field, want.offset)
		}
	}
	for _, bad := range []string{"", "x0", "r16", "xmm0", "rflags"} {
		if _, _, ok := PtRegsX86(bad); ok {
			t.Errorf("PtRegsX86(%q) ok", bad)
		}
	}
}

func TestParseArgs(t *testing.T) {
	for _, c := range []struct {
		spec string
		want []Arg
	}{
		{"", nil},
		{"8@%rdi", []Arg{{Spec: "8@%rdi", Size: 8, Kind: ArgRegister, Reg: "rdi", Scale: 1}}},
		{"-4@%esi  1@$-5", []Arg{
			{Spec: "-4@%esi", Size: 4, Signed: true, Kind: ArgRegister, Reg: "esi", Scale: 1},
			{Spec: "1@$-5", Size: 1, Kind: ArgConstant, Value: -5, Scale: 1}}},
		{"-4@112(%rsp)", []Arg{{Spec: "-4@112(%rsp)", Size: 4, Signed: true, Kind: ArgMemory, Reg: "rsp", Offset: 112, Scale: 1}}},
		{"8@-80(%rbx)", []Arg{{Spec: "8@-80(%rbx)", Size: 8, Kind: ArgMemory, Reg: "rbx", Offset: -80, Scale: 1}}},
		{"8@16(%rax,%rbx,8)", []Arg{{Spec: "8@16(%rax,%rbx,8)", Size: 8, Kind: ArgMemory, Reg: "rax", Index: "rbx", Scale: 8, Offset: 16}}},
		{"4@counter+8(%rip)", []Arg{{Spec: "4@counter+8(%rip)", Size: 4, Kind: ArgMemory, Reg: "rip", Symbol: "counter", Offset: 8, Scale: 1}}},
		{"8@(%rdx)", []Arg{{Spec: "8@(%rdx)", Size: 8, Kind: ArgMemory, Reg: "rdx", Scale: 1}}},
		{"2@counter", []Arg{{Spec: "2@counter", Size: 2, Kind: ArgMemory, Symbol: "counter", Scale: 1}}},
		{"8@$0xffffffffffffffff", []Arg{{Spec: "8@$0xffffffffffffffff", Size: 8, Kind: ArgConstant, Value: -1, Scale: 1}}},
		{"8@x0 -4@[sp, 16] 8@[x1]", []Arg{
			{Spec: "8@x0", Size: 8, Kind: ArgRegister, Reg: "x0", Scale: 1},
			{Spec: "-4@[sp, 16]", Size: 4, Signed: true, Kind: ArgMemory, Reg: "sp", Offset: 16, Scale: 1},
			{Spec: "8@[x1]", Size: 8, Kind: ArgMemory, Reg: "x1", Scale: 1}}},
		{"%rax", []Arg{{Spec: "%rax", Kind: ArgRegister, Reg: "rax", Scale: 1}}},
	} {
		got, err := ParseArgs(c.spec)
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("ParseArgs(%q) = %+v, %v; want %+v", c.spec, got, err, c.want)
		}
	}
	for _, bad := range []string{"3@%rax", "8@", "8@%", "8@%RAX", "8@$", "8@$x", "8@1(%rax", "8@1(%rax,%rbx,3)", "8@[x1",
		"8@x1]", "8@[q9, 1]", "8@1(rax)", "8@(%rax,%rbx,%rcx,8)", "8@+x(%rip)", "-@%rax", strings.Repeat("8@%rax ", 13)} {
		if a, err := ParseArgs(bad); err == nil {
			t.Errorf("ParseArgs(%q) = %+v, want an error", bad, a)
		}
	}
}

// note builds one stapsdt note of a 64-bit little-endian file.
func note(pc, base, sem uint64, provider, name, args string) []byte {
	desc := make([]byte, 24)
	le := func(b []byte, v uint64) {
		for i := range 8 {
			b[i] = byte(v >> (8 * i))
		}
	}
	le(desc, pc)
	le(desc[8:], base)
	le(desc[16:], sem)
	desc = append(desc, provider+"\x00"+name+"\x00"+args+"\x00"...)
	b := []byte{8, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0}
	b[4] = byte(len(desc))
	b = append(b, "stapsdt\x00"...)
	b = append(b, desc...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

func TestParseNotes(t *testing.T) {
	data := append(note(0x1000, 0x2000, 0x3000, "otel_memory", "alloc", "8@%rdi 8@%rsi 8@%rdx"),
		note(0x1100, 0x2000, 0, "otel_memory", "free", "8@%rdi")...)
	ps, err := ParseNotes(data, leOrder, elf.ELFCLASS64)
	if err != nil || len(ps) != 2 {
		t.Fatalf("ParseNotes = %+v, %v", ps, err)
	}
	if p := ps[0]; p.Address != 0x1000 || p.Base != 0x2000 || p.Semaphore != 0x3000 || p.Provider != "otel_memory" || p.Name != "alloc" || len(p.Args) != 3 {
		t.Errorf("first %+v", p)
	}
	if p := ps[1]; p.Semaphore != 0 || p.Name != "free" || len(p.Args) != 1 {
		t.Errorf("second %+v", p)
	}
	// Damaged: every cut of the section is an error, or fewer probes.
	for n := 0; n < len(data); n++ {
		ps, err := ParseNotes(data[:n], leOrder, elf.ELFCLASS64)
		if err == nil && len(ps) >= 2 {
			t.Errorf("cut at %d: %d probes", n, len(ps))
		}
		if err != nil && !errors.Is(err, ErrFormat) {
			t.Errorf("cut at %d: %v is not ErrFormat", n, err)
		}
	}
	if _, err := ParseNotes(data, leOrder, elf.ELFCLASSNONE); !errors.Is(err, ErrFormat) {
		t.Errorf("class none: %v", err)
	}
}

// TestSemaphoresThroughKernel attaches uprobes to usdt_sampler's probes at
// the parsed file offsets, with the parsed semaphore offsets as their
// reference counters (tracefs uprobe_events, in a trace instance of the
// test's own): the kernel raises the semaphores, which turns the program's
// sampler on, and each probe the sampler says it fired is a hit, with its
// arguments read from the registers the specs name.
func TestSemaphoresThroughKernel(t *testing.T) {
	const tracefs = "/sys/kernel/tracing"
	if _, err := os.Stat(tracefs + "/uprobe_events"); err != nil || os.Geteuid() != 0 {
		testutil.SkipWithout(t, fmt.Errorf("tracefs uprobes as root: %v", err))
	}
	bin := testutil.MustBuild(t, "usdt_sampler", testutil.Options{})
	ps, err := Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	alloc, free := Find(ps, "otel_memory", "alloc"), Find(ps, "otel_memory", "free")
	if len(alloc) != 1 || len(free) != 1 {
		t.Fatalf("probes %+v", ps)
	}
	group := fmt.Sprintf("heapscope_usdt_%d", os.Getpid())
	fetch := func(p Probe, names ...string) string {
		var s []string
		for i, a := range p.Args {
			field, _, ok := PtRegsX86(a.Reg)
			if a.Kind != ArgRegister || !ok {
				t.Fatalf("argument %+v is not in a register", a)
			}
			s = append(s, fmt.Sprintf("%s=%%%s:u64", names[i], field))
		}
		return strings.Join(s, " ")
	}
	defs := []string{
		fmt.Sprintf("p:%s/alloc %s:%#x(%#x) %s", group, bin, alloc[0].Offset, alloc[0].SemaphoreOffset, fetch(alloc[0], "ptr", "size", "weight")),
		fmt.Sprintf("p:%s/free %s:%#x(%#x) %s", group, bin, free[0].Offset, free[0].SemaphoreOffset, fetch(free[0], "ptr")),
	}
	appendLine := func(path, line string) error {
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			return err
		}
		_, err = f.WriteString(line + "\n")
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		return err
	}
	inst := filepath.Join(tracefs, "instances", group)
	if err := os.Mkdir(inst, 0o700); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(inst)
	for _, d := range defs {
		if err := appendLine(tracefs+"/uprobe_events", d); err != nil {
			t.Fatalf("%s: %v", d, err)
		}
	}
	defer func() {
		os.WriteFile(filepath.Join(inst, "events", group, "enable"), []byte("0"), 0)
		for _, n := range []string{"alloc", "free"} {
			appendLine(tracefs+"/uprobe_events", "-:"+group+"/"+n)
		}
	}()
	if err := os.WriteFile(filepath.Join(inst, "events", group, "enable"), []byte("1"), 0); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "65536").Output()
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(inst, "events", group, "enable"), []byte("0"), 0)
	trace, err := os.ReadFile(filepath.Join(inst, "trace"))
	if err != nil {
		t.Fatal(err)
	}
	var firedAllocs, firedFrees, weight int
	var semA, semF int
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) >= 6 && f[0] == "sampler":
			firedAllocs, _ = strconv.Atoi(f[2])
			firedFrees, _ = strconv.Atoi(f[4])
		case len(f) == 3 && f[0] == "semaphores":
			semA, _ = strconv.Atoi(f[1])
			semF, _ = strconv.Atoi(f[2])
		case len(f) > 13 && f[0] == "site" && f[12] == "weight":
			w, _ := strconv.Atoi(f[13])
			weight += w
		}
	}
	if semA != 1 || semF != 1 {
		t.Fatalf("semaphores %d %d while attached, want 1 1:\n%s", semA, semF, out)
	}
	var hitsA, hitsF, hitWeight int
	for _, line := range strings.Split(string(trace), "\n") {
		switch {
		case strings.Contains(line, " alloc: "):
			hitsA++
			i := strings.Index(line, "weight=")
			w, err := strconv.ParseUint(strings.Fields(line[i+len("weight="):])[0], 0, 64)
			if err != nil {
				t.Fatalf("%q: %v", line, err)
			}
			hitWeight += int(w)
		case strings.Contains(line, " free: "):
			hitsF++
		}
	}
	if firedAllocs == 0 || hitsA != firedAllocs || hitsF != firedFrees || hitWeight != weight {
		t.Errorf("the sampler fired %d allocs (weight %d) and %d frees; the probes saw %d (weight %d) and %d",
			firedAllocs, weight, firedFrees, hitsA, hitWeight, hitsF)
	}
}
