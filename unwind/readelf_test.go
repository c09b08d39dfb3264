package unwind

import (
	"bufio"
	"bytes"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// readelfRow is one row of `readelf --debug-dump=frames-interp`, an
// implementation of CFI independent of this package's.
type readelfRow struct {
	from, to uint64
	cfa      string // "rsp+8", "rbp+16", "exp", ...
	rbp, ra  string // "c-16", "u", "s", ... ("" when readelf prints no column)
}

// readelfRows runs readelf on path and returns the rows of every FDE, with
// each row's end (the next row, or the FDE's end). An FDE that prints no
// table has its CIE's initial row.
func readelfRows(t *testing.T, path string) []readelfRow {
	t.Helper()
	if _, err := exec.LookPath("readelf"); err != nil {
		t.Fatalf("readelf (binutils) is needed: %v", err)
	}
	// readelf exits 1 after warnings (a .gnu_debuglink it cannot follow)
	// and still prints every table
	out, err := exec.Command("readelf", "--debug-dump=frames-interp", path).Output()
	if err != nil && len(out) == 0 {
		t.Fatalf("readelf %s: %v", path, err)
	}
	var rows []readelfRow
	cieRow := map[string]readelfRow{}
	var cols []string
	var cur []readelfRow // rows of the current entry
	var curCIE, curID string
	var curStart, curEnd uint64
	inFDE := false
	flush := func() {
		if curID != "" && !inFDE && len(cur) > 0 {
			cieRow[curID] = cur[len(cur)-1]
		}
		if inFDE {
			if len(cur) == 0 {
				r, ok := cieRow[curCIE]
				if !ok {
					t.Fatalf("readelf: FDE of unknown CIE %s", curCIE)
				}
				r.from, r.to = curStart, curEnd
				cur = []readelfRow{r}
			}
			for i := range cur {
				if i+1 < len(cur) {
					cur[i].to = cur[i+1].from
				} else {
					cur[i].to = curEnd
				}
			}
			rows = append(rows, cur...)
		}
		cur, curID, inFDE = nil, "", false
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		// "r9 (r9)": a register rule is one column
		for i := 1; i < len(f); i++ {
			if strings.HasPrefix(f[i], "(") {
				f[i-1] += " " + f[i]
				f = append(f[:i], f[i+1:]...)
				i--
			}
		}
		switch {
		case len(f) == 0:
		case len(f) >= 2 && f[1] == "ZERO":
			flush()
		case strings.HasPrefix(sc.Text(), "Contents of"):
			flush()
		case len(f) >= 4 && f[3] == "CIE":
			flush()
			curID = f[0]
		case len(f) >= 6 && f[3] == "FDE":
			flush()
			inFDE = true
			curCIE = strings.TrimPrefix(f[4], "cie=")
			pc := strings.Split(strings.TrimPrefix(f[5], "pc="), "..")
			curStart, _ = strconv.ParseUint(pc[0], 16, 64)
			curEnd, _ = strconv.ParseUint(pc[1], 16, 64)
		case f[0] == "LOC":
			cols = f
		default:
			loc, err := strconv.ParseUint(f[0], 16, 64)
			if err != nil || len(f) != len(cols) {
				continue
			}
			r := readelfRow{from: loc, cfa: f[1]}
			for i, c := range cols {
				switch c {
				case "rbp":
					r.rbp = f[i]
				case "ra":
					r.ra = f[i]
				}
			}
			cur = append(cur, r)
		}
	}
	flush()
	return rows
}

// want is the entry the format must give for a readelf row; ok is false
// when either PLT or fallback is right (readelf prints any expression as
// "exp").
func (r readelfRow) want(inPLT bool) (Entry, bool) {
	switch {
	case r.ra == "u":
		return Entry{Kind: KindEnd}, true
	case r.ra != "c-8":
		return Entry{Kind: KindFallback}, true
	}
	if r.cfa == "exp" {
		if inPLT {
			return Entry{Kind: KindPLT, CFAOffset: 8, Aux: 11}, true
		}
		return Entry{}, false
	}
	var k Kind
	var off string
	switch {
	case strings.HasPrefix(r.cfa, "rsp+"):
		k, off = KindRSP, r.cfa[4:]
	case strings.HasPrefix(r.cfa, "rbp+"):
		k, off = KindRBP, r.cfa[4:]
	default:
		return Entry{Kind: KindFallback}, true
	}
	n, err := strconv.Atoi(off)
	if err != nil || n > 0xffff {
		return Entry{Kind: KindFallback}, true
	}
	e := Entry{Kind: k, CFAOffset: uint16(n)}
	switch {
	case r.rbp == "" || r.rbp == "u" || r.rbp == "s":
	case strings.HasPrefix(r.rbp, "c-"):
		o, err := strconv.Atoi(r.rbp[1:])
		if err != nil || o%8 != 0 || o < -1024 {
			return Entry{Kind: KindFallback}, true
		}
		e.Aux = uint8(int8(o / 8))
	default:
		return Entry{Kind: KindFallback}, true
	}
	return e, true
}

// checkAgainstReadelf compares the table of path with readelf's rows at
// the first and last byte of every row and at a byte in between.
func checkAgainstReadelf(t *testing.T, path string, minRows int) {
	tab, err := Build(path)
	if err != nil {
		t.Fatal(err)
	}
	rows := readelfRows(t, path)
	if len(rows) < minRows {
		t.Fatalf("readelf gave only %d rows for %s", len(rows), path)
	}
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var pltLo, pltHi uint64
	if s := f.Section(".plt"); s != nil {
		pltLo, pltHi = s.Addr, s.Addr+s.Size
	}
	// addresses covered by more than one FDE are left out: which one wins is
	// not CFI's to say
	sorted := append([]readelfRow(nil), rows...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].from < sorted[j].from })
	overlap := func(a uint64) bool {
		i := sort.Search(len(sorted), func(i int) bool { return sorted[i].from > a })
		n := 0
		for j := i - 1; j >= 0 && j >= i-64; j-- {
			if sorted[j].from <= a && a < sorted[j].to {
				n++
			}
		}
		return n > 1
	}
	checked, mismatches := 0, 0
	for _, r := range rows {
		if r.to <= r.from {
			continue
		}
		for _, a := range []uint64{r.from, r.from + (r.to-r.from)/2, r.to - 1} {
			w, ok := r.want(a >= pltLo && a < pltHi)
			if overlap(a) {
				continue
			}
			got, found := tab.Lookup(a)
			checked++
			if !found {
				mismatches++
				if mismatches <= 10 {
					t.Errorf("%s: %#x: no entry; readelf: %+v", filepath.Base(path), a, r)
				}
				continue
			}
			got.Addr = 0
			if ok && got != w || !ok && got.Kind != KindFallback && got.Kind != KindPLT {
				mismatches++
				if mismatches <= 10 {
					t.Errorf("%s: %#x: got %v, readelf row %+v wants %v", filepath.Base(path), a, got, r, w)
				}
			}
		}
	}
	if mismatches > 0 {
		t.Fatalf("%s: %d of %d addresses differ from readelf", path, mismatches, checked)
	}
	t.Logf("%s: %d addresses match readelf; %d entries, %d bytes", filepath.Base(path), checked, len(tab.Entries), tab.Size())
}

