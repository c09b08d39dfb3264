package symbolize

import (
	"bufio"
	"debug/elf"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/internal/proc"
	"github.com/heapscope/heapscope/internal/testutil"
)

func TestMain(m *testing.M) { testutil.Main(m) }

// workload is a running symbolize_* workload: the return addresses of its
// stack and the libc functions it printed, and its modules from /proc.
type workload struct {
	pid  int
	pcs  []uint64          // pcs[0] is the return address in capture's caller
	syms map[string]uint64 // "malloc" → address of malloc
	mods []event.Module
}

// run starts bin, reads what it prints up to "ready", and reads its modules.
// The process exits when the test ends.
func run(t *testing.T, bin string) *workload {
	t.Helper()
	cmd := exec.Command(bin)
	cmd.Stderr = os.Stderr
	_, stdout := testutil.StartPiped(t, cmd)
	w := &workload{pid: cmd.Process.Pid, syms: map[string]uint64{}}
	sc := bufio.NewScanner(stdout)
	ready := false
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch {
		case len(f) == 3 && f[0] == "pc":
			v, err := strconv.ParseUint(f[2], 0, 64)
			if err != nil {
				t.Fatalf("bad line %q", sc.Text())
			}
			w.pcs = append(w.pcs, v)
		case len(f) == 3 && f[0] == "sym" && f[2] == "(nil)":
			// dlsym finds nothing in a static executable.
		case len(f) == 3 && f[0] == "sym":
			v, err := strconv.ParseUint(f[2], 0, 64)
			if err != nil {
				t.Fatalf("bad line %q", sc.Text())
			}
			w.syms[f[1]] = v
		case len(f) == 1 && f[0] == "ready":
			ready = true
		}
		if ready {
			break
		}
	}
	if !ready {
		t.Fatalf("%s ended before it was ready: %v", bin, sc.Err())
	}
	go io.Copy(io.Discard, stdout)
	mods, err := proc.Modules(w.pid, 0)
	if err != nil {
		t.Fatal(err)
	}
	w.mods = mods
	return w
}

// module returns the module of w that holds the return address addr.
func (w *workload) module(t *testing.T, addr uint64) event.Module {
	t.Helper()
	for _, m := range w.mods {
		if m.Start <= addr-1 && addr-1 < m.End {
			return m
		}
	}
	t.Fatalf("%#x is in no module of pid %d", addr, w.pid)
	return event.Module{}
}

func (w *workload) symbolizer(o Options) *Symbolizer {
	s := New(o)
	for _, m := range w.mods {
		s.AddModule(m)
	}
	return s
}

// marker returns the line of the workload source that holds "LINE:name".
func marker(t *testing.T, src, name string) int {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	line := 0
	for i, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, "LINE:"+name) && !strings.Contains(l, "LINE:"+name+"_") {
			if line != 0 {
				t.Fatalf("%s: marker %s twice", src, name)
			}
			line = i + 1
		}
	}
	if line == 0 {
		t.Fatalf("%s: no marker %s", src, name)
	}
	return line
}

// fileVaddr converts an address in mapping m of file to the file's virtual
// address, as addr2line wants it.
func fileVaddr(t *testing.T, file string, m event.Module, addr uint64) uint64 {
	t.Helper()
	f, err := elf.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	off := addr - m.Start + m.Offset
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && p.Off <= off && off < p.Off+p.Filesz {
			return off - p.Off + p.Vaddr
		}
	}
	t.Fatalf("%s: offset %#x in no segment", file, off)
	return 0
}

// refFrame is a frame as addr2line gives it: base name of the file.
type refFrame struct {
	Function string
	File     string
	Line     int
}

func (f refFrame) String() string { return fmt.Sprintf("%s %s:%d", f.Function, f.File, f.Line) }

var discriminator = regexp.MustCompile(` \(discriminator \d+\)$`)

// addr2line resolves the virtual addresses of file with binutils' addr2line,
// an independent reference: one slice of frames per address, innermost first.
//
// addr2line names glibc's functions by their internal aliases
// (__GI___libc_free for __libc_free): those are given as the function's name.
func addr2line(t *testing.T, file string, vaddrs ...uint64) [][]refFrame {
	t.Helper()
	res := reference(t, "addr2line", []string{"-a", "-f", "-i", "-C", "-e", file}, vaddrs)
	for _, frames := range res {
		for i := range frames {
			frames[i].Function = strings.TrimPrefix(frames[i].Function, "__GI_")
		}
	}
	return res
}

// llvmSymbolizer is the other reference, LLVM's llvm-symbolizer, in the same
// output format.
func llvmSymbolizer(t *testing.T, file string, vaddrs ...uint64) [][]refFrame {
	t.Helper()
	return reference(t, "llvm-symbolizer", []string{"--output-style=GNU", "-a", "-f", "-i", "-C", "--obj=" + file}, vaddrs)
}

func reference(t *testing.T, tool string, args []string, vaddrs []uint64) [][]refFrame {
	t.Helper()
	for _, v := range vaddrs {
		args = append(args, fmt.Sprintf("%#x", v))
	}
	out, err := exec.Command(tool, args...).Output()
	if err != nil {
		t.Fatalf("%s: %v", tool, err)
	}
	var res [][]refFrame
	lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	for i := 0; i < len(lines); {
		if strings.HasPrefix(lines[i], "0x") {
			res = append(res, nil)
			i++
			continue
		}
		if i+1 >= len(lines) || len(res) == 0 {
			t.Fatalf("%s output: %q", tool, out)
		}
		fn, loc := lines[i], discriminator.ReplaceAllString(lines[i+1], "")
		i += 2
		if fn == "??" {
			fn = ""
		}
		file, line, _ := strings.Cut(loc, ":")
		n, _ := strconv.Atoi(line)
		if file == "??" {
			file = ""
		}
		res[len(res)-1] = append(res[len(res)-1], refFrame{fn, base(file), n})
	}
	if len(res) != len(vaddrs) {
		t.Fatalf("%s gave %d results for %d addresses: %q", tool, len(res), len(vaddrs), out)
	}
	return res
}

func base(file string) string {
	if file == "" {
		return ""
	}
	return filepath.Base(file)
}

func refFrames(frames []Frame) []refFrame {
	var r []refFrame
	for _, f := range frames {
		r = append(r, refFrame{f.Function, base(f.File), f.Line})
	}
	return r
}

func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		t.Fatal(err)
	}
	// Write and rename: dst may be a running executable.
	tmp := dst + ".tmp"
	if err := os.WriteFile(tmp, b, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, dst); err != nil {
		t.Fatal(err)
	}
}

func command(t *testing.T, name string, args ...string) {
	t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}
