package tracefile

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/heapscope/heapscope/event"
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		childWriter()
		return
	}
	code := m.Run()
	if python.dir != "" {
		os.RemoveAll(python.dir)
	}
	os.Exit(code)
}

// recorder is a Sink that keeps everything, and checks the Sink's ordering
// promises as it goes: a process before its events, a stack before the
// first event that uses it.
type recorder struct {
	procs     []event.Process
	exits     []event.Exit
	modules   []event.Module
	stacks    []event.Stack
	events    []event.Event
	snapshots []event.Snapshot
	stats     []event.Stats
	notes     []event.Note

	knownPID   map[uint32]bool
	knownStack map[[2]uint32]bool
	problems   []string
}

func newRecorder() *recorder {
	return &recorder{knownPID: map[uint32]bool{}, knownStack: map[[2]uint32]bool{}}
}

func (r *recorder) problem(format string, args ...any) {
	if len(r.problems) < 10 {
		r.problems = append(r.problems, fmt.Sprintf(format, args...))
	}
}

func (r *recorder) Process(p event.Process) error {
	r.procs = append(r.procs, p)
	r.knownPID[p.PID] = true
	return nil
}
func (r *recorder) Exit(x event.Exit) error     { r.exits = append(r.exits, x); return nil }
func (r *recorder) Module(m event.Module) error { r.modules = append(r.modules, m); return nil }
func (r *recorder) Stack(s event.Stack) error {
	s.Frames = append([]uint64(nil), s.Frames...) // the reader reuses them
	r.stacks = append(r.stacks, s)
	r.knownStack[[2]uint32{s.PID, uint32(s.ID)}] = true
	return nil
}
func (r *recorder) Events(evs []event.Event) error {
	for _, e := range evs {
		if !r.knownPID[e.PID] {
			r.problem("event %+v before its process", e)
		}
		if e.Stack != 0 && !r.knownStack[[2]uint32{e.PID, uint32(e.Stack)}] {
			r.problem("event %+v before its stack", e)
		}
	}
	r.events = append(r.events, evs...)
	return nil
}
func (r *recorder) Snapshot(s event.Snapshot) error { r.snapshots = append(r.snapshots, s); return nil }
func (r *recorder) Stats(s event.Stats) error       { r.stats = append(r.stats, s); return nil }
func (r *recorder) Note(n event.Note) error         { r.notes = append(r.notes, n); return nil }

func (r *recorder) check(t testing.TB) {
	t.Helper()
	for _, p := range r.problems {
		t.Error(p)
	}
}

// counter counts events and nothing else.
type counter struct {
	event.Sink
	events int
	stats  event.Stats
}

func (c *counter) Events(evs []event.Event) error { c.events += len(evs); return nil }
func (c *counter) Stats(s event.Stats) error      { c.stats = s; return nil }

// synth makes a synthetic but realistic event stream, shaped like an
// interpreter's: many small, short-lived blocks (a freed block is handed
// out again to the next allocation of its size, as glibc's tcache does), a
// few thousand distinct stacks drawn with a skewed distribution, several
// threads, a few reallocs, and times a few hundred ns apart with jitter.
type synth struct {
	rng     *rand.Rand
	pid     uint32
	threads []uint32
	t       int64
	stacks  int
	zipf    *rand.Zipf
	top     uint64              // the heap's top: new blocks come from here
	free    map[uint64][]uint64 // size class -> freed blocks, last freed last
	live    []block
}

type block struct {
	addr, size uint64
	stack      event.StackID
	tid        uint32
}

func newSynth(seed uint64, pid uint32, threads, stacks int) *synth {
	rng := rand.New(rand.NewPCG(seed, 1))
	g := &synth{rng: rng, pid: pid, t: 1_000_000_000, stacks: stacks, top: 0x55d0_0000_0000 + uint64(pid)<<24,
		free: map[uint64][]uint64{}, zipf: rand.NewZipf(rng, 1.2, 4, uint64(stacks-1))}
	for i := 0; i < threads; i++ {
		g.threads = append(g.threads, pid+uint32(i))
	}
	return g
}

// defs sends the process, two modules and the stacks.
func (g *synth) defs(s event.Sink) error {
	if err := s.Process(event.Process{PID: g.pid, PPID: 1, Time: g.t, Exe: "/usr/bin/python3.11",
		Cmdline: []string{"python3", "-c", "import json"}}); err != nil {
		return err
	}
	for i, m := range []string{"/usr/bin/python3.11", "/usr/lib/x86_64-linux-gnu/libc.so.6"} {
		if err := s.Module(event.Module{PID: g.pid, Time: g.t, Start: 0x400000 + uint64(i)<<32, End: 0x800000 + uint64(i)<<32,
			Offset: 0x1000, Path: m, BuildID: fmt.Sprintf("%040x", i+1)}); err != nil {
			return err
		}
	}
	for id := 1; id <= g.stacks; id++ {
		if err := s.Stack(g.stack(event.StackID(id))); err != nil {
			return err
		}
	}
	return nil
}

