package event

import "errors"

// Discard is a Sink that drops everything.
var Discard Sink = discard{}

type discard struct{}

func (discard) Process(Process) error   { return nil }
func (discard) Exit(Exit) error         { return nil }
func (discard) Module(Module) error     { return nil }
func (discard) Stack(Stack) error       { return nil }
func (discard) Events([]Event) error    { return nil }
func (discard) Snapshot(Snapshot) error { return nil }
func (discard) Stats(Stats) error       { return nil }
func (discard) Note(Note) error         { return nil }

// Tee returns a Sink that passes every record to each of sinks in turn. Every
// sink sees every record even when an earlier one fails; the errors are joined.
func Tee(sinks ...Sink) Sink {
	if len(sinks) == 1 {
		return sinks[0]
	}
	return tee(sinks)
}

type tee []Sink

func (t tee) each(f func(Sink) error) error {
	var errs []error
	for _, s := range t {
		if err := f(s); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (t tee) Process(p Process) error {
	return t.each(func(s Sink) error { return s.Process(p) })
}
func (t tee) Exit(e Exit) error     { return t.each(func(s Sink) error { return s.Exit(e) }) }
func (t tee) Module(m Module) error { return t.each(func(s Sink) error { return s.Module(m) }) }
func (t tee) Stack(st Stack) error  { return t.each(func(s Sink) error { return s.Stack(st) }) }
func (t tee) Events(ev []Event) error {
	return t.each(func(s Sink) error { return s.Events(ev) })
}
func (t tee) Snapshot(sn Snapshot) error {
	return t.each(func(s Sink) error { return s.Snapshot(sn) })
}
func (t tee) Stats(st Stats) error { return t.each(func(s Sink) error { return s.Stats(st) }) }
func (t tee) Note(n Note) error    { return t.each(func(s Sink) error { return s.Note(n) }) }
