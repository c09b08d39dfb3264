package ebpf

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/internal/preload"
	"github.com/heapscope/heapscope/internal/testutil"
	"github.com/heapscope/heapscope/unwind"
)

var cfiBuild = testutil.Options{NoFramePointers: true, Flags: []string{"-fno-optimize-sibling-calls"}}

// cfiChains runs ebpf_cfi, built without frame pointers, attached while it
// waits, and returns, for each allocation size the workload makes (101 in
// leak_a, 202 in leak_b, 404 in churn), the call chains its stacks gave
// (function names, innermost first, to main) with their counts, and the
// blocks of each size left live.
func cfiChains(t *testing.T, cfg Config, k int) (map[uint64]map[string]int, map[uint64]int, *Tracer) {
	bin := testutil.MustBuild(t, "ebpf_cfi", cfiBuild)
	rec := newRecorder(t)
	tr := newTracer(t, cfg, rec)
	w := startWorkload(t, bin, strconv.Itoa(k))
	if err := tr.Attach(w.pid()); err != nil {
		t.Fatal(err)
	}
	w.release(t)
	log := parseLog(t, w.lines(t, "done"))
	mustFlush(t, tr)
	chains, leaks := rec.chains(w.pid(), siteRanges(t, bin, log.sites))
	return chains, leaks, tr
}

// chains returns what cfiChains does from the events of pid.
func (rec *recorder) chains(pid int, r ranges) (map[uint64]map[string]int, map[uint64]int) {
	name := func(ret uint64) string {
		for n := range r {
			if r.in(n, ret) {
				return n
			}
		}
		return "?"
	}
	chains := map[uint64]map[string]int{}
	live := map[uint64]uint64{}
	for _, e := range rec.eventsOf(pid) {
		switch e.Kind {
		case event.KindAlloc:
			if e.Size != 101 && e.Size != 202 && e.Size != 404 {
				continue
			}
			live[e.Addr] = e.Size
			var names []string
			for _, f := range rec.frames(pid, e.Stack) {
				n := name(f)
				names = append(names, n)
				if n == "main" || len(names) == 6 {
					break
				}
			}
			c := chains[e.Size]
			if c == nil {
				c = map[string]int{}
				chains[e.Size] = c
			}
			c[strings.Join(names, " ")]++
		case event.KindFree:
			delete(live, e.Addr)
		}
	}
	leaks := map[uint64]int{}
	for _, size := range live {
		leaks[size]++
	}
	return chains, leaks
}

// dwarfChains is cfiChains with the preload provider's DWARF unwinding
// (run --unwind dwarf) on the same binary.
func dwarfChains(t *testing.T, k int) (map[uint64]map[string]int, map[uint64]int) {
	bin := testutil.MustBuild(t, "ebpf_cfi", cfiBuild)
	rec := newRecorder(t)
	lines, pid := runDWARF(t, rec, bin, strconv.Itoa(k))
	return rec.chains(pid, siteRanges(t, bin, parseLog(t, lines).sites))
}

// runDWARF runs bin to its end under the preload provider with DWARF
// unwinding (run --unwind dwarf), recording into rec: it releases it at
// "ready" and after "done", and returns the lines it printed before
// "done" and its pid.
func runDWARF(t *testing.T, rec *recorder, bin string, args ...string) ([]string, int) {
	t.Helper()
	c, err := preload.New(preload.Config{Unwind: event.UnwindDWARF}, rec)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	if err := c.Prepare(cmd); err != nil {
		t.Fatal(err)
	}
	w := startCmd(t, cmd)
	w.expect(t, "ready")
	w.release(t)
	lines := w.lines(t, "done")
	w.release(t)
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	c.Exited(cmd.Process.Pid, 0, 0)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	return lines, cmd.Process.Pid
}