// stack makes stack id: 8 to 40 frames, sharing their outer frames.
func (g *synth) stack(id event.StackID) event.Stack {
	r := rand.New(rand.NewPCG(uint64(id), 2))
	n := 8 + r.IntN(32)
	frames := make([]uint64, n)
	for i := range frames {
		if i < n-6 {
			frames[i] = 0x400000 + uint64(r.IntN(0x300000))
		} else {
			frames[i] = 0x400000 + uint64(i)*0x1234 // the shared outer frames
		}
	}
	return event.Stack{PID: g.pid, ID: id, Frames: frames}
}

func sizeClass(n uint64) uint64 { return (n + 15) &^ 15 }

// fill replaces evs with the next len(evs) events.
func (g *synth) fill(evs []event.Event) {
	for i := range evs {
		g.t += 40 + int64(g.rng.ExpFloat64()*250)
		tid := g.threads[g.rng.IntN(len(g.threads))]
		if len(g.threads) > 1 && g.rng.IntN(8) != 0 {
			tid = g.threads[0]
		}
		e := event.Event{Time: g.t, PID: g.pid, TID: tid}
		switch r := g.rng.IntN(100); {
		case len(g.live) > 0 && (r < 46 || len(g.live) > 20000):
			// Free: usually a young block.
			k := len(g.live) - 1 - min(len(g.live)-1, int(g.rng.ExpFloat64()*3))
			b := g.live[k]
			g.live[k] = g.live[len(g.live)-1]
			g.live = g.live[:len(g.live)-1]
			c := sizeClass(b.size)
			g.free[c] = append(g.free[c], b.addr)
			e.Kind, e.Func, e.Addr = event.KindFree, event.FuncFree, b.addr
		case len(g.live) > 0 && r < 49:
			k := g.rng.IntN(len(g.live))
			b := &g.live[k]
			e.Kind, e.Func, e.OldAddr, e.OldSize, e.Stack = event.KindRealloc, event.FuncRealloc, b.addr, b.size, g.stackID()
			e.Size = b.size * 2
			if sizeClass(e.Size) == sizeClass(b.size) {
				e.Addr = b.addr
			} else {
				e.Addr = g.alloc(e.Size)
				c := sizeClass(b.size)
				g.free[c] = append(g.free[c], b.addr)
			}
			b.addr, b.size = e.Addr, e.Size
		default:
			size := uint64(16 + 8*int(g.rng.ExpFloat64()*6))
			if g.rng.IntN(50) == 0 {
				size = uint64(512 + g.rng.IntN(8192))
			}
			f := event.FuncMalloc
			if g.rng.IntN(10) == 0 {
				f = event.FuncCalloc
			}
			e.Kind, e.Func, e.Size, e.Stack = event.KindAlloc, f, size, g.stackID()
			e.Addr = g.alloc(size)
			g.live = append(g.live, block{e.Addr, size, e.Stack, tid})
		}
		evs[i] = e
	}
}

func (g *synth) stackID() event.StackID { return event.StackID(1 + g.zipf.Uint64()) }

func (g *synth) alloc(size uint64) uint64 {
	c := sizeClass(size)
	if l := g.free[c]; len(l) > 0 {
		a := l[len(l)-1]
		g.free[c] = l[:len(l)-1]
		return a
	}
	a := g.top
	g.top += c + 16
	return a
}

// testHeader is a header with every field set.
func testHeader(mode Mode, maxSize int64) Header {
	return Header{
		Session: "test", Provider: "preload",
		Properties: []Property{{"BufferSize", "64"}, {"LogFileMode", mode.String()}, {"Empty", ""}},
		Hostname:   "host", Kernel: "6.18.0", Clock: "CLOCK_MONOTONIC",
		WallStart: time.Unix(1_800_000_000, 123456789), MonoStart: 1_000_000_000,
		Mode: mode, MaxSize: maxSize, SampleRate: 64 << 10,
	}
}

// writeSynth writes n synthetic events to a new file, flushing every
// flushEvery events (0: never), and returns the events written.
func writeSynth(t testing.TB, path string, h Header, o Options, n, flushEvery int) []event.Event {
	t.Helper()
	return writeSynthFrom(t, newSynth(1, 100, 4, 500), path, h, o, n, flushEvery)
}

