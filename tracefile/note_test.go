package tracefile

import (
	"math"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/heapscope/heapscope/event"
)

// notes is one note of each kind, with edge values, and a verdict and a
// census of several parts.
func notes() []event.Note {
	verdict := event.Verdict{PID: 1, Time: 150, Rules: event.RulesLSan, Pause: 12345, Elapsed: math.MaxInt64, Complete: true}
	census := event.Census{PID: 1, Time: 90, Heap: event.HeapLibc, Pause: 777,
		Space: event.HeapSpace{Arenas: 2, InUse: 1 << 40, InUseBlocks: 3, Overhead: 4, FreeBins: 5, FreeFastbins: 6,
			FreeTcache: 7, Top: 8, Mmapped: 9, MmappedBlocks: 10, Trimmable: 11, Corrupt: math.MaxUint64}}
	for i := 0; i < 2*notePartLen+5; i++ {
		a := 0x5555_0000_0000 + uint64(i)*32
		verdict.Blocks = append(verdict.Blocks, event.BlockClass{Addr: a, Class: event.Class(i % 5)})
		census.Blocks = append(census.Blocks, event.LiveBlock{Addr: a, Size: uint64(i)})
	}
	census.Blocks = append(census.Blocks, event.LiveBlock{Addr: 1, Size: math.MaxUint64}) // a jump back
	census.Groups = []event.CensusGroup{
		{Lo: 32, Hi: 48, Name: "std::_Rb_tree_node<std::pair<int const, int> >", Example: 0x5555_0000_0000, HeldBy: "a 65536 B block (Cache)", Held: 3},
		{Lo: 1 << 20, Hi: 2 << 20, Name: "string", Text: "GET /index.html", Example: math.MaxUint64},
		{},
	}
	for i := range census.Blocks {
		census.BlockGroups = append(census.BlockGroups, uint32(i%3))
	}
	resident := event.Resident{PID: 1, Time: 120, RSS: 10 << 20, PSS: 9 << 20, Swap: 1, Rollup: 10<<20 + 4096,
		Trimmable: 4096, Disagreement: math.MaxUint64, ZeroPagesKnown: true, Parts: []event.ResidentPart{
			{Name: "heap in use", RSS: 5 << 20, PSS: 5 << 20, Bytes: 6 << 20, Measured: true, How: "pages of the blocks in use"},
			{Name: "file-backed, clean or shared", RSS: 5 << 20, PSS: 4 << 20, How: strings.Repeat("x", 200)},
		}}
	return []event.Note{
		event.Warning{PID: 0, Time: 5, Code: "allocator-unseen", Text: "the program has its own allocator"},
		event.Warning{PID: 1, Time: math.MinInt64, Code: "", Text: strings.Repeat("ü", 300)},
		census,
		event.Memory{PID: 1, Time: 100, RSS: 3 << 20, Anon: 2 << 20, File: 1 << 20, Shmem: 0, Swap: math.MaxUint64},
		event.Memory{PID: math.MaxUint32, Time: 110},
		resident,
		event.Resident{PID: 2, Time: 130}, // no parts
		verdict,
		event.Verdict{PID: 1, Time: 160}, // empty, incomplete
		event.Verdict{PID: 1, Time: 170, Partial: true, AtExit: true, Blocks: []event.BlockClass{{Addr: 64, Class: event.ClassDefinite}}},
	}
}

func TestNotesRoundTrip(t *testing.T) {
	for _, chunk := range []int{0, minChunkSize} {
		path := tempPath(t, "notes.hst")
		w, err := Create(path, testHeader(Sequential, 0), Options{ChunkSize: chunk, TimeResolution: 1})
		check(t, err)
		check(t, w.Process(event.Process{PID: 1, Exe: "/bin/x"}))
		check(t, w.Process(event.Process{PID: math.MaxUint32, Exe: "/bin/y"}))
		want := notes()
		for _, n := range want {
			check(t, w.Note(n))
		}
		check(t, w.Close())

		r, err := Open(path)
		check(t, err)
		rec := newRecorder()
		check(t, r.Replay(rec, Window{}))
		if w := r.Warnings(); len(w) > 0 {
			t.Errorf("chunk %d: warnings %q", chunk, w)
		}
		// Warnings are definitions: they come before the timeline's notes.
		var wantOrder []event.Note
		for _, n := range want {
			if _, ok := n.(event.Warning); ok {
				wantOrder = append(wantOrder, n)
			}
		}
		for _, n := range want {
			if _, ok := n.(event.Warning); !ok {
				wantOrder = append(wantOrder, n)
			}
		}
		if len(rec.notes) != len(wantOrder) {
			t.Fatalf("chunk %d: %d notes, want %d", chunk, len(rec.notes), len(wantOrder))
		}
		for i := range wantOrder {
			if !reflect.DeepEqual(rec.notes[i], wantOrder[i]) {
				t.Errorf("chunk %d: note %d (%T) differs", chunk, i, wantOrder[i])
			}
		}

		// A window keeps the timed notes inside it and every warning.
		rec = newRecorder()
		check(t, r.Replay(rec, Window{From: 95, To: 155}))
		var kinds []string
		for _, n := range rec.notes {
			_, tm := n.Of()
			kinds = append(kinds, reflect.TypeOf(n).Name()+":"+strconv.FormatInt(tm, 10))
		}
		if got, want := strings.Join(kinds, " "), "Warning:5 Warning:"+strconv.FormatInt(math.MinInt64, 10)+" Memory:100 Memory:110 Resident:120 Resident:130 Verdict:150"; got != want {
			t.Errorf("chunk %d: window gave %s, want %s", chunk, got, want)
		}
		r.Close()
	}
}

