package heapscope

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/heapscope/heapscope/analyze"
	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/internal/load"
	"github.com/heapscope/heapscope/internal/proc"
	"github.com/heapscope/heapscope/internal/testutil"
	"github.com/heapscope/heapscope/internal/testutil/tracetest"
	"github.com/heapscope/heapscope/report"
	"github.com/heapscope/heapscope/tracefile"
)

// rundownProgram is census_rundown running, with the blocks it holds.
type rundownProgram struct {
	cmd    *exec.Cmd
	in     io.Writer
	out    *bufio.Reader
	blocks map[uint64]uint64 // address → usable size
	nodes  map[uint64]bool   // the blocks only the table holds
}

func startRundown(t *testing.T) *rundownProgram {
	t.Helper()
	cmd := exec.Command(testutil.MustBuild(t, "census_rundown", testutil.Options{}))
	in, out := testutil.StartPiped(t, cmd)
	p := &rundownProgram{cmd: cmd, in: in, out: bufio.NewReader(out), blocks: map[uint64]uint64{}, nodes: map[uint64]bool{}}
	for {
		line, err := p.out.ReadString('\n')
		if err != nil {
			t.Fatalf("census_rundown: %v", err)
		}
		f := strings.Fields(line)
		if len(f) == 1 && f[0] == "ready" {
			return p
		}
		if len(f) != 3 || f[0] != "b" && f[0] != "n" {
			t.Fatalf("census_rundown said %q", line)
		}
		a, _ := strconv.ParseUint(f[1], 16, 64)
		n, _ := strconv.ParseUint(f[2], 16, 64)
		p.blocks[a] = n
		p.nodes[a] = f[0] == "n"
	}
}

func (p *rundownProgram) step(t *testing.T, want string) {
	t.Helper()
	fmt.Fprintln(p.in)
	if want == "" {
		return
	}
	line, err := p.out.ReadString('\n')
	if err != nil || strings.TrimSpace(line) != want {
		t.Fatalf("census_rundown said %q (%v), want %q", line, err, want)
	}
}

func findCensus(t *testing.T, notes []event.Note) *event.Census {
	t.Helper()
	for _, n := range notes {
		if c, ok := n.(event.Census); ok {
			return &c
		}
	}
	t.Fatalf("no census among the trace's %d notes", len(notes))
	return nil
}