func writeSynthFrom(t testing.TB, g *synth, path string, h Header, o Options, n, flushEvery int) []event.Event {
	t.Helper()
	w, err := Create(path, h, o)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.defs(w); err != nil {
		t.Fatal(err)
	}
	all := make([]event.Event, n)
	step := 256
	if flushEvery > 0 {
		step = flushEvery
	}
	for i := 0; i < n; i += step {
		batch := all[i:min(n, i+step)]
		g.fill(batch)
		if err := w.Events(batch); err != nil {
			t.Fatal(err)
		}
		if flushEvery > 0 {
			if err := w.Flush(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := w.Stats(event.Stats{Time: g.t, Delivered: uint64(n)}); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return all
}

func readAll(t testing.TB, path string, win Window) (*recorder, []string) {
	t.Helper()
	r, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	rec := newRecorder()
	if err := r.Replay(rec, win); err != nil {
		t.Fatal(err)
	}
	rec.check(t)
	return rec, r.Warnings()
}

func tempPath(t testing.TB, name string) string {
	return filepath.Join(t.TempDir(), name)
}

func timeRes(ns int64) time.Duration { return time.Duration(ns) }

// threadCPU returns the CPU time the calling thread has used. Benchmarks
// lock their goroutine to its thread and report events per CPU-second as
// well as per second: on a machine shared with other work the wall clock
// says more about the neighbours than about the code.
// (CLOCK_THREAD_CPUTIME_ID is exact; getrusage counts in ticks.)
func threadCPU() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}

// processCPU returns the CPU time the process (every thread) has used.
func processCPU() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_PROCESS_CPUTIME_ID, &ts); err != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}

func truncate(path string, size int64) error { return os.Truncate(path, size) }

// churnSynth makes the event stream of the churn workload (bench/) traced
// with two threads: each thread mallocs a block of 16 to 527 bytes and frees
// it at once, so glibc's tcache hands each size class's block out again
// and again; both threads' allocations share one stack; times are 20 to 60
// ns apart, in steps of 10 ns (the TSC's conversion); the threads take
// turns in runs of a few pairs, as the collector merges their buffers.
type churnSynth struct {
	t       int64
	x       [2]uint64
	top     [2]uint64
	blocks  [2]map[uint64]uint64 // per thread: size class -> block
	cur     int
	pending [2]uint64 // the block to free next, 0 if the next is a malloc
	rng     *rand.Rand
}

func newChurnSynth(seed uint64) *churnSynth {
	g := &churnSynth{t: 1_000_000_000, rng: rand.New(rand.NewPCG(seed, 3))}
	for i := range g.x {
		g.x[i] = 0x9E3779B97F4A7C15 * uint64(i+1)
		g.top[i] = 0x7f7c_1400_0000 + uint64(i)<<27
		g.blocks[i] = map[uint64]uint64{}
	}
	return g
}

// defs sends the process and the allocations' stack.
func (g *churnSynth) defs(s event.Sink) error {
	if err := s.Process(event.Process{PID: 100, PPID: 1, Time: g.t, Exe: "/tmp/churn", Cmdline: []string{"churn", "2000000", "2"}}); err != nil {
		return err
	}
	return s.Stack(event.Stack{PID: 100, ID: 2, Frames: []uint64{0x401234, 0x7f7c_2402_9d90, 0x7f7c_240a_5f00}})
}

func (g *churnSynth) fill(evs []event.Event) {
	for i := range evs {
		if g.rng.IntN(8) == 0 {
			g.cur ^= 1
		}
		th := g.cur
		g.t += 20 + 10*int64(g.rng.IntN(5)) + int64(g.rng.IntN(4)/3)
		e := event.Event{Time: g.t, PID: 100, TID: 101 + uint32(th)}
		if a := g.pending[th]; a != 0 {
			e.Kind, e.Func, e.Addr = event.KindFree, event.FuncFree, a
			g.pending[th] = 0
		} else {
			x := g.x[th]
			x ^= x << 13
			x ^= x >> 7
			x ^= x << 17
			g.x[th] = x
			size := 16 + x%512
			c := chunkEnd(0, size)
			a, ok := g.blocks[th][c]
			if !ok {
				a = g.top[th]
				g.top[th] += c
				g.blocks[th][c] = a
			}
			e.Kind, e.Func, e.Size, e.Addr, e.Stack = event.KindAlloc, event.FuncMalloc, size, a, 2
			g.pending[th] = a
		}
		evs[i] = e
	}
}