// TestUnwindTables traces code built without frame pointers: with unwind
// tables, every stack is the whole call chain to main (leak_a's through
// mid_a and top_a, leak_b's through mid_b or mid_b2 by turns) and the leaks
// are exact per function, as the preload provider's DWARF unwinding (run
// --unwind dwarf) gives them on the same binary; the frame-pointer walk, on the same binary, does
// not find them (which shows the workload tests the tables).
func TestUnwindTables(t *testing.T) {
	const k = 200
	chains, leaks, tr := cfiChains(t, Config{UnwindTables: true}, k)
	want := map[uint64]map[string]int{
		101: {"leak_a mid_a top_a main": k},
		202: {"leak_b mid_b top_b main": k / 2, "leak_b mid_b2 top_b main": k / 2},
		404: {"churn main": k},
	}
	if fmt.Sprint(chains) != fmt.Sprint(want) {
		t.Errorf("call chains by size:\n got %v\nwant %v", chains, want)
	}
	if fmt.Sprint(leaks) != fmt.Sprint(map[uint64]int{101: k, 202: k}) {
		t.Errorf("leaks by size %v, want %d of 101 and of 202", leaks, k)
	}
	for _, tb := range tr.UnwindTables() {
		t.Logf("%s: %d entries, %d bytes, built in %v, %.1f%% fallback, err %v", tb.Path, tb.Entries, tb.Bytes, tb.BuildTime, tb.Fallback, tb.Err)
	}
	cut, fallback := tr.UnwindCounters()
	t.Logf("%d stacks cut, %d frames by frame pointer", cut, fallback)
	for _, err := range tr.Warnings() {
		t.Errorf("warning: %v", err)
	}

	dchains, dleaks := dwarfChains(t, k)
	if fmt.Sprint(dchains) != fmt.Sprint(chains) || fmt.Sprint(dleaks) != fmt.Sprint(leaks) {
		t.Errorf("run --unwind dwarf on the same binary: chains %v, leaks %v", dchains, dleaks)
	}

	fp, _, _ := cfiChains(t, Config{}, 20)
	if n := fp[101]["leak_a mid_a top_a main"]; n == 20 {
		t.Errorf("the frame-pointer walk found leak_a's whole chain in code without frame pointers: the workload tests nothing")
	}
}

// pyLeak is a Python script that leaks through a known function: 3000 to
// 3099-byte bytearrays (malloc'd by the interpreter's raw allocator)
// kept in a list, from nested Python calls.
const pyLeak = `
import sys
sys.stdout.write("ready\n"); sys.stdout.flush(); sys.stdin.readline()
keep = []
def leak(n):
    for i in range(n):
        keep.append(bytearray(3000 + i % 100))
def outer(n):
    leak(n)
    keep.extend(bytearray(3000 + i % 100) for i in range(n))
for _ in range(20):
    outer(100)
sys.stdout.write("done\n"); sys.stdout.flush(); sys.stdin.readline()
`

// siteBytes returns the bytes of pid's allocations of 3000 to 3100 bytes
// by site: their first 8 frames, each as file name and file offset (so
// that two runs of one program compare).
func (rec *recorder) siteBytes(pid int) map[string]uint64 {
	rec.mu.Lock()
	var mods []event.Module
	for _, m := range rec.modules {
		if m.PID == uint32(pid) {
			mods = append(mods, m)
		}
	}
	rec.mu.Unlock()
	out := map[string]uint64{}
	for _, e := range rec.eventsOf(pid) {
		if e.Kind != event.KindAlloc || e.Size < 3000 || e.Size >= 3101 {
			continue
		}
		var key []string
		for i, f := range rec.frames(pid, e.Stack) {
			if i == 8 {
				break
			}
			s := fmt.Sprintf("%#x", f)
			for _, m := range mods {
				if f > m.Start && f <= m.End {
					s = fmt.Sprintf("%s+%#x", filepath.Base(m.Path), f-m.Start+m.Offset)
				}
			}
			key = append(key, s)
		}
		out[strings.Join(key, " ")] += e.Size
	}
	return out
}