// TestWarningsRestated: in circular mode the session's warnings survive the
// chunks that held them being overwritten, as the other definitions do.
func TestWarningsRestated(t *testing.T) {
	path := tempPath(t, "ring.hst")
	w, err := Create(path, testHeader(Circular, MinMaxSize), Options{TimeResolution: 1})
	check(t, err)
	g := newSynth(1, 50, 1, 2)
	check(t, g.defs(w))
	warn := event.Warning{PID: 50, Time: 1, Code: "stacks-cut", Text: "stacks were cut"}
	check(t, w.Note(warn))
	evs := make([]event.Event, 100)
	for i := 0; i < 3000; i++ {
		g.fill(evs)
		check(t, w.Events(evs))
		if i%50 == 0 {
			check(t, w.Flush())
		}
	}
	check(t, w.Close())
	r, err := Open(path)
	check(t, err)
	defer r.Close()
	rec := newRecorder()
	check(t, r.Replay(rec, Window{}))
	if len(rec.notes) != 1 || rec.notes[0] != warn {
		t.Fatalf("notes after the ring wrapped: %v, want the warning", rec.notes)
	}
}

// TestCensusGroupsChecked: a census whose blocks' groups do not match its
// blocks or name a group it does not have is refused, not written.
func TestCensusGroupsChecked(t *testing.T) {
	path := tempPath(t, "groups.hst")
	w, err := Create(path, testHeader(Sequential, 0), Options{TimeResolution: 1})
	check(t, err)
	defer w.Close()
	blocks := []event.LiveBlock{{Addr: 16, Size: 8}, {Addr: 32, Size: 8}}
	for _, c := range []event.Census{
		{PID: 1, Time: 1, Blocks: blocks, Groups: []event.CensusGroup{{}}, BlockGroups: []uint32{0}},
		{PID: 1, Time: 1, Blocks: blocks, Groups: []event.CensusGroup{{}}, BlockGroups: []uint32{0, 1}},
		{PID: 1, Time: 1, Blocks: blocks, BlockGroups: []uint32{0, 0}},
	} {
		if err := w.Note(c); err == nil {
			t.Errorf("census with %d groups and block groups %v: no error", len(c.Groups), c.BlockGroups)
		}
	}
}

// FuzzNoteRecord feeds arbitrary bytes to the note decoder as a note
// record's fields, in parts: it never panics, and what it returns is whole.
func FuzzNoteRecord(f *testing.F) {
	var e timelineEncoder
	for _, n := range notes() {
		switch n := n.(type) {
		case event.Census:
			n.Blocks, n.BlockGroups = n.Blocks[:3], n.BlockGroups[:3]
			e.censusPart(&n, noteFirst|noteLast, n.Blocks, n.BlockGroups)
		case event.Resident:
			e.resident(&n)
		case event.Memory:
			e.memory(&n)
		}
	}
	f.Add(e.s[sMisc])
	f.Fuzz(func(t *testing.T, misc []byte) {
		var b noteBuilder
		for i := 0; i >= 0 && i < len(misc); {
			n, next, err := b.note(misc, i, 7, true)
			if err != nil || next <= i {
				return
			}
			i = next
			if c, ok := n.(event.Census); ok && len(c.BlockGroups) > 0 {
				if len(c.BlockGroups) != len(c.Blocks) {
					t.Fatalf("%d blocks, %d groups of blocks", len(c.Blocks), len(c.BlockGroups))
				}
				for _, g := range c.BlockGroups {
					if int(g) >= len(c.Groups) {
						t.Fatalf("block group %d of %d", g, len(c.Groups))
					}
				}
			}
		}
	})
}
