package tracefile

import (
	"fmt"

	"github.com/heapscope/heapscope/event"
)

// The definitions section holds a chunk's processes, modules, stacks and
// stats: the records a reader needs even when it skips the chunk's
// timeline. Each record is a tag byte and its fields.

func appendProcess(b []byte, p *event.Process) []byte {
	b = append(b, defProcess)
	b = appendUvarint(b, uint64(p.PID))
	b = appendUvarint(b, uint64(p.PPID))
	b = appendVarint(b, p.Time)
	b = appendString(b, p.Exe)
	b = appendUvarint(b, uint64(len(p.Cmdline)))
	for _, a := range p.Cmdline {
		b = appendString(b, a)
	}
	return b
}

func appendModule(b []byte, m *event.Module) []byte {
	b = append(b, defModule)
	b = appendUvarint(b, uint64(m.PID))
	b = appendVarint(b, m.Time)
	b = appendUvarint(b, m.Start)
	b = appendUvarint(b, m.End-m.Start)
	b = appendUvarint(b, m.Offset)
	b = appendString(b, m.Path)
	return appendString(b, m.BuildID)
}

// appendStack stores the frames as the first one and then differences,
// which are small within a module.
func appendStack(b []byte, s *event.Stack) []byte {
	b = append(b, defStack)
	b = appendUvarint(b, uint64(s.PID))
	b = appendUvarint(b, uint64(s.ID))
	b = appendUvarint(b, uint64(len(s.Frames)))
	var prev uint64
	for _, f := range s.Frames {
		b = appendVarint(b, int64(f-prev))
		prev = f
	}
	return b
}

func appendStats(b []byte, s *event.Stats) []byte {
	b = append(b, defStats)
	b = appendVarint(b, s.Time)
	b = appendUvarint(b, s.Delivered)
	// The counters: the events lost by reason, then the stacks cut (see
	// FORMAT.md: a reader ignores counters it does not know).
	cut := statsCut(s)
	b = appendUvarint(b, uint64(len(s.Lost)+len(cut)))
	for _, n := range s.Lost {
		b = appendUvarint(b, n)
	}
	for _, n := range cut {
		b = appendUvarint(b, *n)
	}
	b = appendUvarint(b, s.StacksLost)
	b = appendUvarint(b, s.Unmatched)
	return appendUvarint(b, s.Bytes)
}

func appendExitDef(b []byte, x *event.Exit) []byte {
	b = append(b, defExit)
	b = appendUvarint(b, uint64(x.PID))
	b = appendVarint(b, x.Time)
	b = appendVarint(b, int64(x.Status))
	return appendVarint(b, int64(x.Signal))
}

// statsCut returns the counters of a stats record that follow the events
// lost, in their order in the record.
func statsCut(s *event.Stats) [3]*uint64 {
	return [3]*uint64{&s.StacksCut, &s.StacksCutDepth, &s.StacksCutNoTable}
}

// defsHandler receives the records of a definitions section.
type defsHandler interface {
	event.Sink
	exitDef(event.Exit) error
}

// decodeDefs replays a definitions section into h. The frames of each
// Stack it passes are reused for the next (see event.Sink).
func decodeDefs(raw []byte, h defsHandler) error {
	var frames []uint64
	bad := func(at int, what string) error {
		return &decodeError{fmt.Sprintf("definitions byte %d", at), what}
	}
	u32 := func(i int) (uint32, int) {
		v, i := uvarint(raw, i)
		if v > 1<<32-1 {
			return 0, -1
		}
		return uint32(v), i
	}
	for i := 0; i < len(raw); {
		at := i
		tag := raw[i]
		i++
		var err error
		switch tag {
		case defProcess:
			var p event.Process
			var n uint64
			p.PID, i = u32(i)
			p.PPID, i = u32(i)
			p.Time, i = varint(raw, i)
			p.Exe, i = stringAt(raw, i)
			n, i = uvarint(raw, i)
			if i < 0 || n > uint64(len(raw)-i) { // every argument takes a byte
				return bad(at, "a process record (pid, ppid, time, exe, argument count)")
			}
			if n > 0 {
				p.Cmdline = make([]string, n)
				for k := range p.Cmdline {
					p.Cmdline[k], i = stringAt(raw, i)
				}
				if i < 0 {
					return bad(at, "the process's arguments")
				}
			}
			err = h.Process(p)
		case defModule:
			var m event.Module
			var length uint64
			m.PID, i = u32(i)
			m.Time, i = varint(raw, i)
			m.Start, i = uvarint(raw, i)
			length, i = uvarint(raw, i)
			m.Offset, i = uvarint(raw, i)
			m.Path, i = stringAt(raw, i)
			m.BuildID, i = stringAt(raw, i)
			if i < 0 {
				return bad(at, "a module record (pid, time, start, length, offset, path, build-id)")
			}
			m.End = m.Start + length
			err = h.Module(m)
		case defStack:
			var s event.Stack
			var id, n uint64
			s.PID, i = u32(i)
			id, i = uvarint(raw, i)
			n, i = uvarint(raw, i)
			if i < 0 || id > 1<<32-1 || n > maxFrames || n > uint64(len(raw)-i) {
				return bad(at, "a stack record (pid, id, frame count)")
			}
			s.ID = event.StackID(id)
			if n > 0 {
				if uint64(cap(frames)) < n {
					frames = make([]uint64, n)
				}
				s.Frames = frames[:n]
				var prev uint64
				for k := range s.Frames {
					var d int64
					d, i = varint(raw, i)
					prev += uint64(d)
					s.Frames[k] = prev
				}
				if i < 0 {
					return bad(at, "the stack's frames")
				}
			}
			err = h.Stack(s)
		case defStats:
			var s event.Stats
			var n uint64
			s.Time, i = varint(raw, i)
			s.Delivered, i = uvarint(raw, i)
			n, i = uvarint(raw, i)
			if i < 0 || n > 255 {
				return bad(at, "a stats record (time, delivered, reason count)")
			}
			cut := statsCut(&s)
			for k := uint64(0); k < n; k++ {
				var v uint64
				v, i = uvarint(raw, i)
				switch {
				case k < uint64(len(s.Lost)):
					s.Lost[k] = v
				case k < uint64(len(s.Lost)+len(cut)):
					*cut[k-uint64(len(s.Lost))] = v
				}
			}
			s.StacksLost, i = uvarint(raw, i)
			s.Unmatched, i = uvarint(raw, i)
			s.Bytes, i = uvarint(raw, i)
			if i < 0 {
				return bad(at, "a stats record's counters")
			}
			err = h.Stats(s)
		case defExit:
			var x event.Exit
			var status, sig int64
			x.PID, i = u32(i)
			x.Time, i = varint(raw, i)
			status, i = varint(raw, i)
			sig, i = varint(raw, i)
			if i < 0 || status != int64(int32(status)) || sig != int64(int32(sig)) {
				return bad(at, "an exit record (pid, time, status, signal)")
			}
			x.Status, x.Signal = int32(status), int32(sig)
			err = h.exitDef(x)
		case defWarning:
			var w event.Warning
			if w, i = decodeWarning(raw, i); i < 0 {
				return bad(at, "a warning record (pid, time, code, text)")
			}
			err = h.Note(w)
		default:
			return bad(at, fmt.Sprintf("a definition tag 1-6 (got %d)", tag))
		}
		if err != nil {
			return err
		}
	}
	return nil
}