// TestUnwindTablesPython attaches to Debian's python3.11 (built without
// frame pointers) running a script that leaks through a known function:
// the allocation sites' first 8 frames match those of run --unwind dwarf
// (the preload provider's DWARF unwinding) for at least 95% of the bytes.
func TestUnwindTablesPython(t *testing.T) {
	py, err := exec.LookPath("/usr/bin/python3.11")
	if err != nil {
		t.Fatalf("%v (Debian package python3.11)", err)
	}
	attached := func(cfg Config) map[string]uint64 {
		rec := newRecorder(t)
		tr := newTracer(t, cfg, rec)
		w := startWorkload(t, py, "-c", pyLeak)
		if err := tr.Attach(w.pid()); err != nil {
			t.Fatal(err)
		}
		w.release(t)
		w.expect(t, "done")
		mustFlush(t, tr)
		for _, tb := range tr.UnwindTables() {
			t.Logf("%s: %d entries, %d bytes, built in %v, %.1f%% fallback, err %v", tb.Path, tb.Entries, tb.Bytes, tb.BuildTime, tb.Fallback, tb.Err)
		}
		return rec.siteBytes(w.pid())
	}
	got := attached(Config{UnwindTables: true})

	drec := newRecorder(t)
	_, pid := runDWARF(t, drec, py, "-c", pyLeak)
	want := drec.siteBytes(pid)

	total, match, wantTotal := matchSites(t, got, want)
	t.Logf("%d sites, %d bytes; DWARF run: %d sites, %d bytes; %d bytes match", len(got), total, len(want), wantTotal, match)
	if total == 0 || total != wantTotal || float64(match) < 0.95*float64(total) {
		t.Errorf("%d of %d bytes in sites whose first 8 frames match the DWARF run's (%d bytes there)", match, total, wantTotal)
	}
	// The frame-pointer walk on the same program does not find them.
	if total, match, _ := matchSites(t, attached(Config{}), want); float64(match) >= 0.95*float64(total) {
		t.Errorf("the frame-pointer walk matched %d of %d bytes: the test tests nothing", match, total)
	}
}

// matchSites returns the bytes of got, those in sites of want, and the
// bytes of want.
func matchSites(t *testing.T, got, want map[string]uint64) (total, match, wantTotal uint64) {
	for site, b := range got {
		total += b
		if want[site] > 0 {
			match += b
		} else {
			t.Logf("site of %d bytes not in the DWARF run: %s", b, site)
		}
	}
	for _, b := range want {
		wantTotal += b
	}
	return total, match, wantTotal
}

// BenchmarkUnwindTableBuild measures building the unwind table of a large
// module, as the tracer does once per file: the time, the memory it
// allocates (B/op), and the table's entries and size.
func BenchmarkUnwindTableBuild(b *testing.B) {
	for _, path := range []string{"/usr/bin/python3.11", "/usr/lib/x86_64-linux-gnu/libc.so.6", "/usr/lib/x86_64-linux-gnu/libstdc++.so.6"} {
		b.Run(filepath.Base(path), func(b *testing.B) {
			b.ReportAllocs()
			var tb *unwind.Table
			for i := 0; i < b.N; i++ {
				var err error
				if tb, err = unwind.Build(path); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(tb.Entries)), "entries")
			b.ReportMetric(float64(tb.Size()), "table-bytes")
		})
	}
}

// pyHold is a Python script that maps the library argv[1] (ctypes) and
// waits: "ready", then a line on stdin.
const pyHold = `
import ctypes, sys
ctypes.CDLL(sys.argv[1])
sys.stdout.write("ready\n"); sys.stdout.flush(); sys.stdin.readline()
`

// tableOf returns the table tr reports for a file whose base name starts
// with prefix.
func tableOf(tr *Tracer, prefix string) (UnwindTable, bool) {
	for _, tb := range tr.UnwindTables() {
		if strings.HasPrefix(filepath.Base(tb.Path), prefix) {
			return tb, true
		}
	}
	return UnwindTable{}, false
}

