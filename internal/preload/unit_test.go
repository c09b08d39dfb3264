//go:build linux && amd64

package preload

import (
	"encoding/binary"
	"errors"
	"os"
	"reflect"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/internal/errs"
)

// capture is a Sink that keeps events and stacks, and no order checks.
type capture struct {
	event.Sink
	events []event.Event
	stacks []event.Stack
	mods   []event.Module
}

func (c *capture) Events(evs []event.Event) error { c.events = append(c.events, evs...); return nil }
func (c *capture) Stack(s event.Stack) error      { c.stacks = append(c.stacks, s); return nil }
func (c *capture) Module(m event.Module) error    { c.mods = append(c.mods, m); return nil }

func testCollector() (*Collector, *capture) {
	sink := &capture{Sink: event.Discard}
	return &Collector{sink: sink, batch: make([]event.Event, 0, batchSize), clk: newClock(tscUsable())}, sink
}

// setSeq sets a ring's seq (odd: its thread is writing a record) and the
// timestamp of its last record, as the producer does.
func setSeq(r *ring, seq, lastTS uint64) {
	atomic.StoreUint64(r.lastTS, lastTS)
	atomic.StoreUint64(r.seq, seq)
}

// TestWatermark drives the merge with two synthetic threads: while one is
// in the middle of writing a record, nothing later than its last record may
// be delivered from the other.
func TestWatermark(t *testing.T) {
	c, sink := testCollector()
	a, b := testRing(t, 1<<16), testRing(t, 1<<16)
	p := &proc{pid: 1, rings: []*ring{a, b}}
	t0 := c.clk.now() + uint64(time.Hour.Seconds()*1e9) // far ahead of the idle bound
	ev := func(off uint64) []uint64 { return []uint64{uint64(event.FuncFree) | 3<<8, t0 + off, off} }
	produce(a, recThread|2<<8|1<<32, t0)
	produce(b, recThread|2<<8|2<<32, t0)
	for _, off := range []uint64{10, 20, 30} {
		produce(a, ev(off)...)
	}
	setSeq(a, 2, t0+30)
	produce(b, ev(15)...)
	setSeq(b, 3, t0+15) // writing its next record

	order := func() []string {
		var out []string
		for _, e := range sink.events {
			out = append(out, strconv.Itoa(int(e.TID))+":"+strconv.Itoa(int(e.Addr)))
		}
		sink.events = nil
		return out
	}
	steps := []struct {
		do   func()
		want []string
	}{
		{func() {}, []string{"1:10", "2:15"}},
		{func() { produce(b, ev(17)...); setSeq(b, 3, t0+17) }, []string{"2:17"}},
		{func() { produce(b, ev(40)...); setSeq(b, 4, t0+40) }, []string{"1:20", "1:30"}},
	}
	for i, s := range steps {
		s.do()
		c.drain(p, false)
		if got := order(); !reflect.DeepEqual(got, s.want) {
			t.Fatalf("step %d: delivered %v, want %v", i, got, s.want)
		}
	}
	p.final = true
	c.drain(p, false)
	if got := order(); !reflect.DeepEqual(got, []string{"2:40"}) {
		t.Fatalf("final drain delivered %v", got)
	}
	if got := atomic.LoadUint64(a.tail); got != atomic.LoadUint64(a.head) {
		t.Errorf("tail %d after draining to %d", got, atomic.LoadUint64(a.head))
	}
}

// TestRecords decodes each kind of record.
func TestRecords(t *testing.T) {
	c, sink := testCollector()
	r := testRing(t, 1<<16)
	p := &proc{pid: 7, rings: []*ring{r}, idBase: 100, final: true}
	path := "/lib/libx.so"
	id := []byte{0xde, 0xad, 0xbe, 0xef}
	body := make([]byte, 8*((len(path)+len(id)+7)/8))
	copy(body, path)
	copy(body[len(path):], id)
	mod := []uint64{recModule | uint64(6+len(body)/8)<<8, 1, 0x1000, 0x2000, 0x400, uint64(len(path)) | uint64(len(id))<<32}
	for i := 0; i < len(body); i += 8 {
		mod = append(mod, binary.LittleEndian.Uint64(body[i:]))
	}
	produce(r, recThread|2<<8|42<<32, 0)
	produce(r, mod...)
	produce(r, recStack|4<<8|3<<32, 2, 0x1111, 0x1222)
	produce(r, uint64(event.FuncRealloc)|5<<8|3<<32, 3, 0xb000, 64, 0xa000)
	produce(r, uint64(event.FuncMremap)|6<<8, 4, 0xc000, 8192, 0xd000, 4096)
	produce(r, uint64(event.FuncMunmap)|4<<8, 5, 0xc000, 8192)
	c.drain(p, false)
	wantMod := event.Module{PID: 7, Time: sink.mods[0].Time, Start: 0x1000, End: 0x2000, Offset: 0x400, Path: path, BuildID: "deadbeef"}
	if len(sink.mods) != 1 || sink.mods[0] != wantMod {
		t.Errorf("modules %+v, want %+v", sink.mods, wantMod)
	}
	if len(sink.stacks) != 1 || sink.stacks[0].ID != 103 || !reflect.DeepEqual(sink.stacks[0].Frames, []uint64{0x1111, 0x1222}) {
		t.Errorf("stacks %+v", sink.stacks)
	}
	want := []event.Event{
		{PID: 7, TID: 42, Kind: event.KindRealloc, Func: event.FuncRealloc, Stack: 103, Addr: 0xb000, Size: 64, OldAddr: 0xa000},
		{PID: 7, TID: 42, Kind: event.KindRealloc, Func: event.FuncMremap, Heap: event.HeapMmap, Addr: 0xc000, Size: 8192, OldAddr: 0xd000, OldSize: 4096},
		{PID: 7, TID: 42, Kind: event.KindMunmap, Func: event.FuncMunmap, Heap: event.HeapMmap, Addr: 0xc000, Size: 8192},
	}
	for i := range sink.events {
		sink.events[i].Time = 0
	}
	if !reflect.DeepEqual(sink.events, want) {
		t.Errorf("events\n%+v\nwant\n%+v", sink.events, want)
	}
	if r.broken {
		t.Error("well-formed ring marked broken")
	}
}

