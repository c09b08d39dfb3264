package heapscope

import (
	"bufio"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/heapscope/heapscope/analyze"
	"github.com/heapscope/heapscope/analyze/load"
	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/internal/testutil"
	"github.com/heapscope/heapscope/tracefile"
)

// rundownProgram is census_rundown running, with the blocks it holds.
type rundownProgram struct {
	cmd    *exec.Cmd
	in     io.Writer
	out    *bufio.Reader
	blocks map[uint64]uint64 // address → usable size
}

func startRundown(t *testing.T) *rundownProgram {
	t.Helper()
	cmd := exec.Command(testutil.MustBuild(t, "census_rundown", testutil.Options{}))
	in, out := testutil.StartPiped(t, cmd)
	p := &rundownProgram{cmd: cmd, in: in, out: bufio.NewReader(out), blocks: map[uint64]uint64{}}
	for {
		line, err := p.out.ReadString('\n')
		if err != nil {
			t.Fatalf("census_rundown: %v", err)
		}
		f := strings.Fields(line)
		if len(f) == 1 && f[0] == "ready" {
			return p
		}
		if len(f) != 3 || f[0] != "b" {
			t.Fatalf("census_rundown said %q", line)
		}
		a, _ := strconv.ParseUint(f[1], 16, 64)
		n, _ := strconv.ParseUint(f[2], 16, 64)
		p.blocks[a] = n
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

// traceNotes reads the notes of a trace file.
func traceNotes(t *testing.T, path string) []event.Note {
	t.Helper()
	r, err := tracefile.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var ns noteSink
	if err := r.Replay(&ns, tracefile.Window{}); err != nil {
		t.Fatal(err)
	}
	return ns.notes
}

type noteSink struct {
	event.Sink
	notes []event.Note
}

func (s *noteSink) Note(n event.Note) error       { s.notes = append(s.notes, n); return nil }
func (s *noteSink) Process(event.Process) error   { return nil }
func (s *noteSink) Exit(event.Exit) error         { return nil }
func (s *noteSink) Module(event.Module) error     { return nil }
func (s *noteSink) Stack(event.Stack) error       { return nil }
func (s *noteSink) Events([]event.Event) error    { return nil }
func (s *noteSink) Snapshot(event.Snapshot) error { return nil }
func (s *noteSink) Stats(event.Stats) error       { return nil }

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
	s, err := Start("census-at-attach", Properties{File: file}, []int{p.cmd.Process.Pid})
	if err != nil {
		t.Fatal(err)
	}
	cs := s.Censuses()
	if len(cs) != 1 || !cs[0].Taken || cs[0].Warning != "" {
		s.Stop()
		t.Fatalf("censuses %+v", cs)
	}
	p.step(t, "freed")
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	p.step(t, "")

	// The census in the trace holds the program's blocks, with their
	// usable sizes.
	c := findCensus(t, traceNotes(t, file))
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
	s, err := Start(fmt.Sprintf("census-busy-%d", try), Properties{File: file}, []int{cmd.Process.Pid})
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
