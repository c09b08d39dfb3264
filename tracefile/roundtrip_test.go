package tracefile

import (
	"errors"
	"fmt"
	"math"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/internal/errs"
)

// everything is one of each record, with edge values in every field.
func everything() (procs []event.Process, mods []event.Module, stacks []event.Stack, evs []event.Event,
	exits []event.Exit, snaps []event.Snapshot, stats event.Stats) {
	procs = []event.Process{
		{PID: 1, PPID: 0, Time: 5, Exe: "/bin/true"},
		{PID: math.MaxUint32, PPID: math.MaxUint32, Time: math.MinInt64, Exe: "", Cmdline: []string{"", "a b", "ünïcode\x00"}},
	}
	mods = []event.Module{
		{PID: 1, Time: 6, Start: 0x400000, End: 0x401000, Offset: 0, Path: "/bin/true", BuildID: "abcdef"},
		{PID: math.MaxUint32, Time: math.MaxInt64, Start: math.MaxUint64 - 10, End: math.MaxUint64, Offset: math.MaxUint64, Path: strings.Repeat("x", 5000)},
		{PID: 1, Start: 10, End: 5}, // end before start: still round trips
	}
	stacks = []event.Stack{
		{PID: 1, ID: 1, Frames: []uint64{0x401234, 0x401000, 0x7fff_0000_0000, 1, math.MaxUint64, 0}},
		{PID: 1, ID: math.MaxUint32, Frames: nil},
		{PID: math.MaxUint32, ID: 7, Frames: []uint64{42}},
	}
	evs = []event.Event{
		{Time: 100, PID: 1, TID: 1, Kind: event.KindAlloc, Func: event.FuncMalloc, Heap: event.HeapLibc, Stack: 1, Addr: 0x5555_0000_1000, Size: 24},
		{Time: 90, PID: 1, TID: 2, Kind: event.KindAlloc, Func: event.FuncCalloc, Stack: 1, Addr: 0x5555_0000_1040, Size: 100},
		{Time: 110, PID: 1, TID: 1, Kind: event.KindFree, Func: event.FuncFree, Addr: 0x5555_0000_1000},
		{Time: 110, PID: 1, TID: 1, Kind: event.KindAlloc, Func: event.FuncMalloc, Stack: 1, Addr: 0x5555_0000_1000, Size: 24},
		{Time: 120, PID: 1, TID: 1, Kind: event.KindRealloc, Func: event.FuncRealloc, Stack: math.MaxUint32, Addr: 0x5555_0000_2000, Size: 4096, OldAddr: 0x5555_0000_1000, OldSize: 24},
		{Time: 121, PID: 1, TID: 1, Kind: event.KindRealloc, Func: event.FuncReallocarray, Addr: 0x5555_0000_2000, Size: 8192, OldAddr: 0x5555_0000_2000},
		{Time: 122, PID: 1, TID: 1, Kind: event.KindRealloc, Func: event.FuncRealloc, Addr: 0, Size: 0, OldAddr: 0x5555_0000_2000}, // realloc that frees
		{Time: 123, PID: 1, TID: 1, Kind: event.KindAlloc, Func: event.FuncMalloc, Addr: 0, Size: math.MaxUint64},                  // failed
		{Time: 124, PID: 1, TID: 3, Kind: event.KindMmap, Func: event.FuncMmap, Heap: event.HeapMmap, Addr: 0x7f00_0000_0000, Size: 1 << 30},
		{Time: 125, PID: 1, TID: 3, Kind: event.KindMunmap, Func: event.FuncMunmap, Heap: event.HeapMmap, Addr: 0x7f00_0000_1000, Size: 4096},
		{Time: 126, PID: 1, TID: 3, Kind: event.KindAlloc, Func: event.FuncNewArray, Heap: math.MaxUint16, Addr: math.MaxUint64, Size: 1},
		{Time: 127, PID: 1, TID: 3, Kind: event.KindFree, Func: event.FuncDeleteArray, Addr: 1}, // huge jump down
		{Time: 128, PID: 1, TID: 3, Kind: event.KindAlloc, Func: event.FuncMalloc, Addr: 1 << 63, Size: 1},
		{Time: 129, PID: 1, TID: 3, Kind: event.KindFree, Func: event.FuncFree, Addr: 0, OldAddr: 5, OldSize: 6}, // old fields on a free
		{Time: 130, PID: 1, TID: 3, Kind: 0, Func: 200, Addr: 3},                                                 // invalid kind and func
		{Time: 131, PID: 1, TID: 3, Kind: 9, Func: event.FuncMalloc, Addr: 4},
		{Time: math.MaxInt64, PID: math.MaxUint32, TID: math.MaxUint32, Kind: event.KindAlloc, Func: event.FuncPosixMemalign, Stack: 7, Addr: 8, Size: 9},
		{Time: math.MinInt64, PID: math.MaxUint32, TID: 0, Kind: event.KindFree, Func: event.FuncFree, Addr: 8},
	}
	exits = []event.Exit{
		{PID: 1, Time: 200, Status: 0},
		{PID: math.MaxUint32, Time: 300, Status: -1, Signal: math.MinInt32},
		{PID: 2, Time: 301, Status: math.MaxInt32, Signal: 9},
	}
	snaps = []event.Snapshot{
		{PID: 1, Time: 150, Live: []event.LiveBlock{{Addr: 0x5555_0000_1040, Size: 100, Stack: 1, Time: 90}, {Addr: 1, Size: math.MaxUint64, Stack: math.MaxUint32, Time: math.MinInt64}},
			Totals: []event.StackTotal{{Stack: 1, Allocs: 3, AllocBytes: 148, Frees: 1, FreeBytes: 24}, {Stack: 5, Allocs: math.MaxUint64, AllocBytes: math.MaxUint64, Frees: math.MaxUint64, FreeBytes: math.MaxUint64}}},
		{PID: 1, Time: 160, Final: true},
	}
	// A snapshot in many parts.
	big := event.Snapshot{PID: math.MaxUint32, Time: 170, Final: true}
	for i := 0; i < 3*snapshotPartLen+17; i++ {
		big.Live = append(big.Live, event.LiveBlock{Addr: 0x6000_0000 + uint64(i)*48, Size: uint64(i % 97), Stack: event.StackID(i % 13), Time: int64(i)})
	}
	for i := 0; i < snapshotPartLen+1; i++ {
		big.Totals = append(big.Totals, event.StackTotal{Stack: event.StackID(i), Allocs: uint64(i), AllocBytes: uint64(i) * 8, Frees: 1, FreeBytes: 2})
	}
	snaps = append(snaps, big)
	stats = event.Stats{Time: 400, Delivered: 123, Lost: [event.NumLostReasons]uint64{1, 2, 3, 4, 5, 6}, StacksLost: 7,
		StacksCut: 9, StacksCutDepth: 10, StacksCutNoTable: 11, Unmatched: 8}
	return
}