// TestUnwindTablesFreed: the tables of a traced process's files are freed
// when no traced process maps them any more, down to the last chunk of
// kernel memory; a second process mapping them has them made again.
func TestUnwindTablesFreed(t *testing.T) {
	py := testutil.Tool(t, "/usr/bin/python3.11")
	rec := newRecorder(t)
	tr := newTracer(t, Config{UnwindTables: true}, rec)
	for i := 0; i < 2; i++ {
		w := startWorkload(t, py, "-c", pyHold, "liblapack.so.3")
		if err := tr.Attach(w.pid()); err != nil {
			t.Fatal(err)
		}
		used, room, chunks := tr.UnwindUsage()
		t.Logf("attached: %d of %d entries in %d chunks", used, room, chunks)
		if tb, ok := tableOf(tr, "liblapack"); !ok || tb.Err != nil || used < tb.Entries || chunks == 0 {
			t.Fatalf("liblapack's table %+v (found %v), %d entries used in %d chunks", tb, ok, used, chunks)
		}
		if err := tr.Detach(w.pid()); err != nil {
			t.Fatal(err)
		}
		if used, _, chunks := tr.UnwindUsage(); used != 0 || chunks != 0 {
			t.Errorf("detached: %d entries used in %d chunks, want none", used, chunks)
		}
		w.release(t)
		w.wait(t)
	}
}

// TestUnwindTablesShare: another user's traced process cannot take the
// room of the unwind tables from root's. With room for 640,000 entries, a
// python3.11 of another user that maps libz3 (386,222 entries, 529,086 with
// python's and the C library's) gets all but libz3's, over its half; root's
// python3.11 that maps liblapack (294,837 in all) then gets every table.
// First come first served, libz3 took the room liblapack needs.
func TestUnwindTablesShare(t *testing.T) {
	py := testutil.Tool(t, "/usr/bin/python3.11")
	rec := newRecorder(t)
	tr := newTracer(t, Config{UnwindTables: true, UnwindEntries: 640_000}, rec)
	cmd := exec.Command(py, "-c", pyHold, "libz3.so.4")
	testutil.AsOtherUser(t, cmd)
	other := startCmd(t, cmd)
	other.expect(t, "ready")
	if err := tr.Attach(other.pid()); err != nil {
		t.Fatal(err)
	}
	mine := startWorkload(t, py, "-c", pyHold, "liblapack.so.3")
	if err := tr.Attach(mine.pid()); err != nil {
		t.Fatal(err)
	}
	used, room, chunks := tr.UnwindUsage()
	t.Logf("%d of %d entries used, in %d chunks", used, room, chunks)
	z3, _ := tableOf(tr, "libz3")
	if z3.Err == nil || !strings.Contains(z3.Err.Error(), "share") {
		t.Errorf("libz3 of the other user: %+v, want no table for being over the user's share", z3)
	}
	for _, name := range []string{"liblapack", "libblas", "libgfortran", "python3.11", "libc.so"} {
		if tb, ok := tableOf(tr, name); !ok || tb.Err != nil {
			t.Errorf("%s of root's process: %+v (found %v), want its table", name, tb, ok)
		}
	}
	for _, w := range []*workload{other, mine} {
		w.release(t)
		w.wait(t)
	}
}

// TestUnwindNoTableCounted: with no room for any table, the stacks of
// ebpf_cfi (built without frame pointers) are cut in its code, and each is
// counted as cut for want of a table; with room, none is.
func TestUnwindNoTableCounted(t *testing.T) {
	const k = 200
	_, _, tr := cfiChains(t, Config{UnwindTables: true, UnwindEntries: 8}, k)
	st := tr.Stats()
	t.Logf("no room: %+v", st)
	// leak_a's, leak_b's and churn's allocations, k of each, go through
	// ebpf_cfi's code without frame pointers.
	if st.StacksCutNoTable < 3*k || st.StacksCut < st.StacksCutNoTable {
		t.Errorf("no room for tables: %d stacks cut for want of one, %d cut in all; want at least %d", st.StacksCutNoTable, st.StacksCut, 3*k)
	}
	_, _, tr = cfiChains(t, Config{UnwindTables: true}, k)
	if st := tr.Stats(); st.StacksCutNoTable != 0 || st.StacksCut != 0 {
		t.Errorf("room for the tables: %d stacks cut, %d for want of a table; want none", st.StacksCut, st.StacksCutNoTable)
	}
}
