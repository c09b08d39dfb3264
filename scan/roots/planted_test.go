package roots

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/heapscope/heapscope/internal/stopped"
	"github.com/heapscope/heapscope/internal/testutil"
	"github.com/heapscope/heapscope/scan"
)

func TestMain(m *testing.M) { testutil.Main(m) }

// plantedBlock is a line "block LABEL ADDR SIZE CLASS" of scan_planted.
type plantedBlock struct {
	label string
	addr  uint64
	size  uint64
	class scan.Class // Memcheck's, as the program planted it
}

var classWords = map[string]scan.Class{
	"definite": scan.DefinitelyLost, "indirect": scan.IndirectlyLost,
	"possible": scan.PossiblyLost, "reachable": scan.StillReachable,
}

var blockLine = regexp.MustCompile(`^block (.+) 0x([0-9a-f]+) (\d+) (\w+)$`)

// readPlanted reads scan_planted's block lines up to "ready PID".
func readPlanted(t *testing.T, r *bufio.Reader) (blocks []plantedBlock, pid int) {
	t.Helper()
	for {
		l, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("reading scan_planted: %v (%q)", err, l)
		}
		l = strings.TrimSpace(l)
		if p, ok := strings.CutPrefix(l, "ready "); ok {
			pid, _ = strconv.Atoi(p)
			return blocks, pid
		}
		m := blockLine.FindStringSubmatch(l)
		if m == nil {
			t.Fatalf("scan_planted said %q", l)
		}
		addr, _ := strconv.ParseUint(m[2], 16, 64)
		size, _ := strconv.ParseUint(m[3], 10, 64)
		blocks = append(blocks, plantedBlock{m[1], addr, size, classWords[m[4]]})
	}
}

// lsanClass is what LeakSanitizer's rules make of a Memcheck class: an
// interior pointer reaches, and a lost cycle is all indirect.
func lsanClass(label string, c scan.Class) scan.Class {
	switch {
	case c == scan.PossiblyLost:
		return scan.StillReachable
	case strings.HasPrefix(label, "cycle "):
		return scan.IndirectlyLost
	}
	return c
}