// FuzzRing feeds the decoder whatever a corrupt or hostile process could
// write: it must never panic or read out of bounds, and a ring it gives up
// on is counted.
func FuzzRing(f *testing.F) {
	f.Add([]byte{0x81, 3, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8}, uint16(24))
	f.Add([]byte{1, 4, 0, 0, 9, 0, 0, 0, 5, 0, 0, 0, 0, 0, 0, 0}, uint16(32))
	f.Add([]byte{0x82, 0xff, 0xff, 0xff, 0, 0, 0, 0}, uint16(8))
	f.Add([]byte{0x80, 0, 0, 0, 0, 0, 0, 0}, uint16(16))
	f.Fuzz(func(t *testing.T, data []byte, head uint16) {
		c, _ := testCollector()
		r := testRing(t, ringMin)
		copy(r.data, data)
		copy(r.data[ringMin-len(data)%ringMin:], data) // and at the end, across the wrap
		atomic.StoreUint64(r.head, uint64(head))
		p := &proc{pid: 1, rings: []*ring{r}, final: true}
		c.drain(p, false)
		c.drain(p, false)
		if r.broken && c.broken != 1 {
			t.Errorf("broken ring counted %d times", c.broken)
		}
	})
}

func TestConfig(t *testing.T) {
	c, err := Config{}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	want := Config{Families: event.FamilyHeap, Stacks: event.DefaultStacks, MaxFrames: DefaultMaxFrames,
		BufferSize: DefaultBufferSize, OnFull: event.Block, FlushInterval: DefaultFlushInterval}
	if c.OnWarning != nil || !reflect.DeepEqual(c, want) {
		t.Errorf("defaults %+v, want %+v", c, want)
	}
	if c, _ := (Config{BufferSize: 100_000}).withDefaults(); c.BufferSize != 131072 {
		t.Errorf("BufferSize 100000 rounded to %d", c.BufferSize)
	}
	for _, bad := range []Config{
		{Families: 1 << 20},
		{Stacks: 1 << 7},
		{Unwind: 9},
		{MaxFrames: MaxFrames + 1},
		{MaxFrames: -1},
		{BufferSize: MinBufferSize - 1},
		{BufferSize: MaxBufferSize + 1},
		{OnFull: 5},
		{FlushInterval: -time.Second},
	} {
		if _, err := bad.withDefaults(); !errors.Is(err, errs.ErrInvalidFlags) {
			t.Errorf("%+v: %v, want ErrInvalidFlags", bad, err)
		}
		if _, err := New(bad, event.Discard); !errors.Is(err, errs.ErrInvalidFlags) {
			t.Errorf("New(%+v): %v, want ErrInvalidFlags", bad, err)
		}
	}
	if _, err := New(Config{}, nil); !errors.Is(err, errs.ErrInvalidFlags) {
		t.Errorf("New with a nil sink: %v", err)
	}
	// The unwinders go to the C side by number.
	for u, wire := range map[event.Unwind]uint32{event.UnwindFP: unwindFP, event.UnwindDWARF: unwindDWARF,
		event.UnwindTables: unwindTables, unwindTablesOnly: unwindTablesFP} {
		if uint32(u) != wire {
			t.Errorf("%v is %d, the interposer's %d", u, u, wire)
		}
	}
}

// TestClosed checks what a closed collector refuses.
func TestClosed(t *testing.T) {
	c, err := New(Config{}, event.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if err := c.Flush(); !errors.Is(err, errs.ErrNotRunning) {
		t.Errorf("Flush after Close: %v", err)
	}
	if err := c.SetStacks(0); !errors.Is(err, errs.ErrNotRunning) {
		t.Errorf("SetStacks after Close: %v", err)
	}
	if err := c.SetStacks(1 << 7); !errors.Is(err, errs.ErrInvalidFlags) {
		t.Errorf("SetStacks(bad): %v", err)
	}
	if got := c.Stacks(); got != event.DefaultStacks {
		t.Errorf("Stacks() after Close = %v", got)
	}
	c.Exited(1, 0, 0) // ignored, harmless
	if _, err := os.Stat(c.sock); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket still there after Close: %v", err)
	}
}

// TestLibraryPath writes the interposer once, privately, and replaces a
// file that is not it.
func TestLibraryPath(t *testing.T) {
	dir := t.TempDir()
	p, err := writeLibraryIn(dir+"/cache", "lib.so")
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(p); err != nil || string(b) != string(library) {
		t.Fatalf("written library differs: %v", err)
	}
	if fi, _ := os.Stat(dir + "/cache"); fi.Mode().Perm() != 0o700 {
		t.Errorf("cache directory mode %v", fi.Mode())
	}
	if err := os.WriteFile(p, []byte("not a library"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := writeLibraryIn(dir+"/cache", "lib.so"); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(p); string(b) != string(library) {
		t.Error("a tampered library was kept")
	}
	if err := os.Chmod(dir+"/cache", 0o777); err != nil {
		t.Fatal(err)
	}
	if _, err := writeLibraryIn(dir+"/cache", "lib.so"); err == nil {
		t.Error("a world-writable cache directory was used")
	}
}