// defsOnly is a recorder that takes definitions sections.
type defsOnly struct{ *recorder }

func (d defsOnly) exitDef(x event.Exit) error { return d.Exit(x) }

// TestStatsCounters: a stats record of a writer that knew only the events
// lost (n = 6 counters) reads with no stacks cut, and one with counters a
// reader does not know (n = 12) reads with those ignored.
func TestStatsCounters(t *testing.T) {
	rec := newRecorder()
	old := []byte{defStats}
	old = appendVarint(old, 5)
	old = appendUvarint(old, 100)
	old = appendUvarint(old, uint64(event.NumLostReasons))
	for i := 0; i < event.NumLostReasons; i++ {
		old = appendUvarint(old, uint64(i+1))
	}
	old = appendUvarint(old, 7) // stacks lost
	old = appendUvarint(old, 8) // unmatched
	old = appendUvarint(old, 9) // bytes
	if err := decodeDefs(old, defsOnly{rec}); err != nil {
		t.Fatal(err)
	}
	want := event.Stats{Time: 5, Delivered: 100, Lost: [event.NumLostReasons]uint64{1, 2, 3, 4, 5, 6}, StacksLost: 7, Unmatched: 8, Bytes: 9}
	if len(rec.stats) != 1 || rec.stats[0] != want {
		t.Errorf("record of 6 counters: %+v, want %+v", rec.stats, want)
	}

	rec = newRecorder()
	next := []byte{defStats}
	next = appendVarint(next, 5)
	next = appendUvarint(next, 100)
	next = appendUvarint(next, 12)
	for i := 0; i < 12; i++ {
		next = appendUvarint(next, uint64(i+1))
	}
	next = appendUvarint(next, 7)
	next = appendUvarint(next, 8)
	next = appendUvarint(next, 9)
	if err := decodeDefs(next, defsOnly{rec}); err != nil {
		t.Fatal(err)
	}
	want.StacksCut, want.StacksCutDepth, want.StacksCutNoTable = 7, 8, 9
	if len(rec.stats) != 1 || rec.stats[0] != want {
		t.Errorf("record of 12 counters: %+v, want %+v", rec.stats, want)
	}
}

