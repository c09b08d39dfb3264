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

	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/internal/stopped"
	"github.com/heapscope/heapscope/internal/testutil"
	"github.com/heapscope/heapscope/scan"
)

func TestMain(m *testing.M) { testutil.Main(m) }

// eventClass is the event.Class of a scan.Class: the planted blocks and
// the tools' reports are in event's.
func eventClass(c scan.Class) event.Class {
	return [scan.NumClasses]event.Class{
		scan.Unclassified: event.ClassUnknown, scan.DefinitelyLost: event.ClassDefinite,
		scan.IndirectlyLost: event.ClassIndirect, scan.PossiblyLost: event.ClassPossible,
		scan.StillReachable: event.ClassReachable,
	}[c]
}

// scanPlanted runs scan_planted (with args), stops the process it names,
// gathers its roots and scans its planted blocks under both rules.
func scanPlanted(t *testing.T, args ...string) (blocks []testutil.Planted, mc, ls map[string]event.Class) {
	t.Helper()
	bin := testutil.MustBuild(t, "scan_planted", testutil.Options{})
	cmd := exec.Command(bin, args...)
	cmd.Stderr = os.Stderr
	blocks, sb, pid := startPlanted(t, cmd)
	p := stop(t, pid)
	roots, notes := Gather(p, Options{})
	for _, n := range notes {
		t.Log("roots:", n)
	}
	mc, ls = map[string]event.Class{}, map[string]event.Class{}
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
				mc[blocks[v.ID].Label] = eventClass(v.Class)
			} else {
				ls[blocks[v.ID].Label] = eventClass(v.Class)
			}
		}
	}
	t.Logf("stopped %v; %d root ranges, %d register words", p.Paused(), len(roots.Ranges), len(roots.Words))
	p.Resume()
	return blocks, mc, ls
}

// memcheckClasses runs the program under valgrind's Memcheck: the program
// asks for a full leak check at its ready point (VALGRIND_DO_LEAK_CHECK, as
// --leak-check=full does at exit) with every kind shown. It returns the
// class of each planted block (by its size: each has its own, and its own
// allocation stack, so each loss record holds one), the program's own
// expectations under valgrind (the cycle's depends on its addresses there),
// and the number of loss records.
func memcheckClasses(t *testing.T, bin string, args ...string) (map[string]event.Class, []testutil.Planted) {
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
	blocks, pid := testutil.ReadPlanted(t, bufio.NewReader(out))
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
	kinds := map[string]event.Class{"Leak_DefinitelyLost": event.ClassDefinite, "Leak_IndirectlyLost": event.ClassIndirect,
		"Leak_PossiblyLost": event.ClassPossible, "Leak_StillReachable": event.ClassReachable}
	bySize := map[uint64]event.Class{}
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
	return testutil.MemcheckRecords(t, "Memcheck", blocks, bySize), blocks
}

func testPlanted(t *testing.T, args ...string) {
	blocks, mc, ls := scanPlanted(t, args...)
	for _, b := range blocks {
		if mc[b.Label] != b.Class {
			t.Errorf("%s: Memcheck rules: %v, planted %v", b.Label, mc[b.Label], b.Class)
		}
		if want := testutil.PlantedLSanClass(b.Label, b.Class); ls[b.Label] != want {
			t.Errorf("%s: LeakSanitizer rules: %v, want %v", b.Label, ls[b.Label], want)
		}
	}

	bin := testutil.MustBuild(t, "scan_planted", testutil.Options{})
	vg, vgBlocks := memcheckClasses(t, bin, args...)
	for _, b := range vgBlocks {
		if vg[b.Label] != b.Class {
			t.Errorf("%s: Memcheck says %v, planted %v (under valgrind)", b.Label, vg[b.Label], b.Class)
		}
	}
	testutil.SameRoleAsMemcheck(t, blocks, mc, vgBlocks, vg)

	lsan := testutil.LSanPlanted(t, args...)
	for _, b := range blocks {
		got, want := ls[b.Label], lsan[b.Label]
		if got.Lost() != want.Lost() || got != want {
			t.Errorf("%s: heapscope (LeakSanitizer rules) %v, LeakSanitizer %v", b.Label, got, want)
		}
	}
	for _, b := range blocks {
		t.Logf("%-16s heapscope %-15v Memcheck %-15v | heapscope-LSan %-15v LSan %v", b.Label, mc[b.Label], vg[b.Label], ls[b.Label], lsan[b.Label])
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

// startPlanted starts cmd, a scan_planted, and reads its planted blocks,
// as scan.Blocks too (each its index as ID): the program runs on to its end
// once the test is done with it.
func startPlanted(t *testing.T, cmd *exec.Cmd) ([]testutil.Planted, []scan.Block, int) {
	t.Helper()
	in, out := testutil.StartPiped(t, cmd)
	blocks, pid := testutil.ReadPlanted(t, bufio.NewReader(out))
	t.Cleanup(func() { io.WriteString(in, "go\n") })
	var sb []scan.Block
	for i, b := range blocks {
		sb = append(sb, scan.Block{Addr: b.Addr, Size: b.Size, ID: uint64(i)})
	}
	return blocks, sb, pid
}

// stop stops pid until the test ends.
func stop(t *testing.T, pid int) *stopped.Process {
	t.Helper()
	p, err := stopped.Stop(pid, stopped.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Resume() })
	return p
}

// TestEachRootKind: each kind of root Gather finds is what holds its
// planted block: without it, the block is lost.
func TestEachRootKind(t *testing.T) {
	bin := testutil.MustBuild(t, "scan_planted", testutil.Options{})
	blocks, sb, pid := startPlanted(t, exec.Command(bin))
	p := stop(t, pid)
	roots, _ := Gather(p, Options{})
	without := func(drop func(name string) bool, dropWords bool) map[string]event.Class {
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
		got := map[string]event.Class{}
		for _, v := range res.Verdicts {
			got[blocks[v.ID].Label] = eventClass(v.Class)
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
	blocks, sb, pid := startPlanted(t, cmd)
	p := stop(t, pid)
	idx := -1
	for i, b := range blocks {
		if b.Label == "interposer" {
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
			if i != idx && eventClass(v.Class) != blocks[i].Class {
				t.Errorf("%s: %v, planted %v", blocks[i].Label, v.Class, blocks[i].Class)
			}
		}
	}
}

// TestPlantedRepeated scans the planted process 20 times in a row, letting
// it go as soon as its memory is read (Options.AfterRead): the classes are
// the same every time, and no thread is left stopped or traced.
func TestPlantedRepeated(t *testing.T) {
	bin := testutil.MustBuild(t, "scan_planted", testutil.Options{})
	blocks, sb, pid := startPlanted(t, exec.Command(bin))
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
			if eventClass(v.Class) != blocks[k].Class {
				t.Errorf("scan %d: %s: %v, planted %v", i, blocks[k].Label, v.Class, blocks[k].Class)
			}
		}
		for _, th := range testutil.Threads(t, pid) {
			if th.Stopped() || th.Tracer != 0 {
				t.Errorf("scan %d: thread %d in state %c, traced by %d", i, th.TID, th.State, th.Tracer)
			}
		}
	}
}
