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
	return []event.Note{
		event.Warning{PID: 0, Time: 5, Code: "allocator-unseen", Text: "the program has its own allocator"},
		event.Warning{PID: 1, Time: math.MinInt64, Code: "", Text: strings.Repeat("ü", 300)},
		census,
		event.Memory{PID: 1, Time: 100, RSS: 3 << 20, Anon: 2 << 20, File: 1 << 20, Shmem: 0, Swap: math.MaxUint64},
		event.Memory{PID: math.MaxUint32, Time: 110},
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
		if got, want := strings.Join(kinds, " "), "Warning:5 Warning:"+strconv.FormatInt(math.MinInt64, 10)+" Memory:100 Memory:110 Verdict:150"; got != want {
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