func TestRoundTrip(t *testing.T) {
	for _, c := range []struct {
		chunk int
		res   time.Duration
	}{{0, 1}, {minChunkSize, 1}, {0, 0}, {minChunkSize, 7 * time.Microsecond}} {
		chunk, res := c.chunk, c.res
		path := tempPath(t, "rt.hst")
		h := testHeader(Sequential, 0)
		w, err := Create(path, h, Options{ChunkSize: chunk, TimeResolution: res})
		if err != nil {
			t.Fatal(err)
		}
		procs, mods, stacks, evs, exits, snaps, stats := everything()
		for _, p := range procs {
			check(t, w.Process(p))
		}
		for _, m := range mods {
			check(t, w.Module(m))
		}
		for _, s := range stacks {
			check(t, w.Stack(s))
		}
		check(t, w.Events(evs))
		for _, s := range snaps {
			check(t, w.Snapshot(s))
		}
		// Exits last: pid reuse is not what this test is about.
		for _, x := range exits {
			check(t, w.Exit(x))
		}
		check(t, w.Stats(stats))
		check(t, w.Close())

		// Times of events, exits and snapshots are kept to the resolution.
		if res == 0 {
			res = DefaultTimeResolution
		}
		round := func(t int64) int64 { return t / int64(res) * int64(res) }
		for i := range evs {
			evs[i].Time = round(evs[i].Time)
		}
		for i := range exits {
			exits[i].Time = round(exits[i].Time)
		}
		for i := range snaps {
			snaps[i].Time = round(snaps[i].Time)
		}

		r, err := Open(path)
		if err != nil {
			t.Fatal(err)
		}
		got := r.Header()
		h.Version, h.TimeResolution = version, res
		if !got.WallStart.Equal(h.WallStart) {
			t.Errorf("WallStart %v, want %v", got.WallStart, h.WallStart)
		}
		got.WallStart = h.WallStart
		if !reflect.DeepEqual(got, h) {
			t.Errorf("header\n got %+v\nwant %+v", got, h)
		}
		rec := newRecorder()
		rec.knownPID[2] = true // a process without a record is fine to exit
		check(t, r.Replay(rec, Window{}))
		if w := r.Warnings(); len(w) > 0 {
			t.Errorf("warnings: %q", w)
		}
		r.Close()

		same(t, "processes", rec.procs, procs)
		same(t, "modules", rec.modules, mods)
		same(t, "stacks", rec.stacks, stacks)
		same(t, "exits", rec.exits, exits)
		same(t, "snapshots", rec.snapshots, snaps)
		if len(rec.events) != len(evs) {
			t.Fatalf("%d events, want %d", len(rec.events), len(evs))
		}
		for i := range evs {
			if rec.events[i] != evs[i] {
				t.Errorf("event %d\n got %+v\nwant %+v", i, rec.events[i], evs[i])
			}
		}
		if len(rec.stats) != 1 {
			t.Fatalf("%d stats records, want the last one only", len(rec.stats))
		}
		want := stats
		want.Bytes = rec.stats[0].Bytes
		if rec.stats[0] != want {
			t.Errorf("stats\n got %+v\nwant %+v", rec.stats[0], want)
		}
		fi, _ := os.Stat(path)
		if b := rec.stats[0].Bytes; b == 0 || int64(b) > fi.Size() {
			t.Errorf("stats say %d bytes written; the file has %d", b, fi.Size())
		}
	}
}