// scanPlanted runs scan_planted (with args), stops the process it names,
// gathers its roots and scans its planted blocks under both rules.
func scanPlanted(t *testing.T, args ...string) (blocks []plantedBlock, mc, ls map[string]scan.Class) {
	t.Helper()
	bin := testutil.MustBuild(t, "scan_planted", testutil.Options{})
	cmd := exec.Command(bin, args...)
	cmd.Stderr = os.Stderr
	in, out := testutil.StartPiped(t, cmd)
	blocks, pid := readPlanted(t, bufio.NewReader(out))
	p, err := stopped.Stop(pid, stopped.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Resume()
	roots, notes := Gather(p, Options{})
	for _, n := range notes {
		t.Log("roots:", n)
	}
	var sb []scan.Block
	for i, b := range blocks {
		sb = append(sb, scan.Block{Addr: b.addr, Size: b.size, ID: uint64(i)})
	}
	mc, ls = map[string]scan.Class{}, map[string]scan.Class{}
	for _, rules := range []scan.Rules{scan.Memcheck, scan.LeakSanitizer} {
		res, err := scan.Scan(sb, p, roots, scan.Options{Rules: rules})
		if err != nil {
			t.Fatal(err)
		}
		for _, u := range res.Unread {
			t.Logf("%v: unread %s %#x+%d: %v", rules, u.Root, u.Addr, u.Size, u.Err)
		}
		for _, v := range res.Verdicts {
			if rules == scan.Memcheck {
				mc[blocks[v.ID].label] = v.Class
			} else {
				ls[blocks[v.ID].label] = v.Class
			}
		}
	}
	t.Logf("stopped %v; %d root ranges, %d register words", p.Paused(), len(roots.Ranges), len(roots.Words))
	p.Resume()
	io.WriteString(in, "go\n")
	cmd.Wait()
	return blocks, mc, ls
}

// memcheckClasses runs the program under valgrind's Memcheck: the program
// asks for a full leak check at its ready point (VALGRIND_DO_LEAK_CHECK, as
// --leak-check=full does at exit) with every kind shown. It returns the
// class of each planted block (by its size: each has its own, and its own
// allocation stack, so each loss record holds one), the program's own
// expectations under valgrind (the cycle's depends on its addresses there),
// and the number of loss records.
func memcheckClasses(t *testing.T, bin string, args ...string) (map[string]scan.Class, []plantedBlock) {
	t.Helper()
	vg := testutil.Tool(t, "valgrind")
	dir := t.TempDir()
	cmd := exec.Command(vg, append([]string{"--leak-check=no", "--show-leak-kinds=all", "--xml=yes",
		"--xml-file=" + filepath.Join(dir, "vg.%p.xml"), bin}, args...)...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	blocks, pid := readPlanted(t, bufio.NewReader(out))
	io.Copy(io.Discard, out)
	cmd.Wait()
	x, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("vg.%d.xml", pid)))
	if err != nil {
		t.Fatal(err)
	}
	// The first leak check's records come between the first two <status>.
	s := string(x)
	if i := strings.Index(s, "<status>"); i >= 0 {
		s = s[i+1:]
		if j := strings.Index(s, "<status>"); j >= 0 {
			s = s[:j]
		}
	}
	kinds := map[string]scan.Class{"Leak_DefinitelyLost": scan.DefinitelyLost, "Leak_IndirectlyLost": scan.IndirectlyLost,
		"Leak_PossiblyLost": scan.PossiblyLost, "Leak_StillReachable": scan.StillReachable}
	bySize := map[uint64]scan.Class{}
	record := regexp.MustCompile(`(?s)<error>.*?<kind>(\w+)</kind>.*?<text>([\d,]+) (?:\(([\d,]+) direct, [\d,]+ indirect\) )?bytes in (\d+) blocks`)
	for _, m := range record.FindAllStringSubmatch(s, -1) {
		size := m[2]
		if m[3] != "" {
			size = m[3] // a definitely lost record counts the indirect bytes too
		}
		n, _ := strconv.ParseUint(strings.ReplaceAll(size, ",", ""), 10, 64)
		if m[4] == "1" {
			bySize[n] = kinds[m[1]]
		}
	}
	got := map[string]scan.Class{}
	for _, b := range blocks {
		c, ok := bySize[b.size]
		if !ok {
			t.Errorf("Memcheck has no loss record of %d bytes (%s)", b.size, b.label)
		}
		got[b.label] = c
	}
	return got, blocks
}

// lsanClasses builds the program with -fsanitize=leak and runs it: it asks
// for LeakSanitizer's check at its ready point. It returns the class of
// each planted block LeakSanitizer reports (direct or indirect leak), and
// StillReachable for the others.
func lsanClasses(t *testing.T, args ...string) map[string]scan.Class {
	t.Helper()
	bin, err := testutil.Build("scan_planted", testutil.Options{Flags: []string{"-fsanitize=leak"}})
	if err != nil {
		testutil.SkipWithout(t, err) // gcc's liblsan (Debian's liblsan0) missing
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "LSAN_OPTIONS=exitcode=23")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var blocks []plantedBlock
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if m := blockLine.FindStringSubmatch(sc.Text()); m != nil {
			size, _ := strconv.ParseUint(m[3], 10, 64)
			blocks = append(blocks, plantedBlock{label: m[1], size: size})
		}
	}
	cmd.Wait()
	leak := regexp.MustCompile(`(Direct|Indirect) leak of (\d+) byte\(s\) in 1 object`)
	bySize := map[uint64]scan.Class{}
	for _, m := range leak.FindAllStringSubmatch(stderr.String(), -1) {
		n, _ := strconv.ParseUint(m[2], 10, 64)
		bySize[n] = scan.DefinitelyLost
		if m[1] == "Indirect" {
			bySize[n] = scan.IndirectlyLost
		}
	}
	if len(blocks) == 0 {
		t.Fatalf("the LeakSanitizer build printed no blocks; stderr:\n%s", stderr.String())
	}
	got := map[string]scan.Class{}
	for _, b := range blocks {
		c, ok := bySize[b.size]
		if !ok {
			c = scan.StillReachable
		}
		got[b.label] = c
	}
	return got
}

