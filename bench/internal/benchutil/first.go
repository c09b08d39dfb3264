package benchutil

import (
	"fmt"

	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/tracefile"
)

// FirstEvent returns the time of the earliest heap event in the trace at
// path (CLOCK_MONOTONIC, the trace's clock); a trace without one is an
// error.
func FirstEvent(path string) (int64, error) {
	r, err := tracefile.Open(path)
	if err != nil {
		return 0, err
	}
	defer r.Close()
	s := firstSink{Sink: event.Discard}
	if err := r.Replay(&s, tracefile.Window{}); err != nil {
		return 0, err
	}
	if s.first == 0 {
		return 0, fmt.Errorf("%s: no event", path)
	}
	return s.first, nil
}

// firstSink keeps the earliest event's time and drops the rest.
type firstSink struct {
	event.Sink
	first int64
}

func (s *firstSink) Events(evs []event.Event) error {
	for _, e := range evs {
		if s.first == 0 || e.Time < s.first {
			s.first = e.Time
		}
	}
	return nil
}