// TestCensusAtAttach: a process that frees, after the attach, everything it
// held before it shows no unmatched free, and its live heap falls from the
// whole heap at the census to what glibc keeps.
func TestCensusAtAttach(t *testing.T) {
	requireEBPF(t)
	p := startRundown(t)
	file := filepath.Join(t.TempDir(), "rundown.hst")
	s, err := Start("census-at-attach", Properties{File: file, CensusScan: true}, []int{p.cmd.Process.Pid})
	if err != nil {
		t.Fatal(err)
	}
	cs := s.Censuses()
	if len(cs) != 1 || !cs[0].Taken || !cs[0].Scanned || cs[0].Warning != "" {
		s.Stop()
		t.Fatalf("censuses %+v", cs)
	}
	p.step(t, "freed")
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	p.step(t, "")

	// The census in the trace holds the program's blocks, with their
	// usable sizes; the scan at the census named the table that holds
	// the nodes, and classified every block.
	notes := tracetest.Notes(t, file).Notes
	c := findCensus(t, notes)
	heldBy := map[string]uint64{}
	for i, b := range c.Blocks {
		if p.nodes[b.Addr] {
			g := c.Groups[c.BlockGroups[i]]
			heldBy[g.HeldBy] = g.Held
		}
	}
	if len(heldBy) != 1 || heldBy["a 65544 B block"] != 100 {
		t.Errorf("the nodes' groups are held by %v, want 100 of them by a 65544 B block (the table)", heldBy)
	}
	var v *event.Verdict
	for _, n := range notes {
		if x, ok := n.(event.Verdict); ok {
			v = &x
		}
	}
	if v == nil || v.Time != c.Time || len(v.Blocks) != len(c.Blocks) {
		t.Errorf("the scan's verdict: %+v", v)
	} else {
		classes := map[event.Class]int{}
		for _, b := range v.Blocks {
			if _, ok := p.blocks[b.Addr]; ok {
				classes[b.Class]++
			}
		}
		if classes[event.ClassReachable] != len(p.blocks) {
			t.Errorf("the program's blocks, all held, classified %v", classes)
		}
	}
	in := map[uint64]uint64{}
	var progBytes, otherBytes uint64
	for _, b := range c.Blocks {
		in[b.Addr] = b.Size
		if _, ok := p.blocks[b.Addr]; !ok {
			otherBytes += b.Size
		}
	}
	for a, n := range p.blocks {
		progBytes += n
		if got, ok := in[a]; !ok || got != n {
			t.Errorf("the program's block %#x (%d bytes): in the census %v with %d bytes", a, n, ok, got)
		}
	}
	res := int64(tracefile.DefaultTimeResolution)
	if c.Time != cs[0].Time/res*res || uint64(len(c.Blocks)) != cs[0].Blocks {
		t.Errorf("census note at %d with %d blocks, the session says %d and %d", c.Time, len(c.Blocks), cs[0].Time, cs[0].Blocks)
	}

	loaded, err := load.Trace(file, load.Options{})
	if err != nil {
		t.Fatal(err)
	}
	pr := loaded.Profile
	if pr.Summary.UnmatchedFrees != 0 || pr.Summary.MissedFrees != 0 {
		t.Errorf("%d unmatched and %d missed frees, want none", pr.Summary.UnmatchedFrees, pr.Summary.MissedFrees)
	}
	if len(pr.Rundowns) != 1 {
		t.Fatalf("%d rundowns", len(pr.Rundowns))
	}
	r := pr.Rundowns[0]
	if r.Blocks != uint64(len(c.Blocks)) || r.Traced != 0 {
		t.Errorf("rundown of %d blocks (%d traced), the census has %d", r.Blocks, r.Traced, len(c.Blocks))
	}
	// What is left is glibc's, never the program's.
	if r.LiveBytes > otherBytes || pr.Summary.LiveBytes > otherBytes {
		t.Errorf("left at the end: %d bytes of the rundown, %d in all; the census had %d bytes besides the program's",
			r.LiveBytes, pr.Summary.LiveBytes, otherBytes)
	}
	pre := analyze.Stack{}
	for _, st := range pr.Stacks {
		if st.ID == analyze.PreTrace {
			pre = st
		}
	}
	if pre.Frees < uint64(len(p.blocks)) || pre.FreedBytes < progBytes {
		t.Errorf("the stack of the blocks from before the attach freed %d blocks of %d bytes; the program freed %d of %d",
			pre.Frees, pre.FreedBytes, len(p.blocks), progBytes)
	}
	// The timeline starts from the whole heap and ends at what is left.
	tl := pr.Timeline
	if len(tl) < 2 || tl[0].Bytes < progBytes || tl[len(tl)-1].Bytes != pr.Summary.LiveBytes {
		t.Errorf("timeline from %v to %v; the program held %d bytes, %d are left", tl[0], tl[len(tl)-1], progBytes, pr.Summary.LiveBytes)
	}
	if pr.Peak.Bytes < progBytes || pr.Peak.Time < c.Time {
		t.Errorf("peak %+v, the census at %d found %d bytes of the program's", pr.Peak, c.Time, progBytes)
	}
	if len(pr.Resident) != 1 || pr.Resident[0].RSS == 0 {
		t.Errorf("resident memory explained: %+v", pr.Resident)
	}

	// The report says it, in text and JSON.
	rep, err := report.Load(file, report.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var text strings.Builder
	if err := rep.WriteText(&text, report.TextOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"BEFORE THE TRACE (pid ", "of them (", "RESIDENT MEMORY (pid ", "heap in use", "held from",
		"unmatched frees        0"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("the text report lacks %q:\n%s", want, text.String())
		}
	}
	if strings.Contains(text.String(), "stacks cut short") {
		t.Errorf("the site of the blocks from before the trace counted as a cut stack:\n%s", text.String())
	}
	d := rep.Document(0)
	if len(d.Rundowns) != 1 || d.Rundowns[0].Blocks != r.Blocks || len(d.Resident) != 1 || len(d.Resident[0].Parts) == 0 {
		t.Errorf("JSON: rundowns %+v, resident %+v", d.Rundowns, d.Resident)
	}
	var before bool
	for _, a := range d.Allocations {
		if len(a.Stack) == 1 && a.Stack[0].Function == report.BeforeTraceFunction {
			before = a.Allocations == 0 && a.Frees >= uint64(len(p.blocks))
		}
	}
	if !before {
		t.Errorf("JSON: no site %s with no allocations and the program's frees", report.BeforeTraceFunction)
	}
}