func testPlanted(t *testing.T, args ...string) {
	blocks, mc, ls := scanPlanted(t, args...)
	for _, b := range blocks {
		if mc[b.label] != b.class {
			t.Errorf("%s: Memcheck rules: %v, planted %v", b.label, mc[b.label], b.class)
		}
		if want := lsanClass(b.label, b.class); ls[b.label] != want {
			t.Errorf("%s: LeakSanitizer rules: %v, want %v", b.label, ls[b.label], want)
		}
	}

	bin := testutil.MustBuild(t, "scan_planted", testutil.Options{})
	vg, vgBlocks := memcheckClasses(t, bin, args...)
	for _, b := range vgBlocks {
		if vg[b.label] != b.class {
			t.Errorf("%s: Memcheck says %v, planted %v (under valgrind)", b.label, vg[b.label], b.class)
		}
	}
	native := map[string]scan.Class{}
	for _, b := range blocks {
		native[b.label] = b.class
	}
	for _, b := range vgBlocks {
		// The same role (a cycle's block is definite by its address,
		// which differs under valgrind): the same class.
		if native[b.label] == b.class && mc[b.label] != vg[b.label] {
			t.Errorf("%s: heapscope %v, Memcheck %v", b.label, mc[b.label], vg[b.label])
		}
	}

	lsan := lsanClasses(t, args...)
	for _, b := range blocks {
		got, want := ls[b.label], lsan[b.label]
		if got.Lost() != want.Lost() || got != want {
			t.Errorf("%s: heapscope (LeakSanitizer rules) %v, LeakSanitizer %v", b.label, got, want)
		}
	}
	for _, b := range blocks {
		t.Logf("%-16s heapscope %-15v Memcheck %-15v | heapscope-LSan %-15v LSan %v", b.label, mc[b.label], vg[b.label], ls[b.label], lsan[b.label])
	}
}

// TestPlanted: every planted block's class equals what the program planted,
// Memcheck's, and (under LeakSanitizer's rules) LeakSanitizer's: a lost list
// whose nodes hold children, a lost cycle, a block held only through an
// interior pointer (and its child), a block held by another thread's stack,
// one only by a register of a thread waiting in a system call, by static
// TLS of the main thread and of another thread, by a global, and by a block
// that is itself leaked.
func TestPlanted(t *testing.T) { testPlanted(t) }

// TestPlantedFork: blocks planted before a fork, one dropped in the child,
// and blocks the child allocates, scanned in the child.
func TestPlantedFork(t *testing.T) { testPlanted(t, "fork") }

// TestEachRootKind: each kind of root Gather finds is what holds its
// planted block: without it, the block is lost.
func TestEachRootKind(t *testing.T) {
	bin := testutil.MustBuild(t, "scan_planted", testutil.Options{})
	cmd := exec.Command(bin)
	in, out := testutil.StartPiped(t, cmd)
	blocks, pid := readPlanted(t, bufio.NewReader(out))
	defer io.WriteString(in, "go\n")
	p, err := stopped.Stop(pid, stopped.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Resume()
	roots, _ := Gather(p, Options{})
	var sb []scan.Block
	for i, b := range blocks {
		sb = append(sb, scan.Block{Addr: b.addr, Size: b.size, ID: uint64(i)})
	}
	without := func(drop func(name string) bool, dropWords bool) map[string]scan.Class {
		r := scan.Roots{}
		if !dropWords {
			r.Words = roots.Words
		}
		for _, rg := range roots.Ranges {
			if !drop(rg.Name) {
				r.Ranges = append(r.Ranges, rg)
			}
		}
		res, err := scan.Scan(sb, p, r, scan.Options{})
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]scan.Class{}
		for _, v := range res.Verdicts {
			got[blocks[v.ID].label] = v.Class
		}
		return got
	}
	none := func(string) bool { return false }
	for _, c := range []struct {
		what   string
		drop   func(string) bool
		words  bool
		losing []string
	}{
		{"registers", none, true, []string{"register"}},
		{"stacks", func(n string) bool { return strings.HasPrefix(n, "stack of ") }, false, []string{"stack", "tls thread"}},
		{"TLS", func(n string) bool { return strings.HasPrefix(n, "TLS of ") }, false, []string{"tls main"}},
		{"module segments", func(n string) bool { return strings.HasSuffix(n, " writable segment") }, false, []string{"global", "interior"}},
	} {
		got := without(c.drop, c.words)
		for _, l := range c.losing {
			if !got[l].Lost() {
				t.Errorf("without %s, %q is %v: it should be lost", c.what, l, got[l])
			}
		}
	}
}

