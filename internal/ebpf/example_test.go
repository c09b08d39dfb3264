package ebpf_test

import (
	"errors"
	"fmt"
	"os"
	"os/signal"

	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/internal/ebpf"
	"github.com/heapscope/heapscope/internal/errs"
)

// totals is a Sink that counts bytes allocated per process.
type totals struct {
	event.Sink
	bytes map[uint32]uint64
}

func (t *totals) Events(evs []event.Event) error {
	for _, e := range evs {
		if e.Kind == event.KindAlloc && e.Addr != 0 {
			t.bytes[e.PID] += e.Size
		}
	}
	return nil
}

// Trace a running process until it exits or the user interrupts, then
// print how much it allocated and what was lost.
func Example() {
	pid := 1234 // a running process
	if err := ebpf.Available(); errors.Is(err, errs.ErrAccessDenied) {
		fmt.Println("run as root:", err)
		return
	}
	sink := &totals{Sink: event.Discard, bytes: map[uint32]uint64{}}
	tr, err := ebpf.New(ebpf.Config{Mode: event.Stream}, sink)
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := tr.Attach(pid); err != nil {
		tr.Close()
		fmt.Println(err) // errs.ErrNoSuchProcess if it is gone
		return
	}
	interrupt := make(chan os.Signal, 1)
	signal.Notify(interrupt, os.Interrupt)
	select {
	case <-tr.Done(): // it exited
	case <-interrupt:
	}
	if err := tr.Close(); err != nil { // every captured event is in sink now
		fmt.Println(err)
	}
	st := tr.Stats()
	fmt.Printf("%d bytes allocated; %d events delivered, %d lost\n", sink.bytes[uint32(pid)], st.Delivered, st.TotalLost())
}
