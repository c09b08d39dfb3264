package analyze

import (
	"errors"
	"math/rand"
	"reflect"
	"testing"

	"github.com/heapscope/heapscope/event"
)

// TestAsync checks that a model fed through Async computes exactly what a
// model fed directly does, with the producer reusing its batch buffer.
func TestAsync(t *testing.T) {
	evs := randomTrace(rand.New(rand.NewSource(7)), 50000)
	direct := New(Options{})
	viaAsync := New(Options{})
	a := NewAsync(viaAsync)
	frames := []uint64{1, 2, 3}
	for _, m := range []event.Sink{direct, a} {
		must(t, m.Process(event.Process{PID: 100, Exe: "x", Cmdline: []string{"x"}}))
		must(t, m.Stack(event.Stack{PID: 100, ID: 1, Frames: frames}))
	}
	frames[0] = 99 // a producer may reuse its buffers
	buf := make([]event.Event, 0, 100)
	for i := 0; i < len(evs); i += 100 {
		batch := evs[i:min(i+100, len(evs))]
		must(t, direct.Events(batch))
		buf = append(buf[:0], batch...)
		must(t, a.Events(buf))
		for j := range buf {
			buf[j] = event.Event{} // reused at once
		}
	}
	for _, m := range []event.Sink{direct, a} {
		must(t, m.Snapshot(event.Snapshot{PID: 101, Time: 1e12, Live: []event.LiveBlock{{Addr: 1, Size: 2, Stack: 1, Time: 1e12}}}))
		must(t, m.Exit(event.Exit{PID: 100, Time: 1e12, Status: 1}))
		must(t, m.Module(event.Module{PID: 100, Start: 1, End: 2, Path: "m"}))
		must(t, m.Stats(event.Stats{Delivered: 5}))
	}
	must(t, a.Close())
	want, got := direct.Profile(), viaAsync.Profile()
	if !reflect.DeepEqual(want, got) {
		t.Errorf("profiles differ:\nwant %+v\n got %+v", want.Summary, got.Summary)
	}
	if s := stackOf(t, got, 100, 1); s.Frames[0] != 1 {
		t.Errorf("frames %v: the copy was not taken", s.Frames)
	}
}

type failing struct{ event.Sink }

var errFull = errors.New("full")

func (failing) Events([]event.Event) error { return errFull }

func TestAsyncError(t *testing.T) {
	a := NewAsync(failing{event.Discard})
	var err error
	for i := 0; i < 10000 && err == nil; i++ {
		err = a.Events([]event.Event{{Kind: event.KindAlloc}})
	}
	if cerr := a.Close(); !errors.Is(cerr, errFull) {
		t.Errorf("Close: %v", cerr)
	}
	if !errors.Is(err, errFull) {
		t.Errorf("the producer never saw the error: %v", err)
	}
}