// TestInterposerExcluded: a block that only heapscope's interposer holds
// (a stand-in preloaded under its name) is lost: the interposer's segments
// are not roots, unless Options.Exclude says otherwise.
func TestInterposerExcluded(t *testing.T) {
	lib, err := testutil.Build("scan_interposer", testutil.Options{Flags: []string{"-shared", "-fPIC"}})
	if err != nil {
		t.Fatal(err)
	}
	named := filepath.Join(t.TempDir(), "libheapscope_preload-0123456789abcdef.so")
	b, err := os.ReadFile(lib)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(named, b, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := testutil.MustBuild(t, "scan_planted", testutil.Options{})
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "LD_PRELOAD="+named)
	in, out := testutil.StartPiped(t, cmd)
	blocks, pid := readPlanted(t, bufio.NewReader(out))
	defer io.WriteString(in, "go\n")
	p, err := stopped.Stop(pid, stopped.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Resume()
	var sb []scan.Block
	idx := -1
	for i, b := range blocks {
		sb = append(sb, scan.Block{Addr: b.addr, Size: b.size, ID: uint64(i)})
		if b.label == "interposer" {
			idx = i
		}
	}
	if idx < 0 {
		t.Fatal("scan_planted did not find the stand-in interposer's slot")
	}
	for _, c := range []struct {
		exclude func(string) bool
		want    scan.Class
	}{
		{nil, scan.DefinitelyLost},
		{func(string) bool { return false }, scan.StillReachable},
	} {
		roots, _ := Gather(p, Options{Exclude: c.exclude})
		res, err := scan.Scan(sb, p, roots, scan.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if got := res.Verdicts[idx].Class; got != c.want {
			t.Errorf("exclude %v: the block the interposer holds is %v, want %v", c.exclude != nil, got, c.want)
		}
		for i, v := range res.Verdicts {
			if i != idx && v.Class != blocks[i].class {
				t.Errorf("%s: %v, planted %v", blocks[i].label, v.Class, blocks[i].class)
			}
		}
	}
}

// TestPlantedRepeated scans the planted process 20 times in a row, letting
// it go as soon as its memory is read (Options.AfterRead): the classes are
// the same every time, and no thread is left stopped or traced.
func TestPlantedRepeated(t *testing.T) {
	bin := testutil.MustBuild(t, "scan_planted", testutil.Options{})
	cmd := exec.Command(bin)
	in, out := testutil.StartPiped(t, cmd)
	blocks, pid := readPlanted(t, bufio.NewReader(out))
	defer io.WriteString(in, "go\n")
	var sb []scan.Block
	for i, b := range blocks {
		sb = append(sb, scan.Block{Addr: b.addr, Size: b.size, ID: uint64(i)})
	}
	for i := 0; i < 20; i++ {
		p, err := stopped.Stop(pid, stopped.Options{})
		if err != nil {
			t.Fatal(err)
		}
		roots, _ := Gather(p, Options{})
		res, err := scan.Scan(sb, p, roots, scan.Options{AfterRead: func() { p.Resume() }})
		p.Resume()
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range res.Verdicts {
			if v.Class != blocks[k].class {
				t.Errorf("scan %d: %s: %v, planted %v", i, blocks[k].label, v.Class, blocks[k].class)
			}
		}
		tasks, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
		if err != nil {
			t.Fatal(err)
		}
		for _, task := range tasks {
			b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/task/" + task.Name() + "/status")
			if err != nil {
				continue
			}
			for _, l := range strings.Split(string(b), "\n") {
				if f := strings.Fields(l); len(f) >= 2 && ((f[0] == "State:" && (f[1] == "t" || f[1] == "T")) || (f[0] == "TracerPid:" && f[1] != "0")) {
					t.Errorf("scan %d: thread %s: %s", i, task.Name(), l)
				}
			}
		}
	}
}