// TestNoCensus: NoCensus leaves the blocks of before the attach unknown,
// and their frees unmatched.
func TestNoCensus(t *testing.T) {
	requireEBPF(t)
	p := startRundown(t)
	file := filepath.Join(t.TempDir(), "nocensus.hst")
	s, err := Start("no-census", Properties{File: file, NoCensus: true}, []int{p.cmd.Process.Pid})
	if err != nil {
		t.Fatal(err)
	}
	if cs := s.Censuses(); len(cs) != 0 {
		t.Errorf("censuses with NoCensus: %+v", cs)
	}
	p.step(t, "freed")
	s.Stop()
	p.step(t, "")
	res, err := load.Trace(file, load.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if n := res.Profile.Summary.UnmatchedFrees; n < uint64(len(p.blocks)) {
		t.Errorf("%d unmatched frees without a census, want at least %d", n, len(p.blocks))
	}
	if len(res.Profile.Rundowns) != 0 {
		t.Errorf("rundowns without a census: %+v", res.Profile.Rundowns)
	}
}

// TestCensusWhileBusy: a census at the attach of a process whose threads
// allocate and free without pause: the events before its stop, the census
// and the events after it are in that order in the trace, so that every
// free matches (held events: see census.go), also when threads were in
// malloc or free at the stop (tried until one was, at most 5 times; a
// try that lost events, the machine too busy for the ring, is not judged).
func TestCensusWhileBusy(t *testing.T) {
	requireEBPF(t)
	bin := testutil.MustBuild(t, "census_busy", testutil.Options{})
	judged, busy := 0, false
	for try := 1; try <= 5 && !busy; try++ {
		b, ok := censusWhileBusy(t, bin, try)
		if ok {
			judged++
			busy = b
		}
	}
	switch {
	case judged == 0:
		t.Fatal("every try lost events")
	case !busy:
		t.Log("no census found malloc busy: the case of threads in malloc at the stop was not met")
	}
}

// censusWhileBusy attaches to census_busy, lets it free everything, checks
// the trace and reports whether malloc was busy at the census, and whether
// the trace was judged (no event lost).
func censusWhileBusy(t *testing.T, bin string, try int) (busy, judged bool) {
	cmd := exec.Command(bin, "400")
	in, out := testutil.StartPiped(t, cmd)
	defer cmd.Process.Kill()
	rd := bufio.NewReader(out)
	expect := func(want string) {
		t.Helper()
		if line, err := rd.ReadString('\n'); err != nil || strings.TrimSpace(line) != want {
			t.Fatalf("census_busy said %q (%v), want %q", line, err, want)
		}
	}
	expect("started")
	file := filepath.Join(t.TempDir(), "busy.hst")
	// A ring of 32 MiB: the checks need every event, on a busy machine too.
	s, err := Start(fmt.Sprintf("census-busy-%d", try), Properties{File: file, Buffers: 512}, []int{cmd.Process.Pid})
	if err != nil {
		t.Fatal(err)
	}
	cs := s.Censuses()
	time.Sleep(300 * time.Millisecond) // churn after the census
	fmt.Fprintln(in)
	expect("done")
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	fmt.Fprintln(in)
	if len(cs) != 1 || !cs[0].Taken {
		t.Fatalf("censuses %+v", cs)
	}
	t.Logf("census: %d blocks, %d stops, paused %v, took %v, busy %v", cs[0].Blocks, cs[0].Stops, cs[0].Paused, cs[0].Took, cs[0].Busy)
	loaded, err := load.Trace(file, load.Options{})
	if err != nil {
		t.Fatal(err)
	}
	pr := loaded.Profile
	r := pr.Rundowns[0]
	t.Logf("rundown: %d blocks before the trace, %d traced, %d freed before the census, %d overtaken, %d left; %d events",
		r.Blocks, r.Traced, r.FreedBefore, r.Overtaken, r.LiveBlocks, pr.Summary.Events)
	if lost := pr.Stats.TotalLost(); lost > 0 {
		t.Logf("%d events lost: the checks need them all", lost)
		return false, false
	}
	if pr.Summary.UnmatchedFrees != 0 || pr.Summary.MissedFrees != 0 {
		t.Errorf("%d unmatched frees, %d missed; want none", pr.Summary.UnmatchedFrees, pr.Summary.MissedFrees)
	}
	// What is left of before the trace is glibc's own (the threads'
	// vectors, kept with their stacks for new threads), none of the
	// program's blocks.
	for _, g := range r.Groups {
		if g.LiveBlocks > 0 && !strings.HasPrefix(g.Name, "glibc: ") {
			t.Errorf("left: %d blocks of %d-%d B %q from before the trace, after the threads freed all of theirs", g.LiveBlocks, g.Lo, g.Hi, g.Name)
		}
	}
	if r.Blocks < 4*128 {
		t.Errorf("%d blocks from before the trace; the threads held 512 from before it", r.Blocks)
	}
	return cs[0].Busy, true
}

// knownProgram is census_known running: its blocks and their kinds.
type knownProgram struct {
	in     io.WriteCloser
	blocks map[uint64]uint64 // address → usable size
	kinds  map[uint64]string // address → "-", a class name, "string" or "holder"
}

func startKnown(t *testing.T) (*exec.Cmd, *knownProgram) {
	t.Helper()
	cmd := exec.Command(testutil.MustBuild(t, "census_known", testutil.Options{CXX: true}))
	in, out := testutil.StartPiped(t, cmd)
	t.Cleanup(func() { in.Close(); cmd.Wait() })
	k := &knownProgram{in: in, blocks: map[uint64]uint64{}, kinds: map[uint64]string{}}
	rd := bufio.NewReader(out)
	for {
		line, err := rd.ReadString('\n')
		if err != nil {
			t.Fatalf("census_known: %v", err)
		}
		f := strings.Fields(line)
		if len(f) == 1 && f[0] == "ready" {
			return cmd, k
		}
		if len(f) == 4 && f[0] == "b" {
			a, _ := strconv.ParseUint(f[1], 16, 64)
			n, _ := strconv.ParseUint(f[2], 16, 64)
			k.blocks[a], k.kinds[a] = n, f[3]
		}
	}
}

// TestSnapshotKnown: the snapshot of census_known is its own list of
// blocks (with glibc's own besides), its C++ objects and strings named,
// its holder found, and its RSS parts add up to smaps' RSS; report reads
// the file.
func TestSnapshotKnown(t *testing.T) {
	cmd, k := startKnown(t)
	pid := cmd.Process.Pid
	file := filepath.Join(t.TempDir(), "known.hst")
	r, err := Snapshot(pid, SnapshotOptions{File: file, Scan: true})
	if err != nil {
		t.Fatal(err)
	}
	if !r.Taken || !r.Scanned || r.Warning != "" {
		t.Errorf("snapshot: %+v", r)
	}
	notes := tracetest.Notes(t, file).Notes
	c := findCensus(t, notes)
	in := map[uint64]int{}
	for i, b := range c.Blocks {
		in[b.Addr] = i
	}
	for a, n := range k.blocks {
		i, ok := in[a]
		if !ok || c.Blocks[i].Size != n {
			t.Errorf("the program's block %#x (%d bytes): in the snapshot %v", a, n, ok)
		}
	}
	named := map[string]int{}
	for i, b := range c.Blocks {
		g := c.Groups[c.BlockGroups[i]]
		kind, mine := k.kinds[b.Addr]
		switch {
		case !mine && !strings.HasPrefix(g.Name, "glibc: "):
			t.Errorf("block %#x (%d bytes, %q) in the snapshot is neither the program's nor glibc's", b.Addr, b.Size, g.Name)
		case mine && kind != "-" && kind != "holder" && g.Name != kind:
			t.Errorf("block %#x: named %q, the program says %q", b.Addr, g.Name, kind)
		}
		if mine {
			named[g.Name]++
		}
	}
	for name, want := range map[string]int{"Circle": 10, "census_test::Widget": 6, "Both": 4, "string": 3} {
		if named[name] != want {
			t.Errorf("%d blocks named %q, the program has %d", named[name], name, want)
		}
	}
	// The program keeps every block in a static array: each group of its
	// blocks is held from the program's writable segment (the scan's
	// marking reaches each block from there first).
	for i, b := range c.Blocks {
		if _, mine := k.blocks[b.Addr]; !mine {
			continue
		}
		if g := c.Groups[c.BlockGroups[i]]; !strings.HasSuffix(g.HeldBy, "writable segment") || g.Held == 0 {
			t.Errorf("block %#x: its group %+v, held from %q", b.Addr, g.Name, g.HeldBy)
			break
		}
	}
	var v *event.Verdict
	var res *event.Resident
	for _, n := range notes {
		switch n := n.(type) {
		case event.Verdict:
			v = &n
		case event.Resident:
			res = &n
		}
	}
	if v == nil || len(v.Blocks) != len(c.Blocks) {
		t.Fatalf("verdict %+v", v)
	}
	for i, b := range v.Blocks {
		if b.Addr != c.Blocks[i].Addr {
			t.Fatalf("verdict block %d at %#x, the census's at %#x", i, b.Addr, c.Blocks[i].Addr)
		}
	}
	if res == nil {
		t.Fatal("no resident memory in the snapshot")
	}
	var sum uint64
	for _, p := range res.Parts {
		sum += p.RSS
	}
	rollup, err := proc.ReadSmapsRollup(pid) // the program waits: its RSS holds still
	if err != nil {
		t.Fatal(err)
	}
	for what, rss := range map[string]uint64{"smaps_rollup at the census": res.Rollup, "smaps_rollup after": rollup.Rss} {
		if d := float64(sum) - float64(rss); d > 0.01*float64(rss) || -d > 0.01*float64(rss) {
			t.Errorf("the RSS parts add up to %d, %s says %d: more than 1%% apart", sum, what, rss)
		}
	}
	t.Logf("snapshot: %d blocks, paused %v; RSS parts %d, smaps_rollup %d then, %d after", len(c.Blocks), r.Paused, sum, res.Rollup, rollup.Rss)

	loaded, err := load.Trace(file, load.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if pr := loaded.Profile; len(pr.Rundowns) != 1 || pr.Rundowns[0].Blocks != uint64(len(c.Blocks)) || pr.Summary.LiveBlocks != uint64(len(c.Blocks)) {
		t.Errorf("the snapshot read back: %+v, live %d blocks", pr.Rundowns, pr.Summary.LiveBlocks)
	}
}

// TestSnapshotRefusesJemalloc: a process whose malloc is jemalloc has no
// snapshot, and says why in one line.
func TestSnapshotRefusesJemalloc(t *testing.T) {
	cmd := testutil.StartRedis(t)
	file := filepath.Join(t.TempDir(), "redis.hst")
	_, err := Snapshot(cmd.Process.Pid, SnapshotOptions{File: file})
	if !errors.Is(err, ErrNotSupported) || strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), "jemalloc") {
		t.Errorf("snapshot of redis-server: %v; want one line naming jemalloc, wrapping ErrNotSupported", err)
	}
	if _, err := os.Stat(file); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a failed snapshot left %s: %v", file, err)
	}
}