// debianFile returns the path of a file of Debian's packages, failing the
// test when it is missing: these files are the point of the test.
func debianFile(t *testing.T, path string) string {
	t.Helper()
	p, err := filepath.EvalSymlinks(path)
	if err != nil {
		t.Fatalf("%s is needed (Debian package): %v", path, err)
	}
	return p
}

func TestMatchesReadelfLibc(t *testing.T) {
	checkAgainstReadelf(t, debianFile(t, "/lib/x86_64-linux-gnu/libc.so.6"), 10000)
}

func TestMatchesReadelfSqlite3(t *testing.T) {
	checkAgainstReadelf(t, debianFile(t, "/usr/bin/sqlite3"), 1000)
	checkAgainstReadelf(t, debianFile(t, "/usr/lib/x86_64-linux-gnu/libsqlite3.so.0"), 10000)
}

func TestMatchesReadelfPython(t *testing.T) {
	checkAgainstReadelf(t, debianFile(t, "/usr/lib/x86_64-linux-gnu/libpython3.11.so.1.0"), 10000)
}

// A program compiled without unwind tables has its CFI only in
// .debug_frame: the builder reads it (the crt objects' .eh_frame still
// covers _start).
func TestDebugFrame(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "p.c")
	bin := filepath.Join(dir, "p")
	code := `#include <stdlib.h>
volatile void *sink;
__attribute__((noinline)) static void leaf(int n) { char b[300]; b[n] = 1; sink = malloc(n + b[n]); }
__attribute__((noinline)) static void mid(int n) { for (int i = 0; i < n; i++) leaf(i); }
int main(int argc, char **argv) { mid(argc + 5); return 0; }
`
	if err := os.WriteFile(src, []byte(code), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("gcc", "-O1", "-g", "-fno-asynchronous-unwind-tables", "-fno-exceptions", "-fomit-frame-pointer", "-o", bin, src)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	if f.Section(".debug_frame") == nil {
		t.Fatal("gcc wrote no .debug_frame")
	}
	f.Close()
	tab, err := Build(bin)
	if err != nil {
		t.Fatal(err)
	}
	if tab.Stats.DebugFrame == 0 {
		t.Fatal("the .debug_frame was not read")
	}
	checkAgainstReadelf(t, bin, 5)
}
