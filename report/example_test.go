package report_test

import (
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/report"
	"github.com/heapscope/heapscope/tracefile"
)

// Load reads a trace file into a report; the renderers write it out.
func ExampleLoad() {
	dir, err := os.MkdirTemp("", "example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "app.hst")

	// A tiny trace: one process allocates twice and frees once.
	w, err := tracefile.Create(path, tracefile.Header{Session: "app", Provider: "preload", MonoStart: 1e9, WallStart: time.Now()}, tracefile.Options{})
	if err != nil {
		log.Fatal(err)
	}
	w.Process(event.Process{PID: 7, Time: 1e9, Exe: "/usr/bin/app"})
	w.Stack(event.Stack{PID: 7, ID: 1, Frames: []uint64{0x401136}})
	w.Events([]event.Event{
		{Time: 1.1e9, PID: 7, TID: 7, Kind: event.KindAlloc, Func: event.FuncMalloc, Stack: 1, Addr: 0x5000, Size: 100},
		{Time: 1.2e9, PID: 7, TID: 7, Kind: event.KindAlloc, Func: event.FuncMalloc, Stack: 1, Addr: 0x6000, Size: 50},
		{Time: 1.3e9, PID: 7, TID: 7, Kind: event.KindFree, Func: event.FuncFree, Addr: 0x5000},
	})
	w.Stats(event.Stats{Time: 1.4e9, Delivered: 3})
	if err := w.Close(); err != nil {
		log.Fatal(err)
	}

	rep, err := report.Load(path, report.LoadOptions{})
	if err != nil {
		log.Fatal(err)
	}
	d := rep.Document(0)
	fmt.Printf("%d allocations, peak %d bytes at %v, leaked %d bytes\n",
		d.Summary.Allocations, d.Summary.PeakBytes, time.Duration(d.Summary.PeakTimeNs), d.Summary.LeakedBytes)
	// rep.WriteText(os.Stdout, report.TextOptions{}), rep.WriteJSON(os.Stdout, 0),
	// rep.WritePprof(f) and rep.WriteCollapsed(os.Stdout, report.InuseSpace)
	// write it out.

	// Output:
	// 2 allocations, peak 150 bytes at 200ms, leaked 50 bytes
}