// TestAttachJemalloc: a process whose malloc is jemalloc is traced with no
// census, and a one-line warning saying why, kept in the trace.
func TestAttachJemalloc(t *testing.T) {
	requireEBPF(t)
	cmd := testutil.StartRedis(t)
	file := filepath.Join(t.TempDir(), "redis.hst")
	s, err := Start("census-jemalloc", Properties{File: file}, []int{cmd.Process.Pid})
	if err != nil {
		t.Fatal(err)
	}
	cs := s.Censuses()
	s.Stop()
	if len(cs) != 1 || cs[0].Taken || !strings.Contains(cs[0].Warning, "jemalloc") || strings.Contains(cs[0].Warning, "\n") {
		t.Fatalf("censuses of redis-server: %+v; want none, with a one-line warning naming jemalloc", cs)
	}
	t.Logf("warning: %s", cs[0].Warning)
	var warned bool
	for _, n := range tracetest.Notes(t, file).Notes {
		switch n := n.(type) {
		case event.Census:
			t.Errorf("a census of redis-server in the trace")
		case event.Warning:
			warned = warned || n.Code == "census" && n.Text == cs[0].Warning
		}
	}
	if !warned {
		t.Errorf("the trace has no warning of the census")
	}
}

// TestCensusOnUpdate: a process Update adds is censused as Start's are.
func TestCensusOnUpdate(t *testing.T) {
	requireEBPF(t)
	a, b := startRundown(t), startRundown(t)
	file := filepath.Join(t.TempDir(), "update.hst")
	s, err := Start("census-update", Properties{File: file}, []int{a.cmd.Process.Pid})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	if err := s.Update(Change{AddPIDs: []int{b.cmd.Process.Pid}}); err != nil {
		t.Fatal(err)
	}
	cs := s.Censuses()
	if len(cs) != 2 || cs[1].PID != b.cmd.Process.Pid || !cs[1].Taken || cs[1].Blocks < uint64(len(b.blocks)) {
		t.Fatalf("censuses %+v", cs)
	}
	b.step(t, "freed")
	s.Stop()
	loaded, err := load.Trace(file, load.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if n := loaded.Profile.Summary.UnmatchedFrees; n != 0 || len(loaded.Profile.Rundowns) != 2 {
		t.Errorf("%d unmatched frees, %d rundowns; want 0 and 2", n, len(loaded.Profile.Rundowns))
	}
}
