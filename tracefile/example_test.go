package tracefile_test

import (
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/tracefile"
)

// printer is a Sink that prints what it is given.
type printer struct{}

func (printer) Process(p event.Process) error { fmt.Println("process", p.PID, p.Exe); return nil }
func (printer) Exit(x event.Exit) error       { fmt.Println("exit", x.PID, "status", x.Status); return nil }
func (printer) Module(m event.Module) error   { fmt.Println("module", m.Path); return nil }
func (printer) Stack(s event.Stack) error     { fmt.Printf("stack %d %#x\n", s.ID, s.Frames); return nil }
func (printer) Events(evs []event.Event) error {
	for _, e := range evs {
		fmt.Printf("%v %v %#x %d bytes at +%dµs\n", e.Kind, e.Func, e.Addr, e.Size, (e.Time-1e9)/1e3)
	}
	return nil
}
func (printer) Snapshot(event.Snapshot) error { return nil }
func (printer) Note(event.Note) error         { return nil }
func (printer) Stats(s event.Stats) error {
	fmt.Println("delivered", s.Delivered, "lost", s.TotalLost())
	return nil
}

func Example() {
	path := filepath.Join(os.TempDir(), "example.hst")
	defer os.Remove(path)

	// A provider writes into the Writer, an event.Sink.
	w, err := tracefile.Create(path, tracefile.Header{
		Session: "example", Provider: "preload", Clock: "CLOCK_MONOTONIC",
		WallStart: time.Now(), MonoStart: 1e9,
	}, tracefile.Options{})
	if err != nil {
		log.Fatal(err)
	}
	w.Process(event.Process{PID: 42, Time: 1e9, Exe: "/usr/bin/app"})
	w.Stack(event.Stack{PID: 42, ID: 1, Frames: []uint64{0x401234, 0x401000}})
	w.Events([]event.Event{
		{Time: 1e9 + 20e3, PID: 42, TID: 42, Kind: event.KindAlloc, Func: event.FuncMalloc, Stack: 1, Addr: 0x5555_0000_1000, Size: 64},
		{Time: 1e9 + 50e3, PID: 42, TID: 42, Kind: event.KindFree, Func: event.FuncFree, Addr: 0x5555_0000_1000},
	})
	w.Exit(event.Exit{PID: 42, Time: 1e9 + 60e3})
	w.Stats(event.Stats{Delivered: 2})
	if err := w.Close(); err != nil {
		log.Fatal(err)
	}

	// Every analysis reads it back through a Reader.
	r, err := tracefile.Open(path)
	if err != nil {
		log.Fatal(err)
	}
	defer r.Close()
	fmt.Println("session", r.Header().Session)
	if err := r.Replay(printer{}, tracefile.Window{}); err != nil {
		log.Fatal(err)
	}
	// Output:
	// session example
	// process 42 /usr/bin/app
	// stack 1 [0x401234 0x401000]
	// alloc malloc 0x555500001000 64 bytes at +20µs
	// free free 0x555500001000 0 bytes at +50µs
	// exit 42 status 0
	// delivered 2 lost 0
}

// A Window replays a slice of time. Definitions (processes, modules,
// stacks) come whatever the window; the events and exits outside it do not.
func ExampleReader_Replay_window() {
	path := filepath.Join(os.TempDir(), "example-window.hst")
	defer os.Remove(path)
	w, err := tracefile.Create(path, tracefile.Header{MonoStart: 1e9}, tracefile.Options{})
	if err != nil {
		log.Fatal(err)
	}
	w.Process(event.Process{PID: 7, Exe: "/bin/app"})
	for i := int64(0); i < 10; i++ {
		w.Events([]event.Event{{Time: 1e9 + i*1e6, PID: 7, TID: 7, Kind: event.KindAlloc, Func: event.FuncMalloc, Addr: 0x1000 * uint64(i+1), Size: 16}})
	}
	w.Close()

	r, err := tracefile.Open(path)
	if err != nil {
		log.Fatal(err)
	}
	defer r.Close()
	// From 3 ms to 5 ms after the start: two events.
	if err := r.Replay(printer{}, tracefile.Window{From: 1e9 + 3e6, To: 1e9 + 5e6}); err != nil {
		log.Fatal(err)
	}
	// Output:
	// process 7 /bin/app
	// alloc malloc 0x4000 16 bytes at +3000µs
	// alloc malloc 0x5000 16 bytes at +4000µs
	// delivered 10 lost 0
}