func check(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func same[T any](t *testing.T, what string, got, want []T) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		if len(got) != len(want) {
			t.Errorf("%s: got %d, want %d", what, len(got), len(want))
			return
		}
		for i := range got {
			if !reflect.DeepEqual(got[i], want[i]) {
				s1, s2 := strings.TrimSpace(short(got[i])), strings.TrimSpace(short(want[i]))
				t.Errorf("%s %d:\n got %s\nwant %s", what, i, s1, s2)
			}
		}
	}
}

func short(v any) string {
	s := strings.ReplaceAll(strings.TrimSpace(sprint(v)), "\n", " ")
	if len(s) > 300 {
		s = s[:300] + "..."
	}
	return s
}

func TestCreateRefuses(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		name string
		path string
		h    Header
		o    Options
	}{
		{"realtime", dir + "/a", Header{Mode: RealTime}, Options{}},
		{"unknown mode", dir + "/a", Header{Mode: 7}, Options{}},
		{"circular without size", dir + "/a", Header{Mode: Circular}, Options{}},
		{"newfile without size", dir + "/a%d", Header{Mode: NewFile}, Options{}},
		{"newfile without %d", dir + "/a", Header{Mode: NewFile, MaxSize: 1 << 20}, Options{}},
		{"newfile with two %d", dir + "/a%d%d", Header{Mode: NewFile, MaxSize: 1 << 20}, Options{}},
		{"tiny size", dir + "/a", Header{Mode: Sequential, MaxSize: 1000}, Options{}},
		{"negative size", dir + "/a", Header{Mode: Sequential, MaxSize: -1}, Options{}},
		{"negative chunk", dir + "/a", Header{}, Options{ChunkSize: -1}},
		{"huge chunk", dir + "/a", Header{}, Options{ChunkSize: 1 << 30}},
	} {
		w, err := Create(c.path, c.h, c.o)
		if !errors.Is(err, errs.ErrInvalidFlags) {
			t.Errorf("%s: got %v, want ErrInvalidFlags", c.name, err)
		}
		if w != nil {
			w.Close()
		}
	}
	if _, err := os.Stat(dir + "/a"); err == nil {
		t.Error("a refused Create left a file")
	}
	if _, err := Create(dir+"/no/such/dir", Header{}, Options{}); err == nil || errors.Is(err, errs.ErrInvalidFlags) {
		t.Errorf("Create in a missing directory: %v", err)
	}
}

func TestClosed(t *testing.T) {
	path := tempPath(t, "c.hst")
	w, err := Create(path, testHeader(Sequential, 0), Options{})
	check(t, err)
	check(t, w.Close())
	if err := w.Events(make([]event.Event, 1)); !errors.Is(err, ErrClosed) {
		t.Errorf("Events after Close: %v", err)
	}
	if err := w.Close(); !errors.Is(err, ErrClosed) {
		t.Errorf("second Close: %v", err)
	}
	r, err := Open(path)
	check(t, err)
	check(t, r.Close())
	if err := r.Replay(event.Discard, Window{}); !errors.Is(err, ErrClosed) {
		t.Errorf("Replay after Close: %v", err)
	}
}

func sprint(v any) string { return fmt.Sprintf("%+v", v) }
