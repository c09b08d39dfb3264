package testutil

import (
	"bufio"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/heapscope/heapscope/event"
)

// Planted is a line "block LABEL ADDR SIZE CLASS" of the workload
// scan_planted: a block it planted and the class Memcheck gives it.
type Planted struct {
	Label string
	Addr  uint64
	Size  uint64
	Class event.Class
}

var plantedLine = regexp.MustCompile(`^block (.+) 0x([0-9a-f]+) (\d+) (\w+)$`)

// parsePlanted parses a block line; ok is false for any other line.
func parsePlanted(l string) (b Planted, ok bool, err error) {
	m := plantedLine.FindStringSubmatch(l)
	if m == nil {
		return Planted{}, false, nil
	}
	addr, _ := strconv.ParseUint(m[2], 16, 64)
	size, _ := strconv.ParseUint(m[3], 10, 64)
	c, err := event.ParseClass(m[4])
	return Planted{m[1], addr, size, c}, true, err
}

// ReadPlanted reads scan_planted's block lines up to "ready PID" (passing
// over "waiting PID"), and returns them and the PID.
func ReadPlanted(tb testing.TB, r *bufio.Reader) (blocks []Planted, pid int) {
	tb.Helper()
	for {
		l, err := r.ReadString('\n')
		if err != nil {
			tb.Fatalf("reading scan_planted: %v (%q)", err, l)
		}
		l = strings.TrimSpace(l)
		if p, ok := strings.CutPrefix(l, "ready "); ok {
			pid, _ = strconv.Atoi(p)
			return blocks, pid
		}
		if strings.HasPrefix(l, "waiting ") {
			continue
		}
		b, ok, err := parsePlanted(l)
		if !ok {
			tb.Fatalf("scan_planted said %q", l)
		}
		if err != nil {
			tb.Fatal(err)
		}
		blocks = append(blocks, b)
	}
}

// PlantedLSanClass is what LeakSanitizer's rules make of a planted block's
// Memcheck class: an interior pointer reaches, and a lost cycle is all
// indirect.
func PlantedLSanClass(label string, c event.Class) event.Class {
	switch {
	case c == event.ClassPossible:
		return event.ClassReachable
	case strings.HasPrefix(label, "cycle "):
		return event.ClassIndirect
	}
	return c
}

// LSanPlanted builds scan_planted with -fsanitize=leak and runs it (with
// args): it asks for LeakSanitizer's check at its ready point. It returns
// the class of each planted block by label: the one LeakSanitizer reports
// (direct or indirect leak, matched by size: each block has its own), and
// still reachable for the others. It skips without gcc's liblsan.
func LSanPlanted(tb testing.TB, args ...string) map[string]event.Class {
	tb.Helper()
	bin, err := Build("scan_planted", Options{Flags: []string{"-fsanitize=leak"}})
	if err != nil {
		SkipWithout(tb, err) // gcc's liblsan (Debian's liblsan0) missing
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "LSAN_OPTIONS=exitcode=23")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	// The check ends the program when it finds leaks (exitcode): the
	// block lines come, and no "ready".
	out, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	var blocks []Planted
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if b, ok, _ := parsePlanted(sc.Text()); ok {
			blocks = append(blocks, b)
		}
	}
	cmd.Wait()
	if len(blocks) == 0 {
		tb.Fatalf("the LeakSanitizer build printed no blocks; stderr:\n%s", stderr.String())
	}
	leak := regexp.MustCompile(`(Direct|Indirect) leak of (\d+) byte\(s\) in 1 object`)
	bySize := map[uint64]event.Class{}
	for _, m := range leak.FindAllStringSubmatch(stderr.String(), -1) {
		n, _ := strconv.ParseUint(m[2], 10, 64)
		bySize[n] = event.ClassDefinite
		if m[1] == "Indirect" {
			bySize[n] = event.ClassIndirect
		}
	}
	got := map[string]event.Class{}
	for _, b := range blocks {
		c, ok := bySize[b.Size]
		if !ok {
			c = event.ClassReachable
		}
		got[b.Label] = c
	}
	return got
}

// MemcheckRecords returns the class of each planted block by label from
// Memcheck's loss records of one block each (bySize: a record's direct size
// and kind), and reports an error, naming what, for a block without one.
func MemcheckRecords(tb testing.TB, what string, blocks []Planted, bySize map[uint64]event.Class) map[string]event.Class {
	tb.Helper()
	got := map[string]event.Class{}
	for _, b := range blocks {
		c, ok := bySize[b.Size]
		if !ok {
			tb.Errorf("%s has no loss record of %d bytes (%s)", what, b.Size, b.Label)
		}
		got[b.Label] = c
	}
	return got
}

// SameRoleAsMemcheck reports an error for each planted block that has the
// same class in the native run (blocks) as under valgrind (vgBlocks), the
// same role, whose class in got is not Memcheck's (vg): a cycle's block is
// definite by its address, which differs under valgrind, so only the
// blocks of the same role compare.
func SameRoleAsMemcheck(tb testing.TB, blocks []Planted, got map[string]event.Class, vgBlocks []Planted, vg map[string]event.Class) {
	tb.Helper()
	native := map[string]event.Class{}
	for _, b := range blocks {
		native[b.Label] = b.Class
	}
	for _, b := range vgBlocks {
		if native[b.Label] == b.Class && got[b.Label] != vg[b.Label] {
			tb.Errorf("%s: heapscope %v, Memcheck %v", b.Label, got[b.Label], vg[b.Label])
		}
	}
}
