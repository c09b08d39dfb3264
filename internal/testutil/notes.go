package testutil

import "github.com/heapscope/heapscope/event"

// NoteSink is an event.Sink that keeps the notes of a replay and drops the
// rest. Its zero value is not ready: use NewNoteSink.
type NoteSink struct {
	event.Sink
	Notes []event.Note
}

// NewNoteSink returns an empty NoteSink.
func NewNoteSink() *NoteSink { return &NoteSink{Sink: event.Discard} }

// Note implements event.Sink.
func (s *NoteSink) Note(n event.Note) error {
	s.Notes = append(s.Notes, n)
	return nil
}

// NotesOf returns the notes of type T (event.Verdict, event.Warning, …)
// among s's, in their order.
func NotesOf[T event.Note](s *NoteSink) []T {
	var out []T
	for _, n := range s.Notes {
		if v, ok := n.(T); ok {
			out = append(out, v)
		}
	}
	return out
}
