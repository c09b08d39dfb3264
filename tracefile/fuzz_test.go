package tracefile

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/heapscope/heapscope/event"
)

// FuzzReader feeds the reader arbitrary files: it must never panic, never
// allocate without bound, and fail only with a *FormatError (or an error
// of the file system).
func FuzzReader(f *testing.F) {
	for _, seed := range fuzzSeeds(f) {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := NewReader(bytes.NewReader(data), int64(len(data)))
		if err != nil {
			var fe *FormatError
			if !errors.As(err, &fe) || !(errors.Is(err, ErrCorrupt) || errors.Is(err, ErrTruncated)) {
				t.Fatalf("NewReader: %v is not a FormatError wrapping ErrCorrupt or ErrTruncated", err)
			}
			return
		}
		defer r.Close()
		for _, w := range []Window{{}, {From: 1e9 + 5000, To: 1e9 + 50000}} {
			c := &counter{Sink: event.Discard}
			if err := r.Replay(c, w); err != nil {
				var fe *FormatError
				if !errors.As(err, &fe) || !errors.Is(err, ErrCorrupt) {
					t.Fatalf("Replay: %v is not a FormatError wrapping ErrCorrupt", err)
				}
			}
		}
		r.Header()
		r.Warnings()
	})
}

// fuzzSeeds writes small traces of every kind: each mode, every record
// type, cut and damaged files.
func fuzzSeeds(tb testing.TB) [][]byte {
	dir := tb.TempDir()
	var seeds [][]byte
	add := func(path string) {
		b, err := os.ReadFile(path)
		check(tb, err)
		seeds = append(seeds, b)
	}
	everyRecord := func(path string, h Header, o Options, flush bool) *Writer {
		w, err := Create(path, h, o)
		check(tb, err)
		procs, mods, stacks, evs, exits, snaps, stats := everything()
		for _, p := range procs {
			check(tb, w.Process(p))
		}
		for _, m := range mods[:1] {
			check(tb, w.Module(m))
		}
		for _, s := range stacks {
			check(tb, w.Stack(s))
		}
		check(tb, w.Events(evs))
		if flush {
			check(tb, w.Flush())
		}
		check(tb, w.Snapshot(snaps[0]))
		check(tb, w.Snapshot(snaps[1]))
		for _, n := range notes() {
			check(tb, w.Note(n))
		}
		check(tb, w.Exit(exits[0]))
		check(tb, w.Stats(stats))
		return w
	}

	p := filepath.Join(dir, "all.hst")
	check(tb, everyRecord(p, testHeader(Sequential, 0), Options{TimeResolution: 1}, true).Close())
	add(p)

	p = filepath.Join(dir, "coarse.hst")
	check(tb, everyRecord(p, testHeader(Sequential, 0), Options{}, false).Close())
	add(p)

	// Killed: no index.
	p = filepath.Join(dir, "killed.hst")
	w := everyRecord(p, testHeader(Sequential, 0), Options{TimeResolution: 1}, true)
	check(tb, w.Flush())
	add(p)
	check(tb, w.Close())

	// Synthetic events in a few chunks, one of them cut.
	p = filepath.Join(dir, "synth.hst")
	writeSynthFrom(tb, newSynth(3, 100, 3, 8), p, testHeader(Sequential, 0), Options{TimeResolution: 1}, 600, 200)
	add(p)
	seeds = append(seeds, seeds[len(seeds)-1][:len(seeds[len(seeds)-1])*2/3])

	// A newfile series: its second file starts with a full chunk.
	p = filepath.Join(dir, "nf-%d.hst")
	w, err := Create(p, testHeader(NewFile, MinMaxSize), Options{TimeResolution: 1})
	check(tb, err)
	g := newSynth(4, 100, 2, 6)
	check(tb, g.defs(w))
	for w.Written() < MinMaxSize+MinMaxSize/2 {
		evs := make([]event.Event, 256)
		g.fill(evs)
		check(tb, w.Events(evs))
		check(tb, w.Flush())
	}
	check(tb, w.Close())
	add(w.Files()[1])

	// Hostile but valid shapes (issue 27): many processes, each with an
	// event and an exit; many stack IDs of the same 127 frames, which
	// compress to almost nothing.
	p = filepath.Join(dir, "procs.hst")
	w, err = Create(p, testHeader(Sequential, 0), Options{})
	check(tb, err)
	for i := uint32(0); i < 3000; i++ {
		t := int64(1e9) + int64(i)*100
		check(tb, w.Process(event.Process{PID: 100 + i, Time: t, Exe: "/bin/sh", Cmdline: []string{"sh", "-c", "true"}}))
		check(tb, w.Events([]event.Event{{Time: t + 1, PID: 100 + i, TID: 100 + i, Kind: event.KindAlloc, Func: event.FuncMalloc, Addr: 0x1000, Size: 16}}))
		check(tb, w.Exit(event.Exit{PID: 100 + i, Time: t + 2}))
	}
	check(tb, w.Close())
	add(p)
	p = filepath.Join(dir, "stacks.hst")
	w, err = Create(p, testHeader(Sequential, 0), Options{})
	check(tb, err)
	check(tb, w.Process(event.Process{PID: 1, Time: 1e9, Exe: "/bin/true"}))
	frames := make([]uint64, 127)
	for i := range frames {
		frames[i] = 0x400000 + uint64(i)*16
	}
	for i := 0; i < 3000; i++ {
		check(tb, w.Stack(event.Stack{PID: 1, ID: event.StackID(i + 1), Frames: frames}))
		check(tb, w.Events([]event.Event{{Time: 1e9 + int64(i), PID: 1, TID: 1, Kind: event.KindAlloc, Func: event.FuncMalloc, Stack: event.StackID(i + 1), Addr: 0x1000 + 16*uint64(i), Size: 16}}))
	}
	check(tb, w.Close())
	add(p)
	return seeds
}

// TestFuzzSeedsCommitted checks that testdata/fuzz/FuzzReader holds the
// current seeds; run with HEAPSCOPE_UPDATE_FUZZ=1 to write them.
func TestFuzzSeedsCommitted(t *testing.T) {
	seeds := fuzzSeeds(t)
	dir := filepath.Join("testdata", "fuzz", "FuzzReader")
	if os.Getenv("HEAPSCOPE_UPDATE_FUZZ") != "" {
		check(t, os.MkdirAll(dir, 0o755))
		for i, s := range seeds {
			body := fmt.Sprintf("go test fuzz v1\n[]byte(%s)\n", strconv.Quote(string(s)))
			check(t, os.WriteFile(filepath.Join(dir, fmt.Sprintf("seed-%d", i)), []byte(body), 0o644))
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) < len(seeds) {
		t.Fatalf("%s: %d seeds (%v); run HEAPSCOPE_UPDATE_FUZZ=1 go test -run TestFuzzSeedsCommitted", dir, len(entries), err)
	}
	// Each seed reads back without error (the other files are inputs the
	// fuzzer found: they need only not break the reader).
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), "seed-") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		check(t, err)
		var s string
		if _, err := fmt.Sscanf(string(b), "go test fuzz v1\n[]byte(%q)\n", &s); err != nil {
			t.Fatalf("%s: %v", e.Name(), err)
		}
		path := filepath.Join(t.TempDir(), "seed.hst")
		check(t, os.WriteFile(path, []byte(s), 0o644))
		r, err := Open(path)
		if err != nil {
			t.Errorf("%s: %v", e.Name(), err)
			continue
		}
		if err := r.Replay(event.Discard, Window{}); err != nil {
			t.Errorf("%s: %v", e.Name(), err)
		}
		r.Close()
	}
}
