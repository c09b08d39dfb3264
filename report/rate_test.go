package report

import (
	"bytes"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/tracefile"
)

// TestRateOverFileSpan writes, through the real writer, a session of 10 s
// that allocates 25,000 times a second (a malloc and a free every 40 µs,
// from 1 s after the session's start) into a circular file and a newfile
// series of 1 MiB each: each file holds a second or so of it. The rate a
// report of one file gives is per the time its events cover; over the
// session's start it was 5 to 50 times too low.
func TestRateOverFileSpan(t *testing.T) {
	const (
		start = int64(5_000_000_000)
		every = 20_000 // ns between events
		n     = 500_000
		want  = 25_000.0 // allocations a second
	)
	for _, mode := range []tracefile.Mode{tracefile.Circular, tracefile.NewFile} {
		t.Run(mode.String(), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "rate.%d.hst")
			if mode == tracefile.Circular {
				path = filepath.Join(t.TempDir(), "rate.hst")
			}
			w, err := tracefile.Create(path, tracefile.Header{Session: "rate", Provider: "preload", MonoStart: start,
				WallStart: time.Unix(1700000000, 0), Mode: mode, MaxSize: 1 << 20}, tracefile.Options{TimeResolution: 1})
			must(t, err)
			self, err := os.Executable()
			must(t, err)
			must(t, w.Process(event.Process{PID: 1, Time: start, Exe: self}))
			must(t, w.Module(event.Module{PID: 1, Time: start, Start: 0x1000, End: 0x2000, Path: self}))
			must(t, w.Stack(event.Stack{PID: 1, ID: 1, Frames: []uint64{0x1008, 0x1020}}))
			evs := make([]event.Event, 0, 1000)
			rng := rand.New(rand.NewPCG(1, 2))
			var addr uint64
			for i := 0; i < n; i++ {
				// Times jitter, as real ones do, around the rate; random
				// addresses and sizes, so that the files fill.
				e := event.Event{Time: start + 1e9 + int64(i)*every + rng.Int64N(1000), PID: 1, TID: 1, Stack: 1, Addr: addr}
				if i%2 == 0 {
					addr = rng.Uint64N(1<<40) &^ 15
					e.Kind, e.Func, e.Addr, e.Size = event.KindAlloc, event.FuncMalloc, addr, rng.Uint64N(4096)
				} else {
					e.Kind, e.Func = event.KindFree, event.FuncFree
				}
				if evs = append(evs, e); len(evs) == cap(evs) {
					must(t, w.Events(evs))
					evs = evs[:0]
				}
			}
			must(t, w.Close())
			files := w.Files()
			if len(files) < 2 && mode == tracefile.NewFile {
				t.Fatalf("the newfile series has %d files, want several", len(files))
			}
			if mode == tracefile.NewFile {
				files = files[1:] // the first part begins with the session
			}
			for _, f := range files {
				r, err := Load(f, LoadOptions{})
				must(t, err)
				p := r.Profile
				cover := time.Duration(p.LastEvent - p.FirstEvent)
				got := r.CallRate()
				t.Logf("%s: %d allocations over %v of events (%v after the session's start): %.0f/s", filepath.Base(f),
					p.Summary.Allocations, cover, r.Duration(), got)
				if cover <= 0 || cover > r.Duration()/2 {
					t.Fatalf("the file covers %v of a session of %v: want a part", cover, r.Duration())
				}
				if math.Abs(got-want)/want > 0.01 {
					t.Errorf("%s: %.0f allocation calls a second, want %.0f", filepath.Base(f), got, want)
				}
				var buf bytes.Buffer
				must(t, r.WriteText(&buf, TextOptions{Top: 1}))
				line := ""
				for l := range strings.Lines(buf.String()) {
					if strings.Contains(l, "allocation calls") {
						line = l
						break
					}
				}
				if !strings.Contains(line, "(24,") && !strings.Contains(line, "(25,") {
					t.Errorf("%s: the text's rate: %q, want about 25,000/s", filepath.Base(f), line)
				}
			}
		})
	}
}
