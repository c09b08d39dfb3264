package tracefile

import (
	"bytes"

	"github.com/heapscope/heapscope/event"
)

// Recovering a damaged definitions section.
//
// The writer compresses a chunk's definitions in zstd frames of a few tens
// of KiB, each starting at a record and carrying zstd's content checksum.
// When the section's checksum fails, the reader decodes each frame on its
// own and keeps the records of those whose checksum holds; a frame it
// cannot even delimit is skipped by looking for the next frame's magic
// number. The chunk's timeline, which has a checksum of its own, is still
// read. From then on, the replay drops what refers to a definition that
// may have been lost (an event, exit or snapshot of a process never
// defined, an event with a stack never defined, a module or stack of an
// unknown process), so that a sink still sees every process before its
// records and every stack before its first event, and says how much it
// dropped.

var zstdMagic = []byte{0x28, 0xb5, 0x2f, 0xfd}

// frameLen returns the length of the zstd frame at the start of b, and
// whether it has a content checksum; ok false when b does not hold a whole
// frame.
func frameLen(b []byte) (n int, checksum, ok bool) {
	if len(b) < 6 || !bytes.Equal(b[:4], zstdMagic) {
		return 0, false, false
	}
	fhd := b[4]
	single := fhd&0x20 != 0
	checksum = fhd&0x04 != 0
	if fhd&0x08 != 0 { // reserved bit
		return 0, false, false
	}
	i := 5
	if !single {
		i++ // window descriptor
	}
	i += []int{0, 1, 2, 4}[fhd&3] // dictionary id
	fcs := []int{0, 2, 4, 8}[fhd>>6]
	if fcs == 0 && single {
		fcs = 1
	}
	i += fcs
	for {
		if i+3 > len(b) {
			return 0, false, false
		}
		h := uint32(b[i]) | uint32(b[i+1])<<8 | uint32(b[i+2])<<16
		i += 3
		last, typ, size := h&1 != 0, (h>>1)&3, int(h>>3)
		switch typ {
		case 0, 2: // raw, compressed
			i += size
		case 1: // RLE: one byte
			i++
		default:
			return 0, false, false
		}
		if i > len(b) {
			return 0, false, false
		}
		if last {
			break
		}
	}
	if checksum {
		i += 4
	}
	if i > len(b) {
		return 0, false, false
	}
	return i, checksum, true
}

// recoverDefs decodes the frames of a damaged definitions section comp
// whose checksums hold, and warns of what was lost.
func (r *Reader) recoverDefs(e indexEntry, comp []byte, rawLen uint32) []byte {
	raw := make([]byte, 0, rawLen) // DecodeAll decodes no more than its capacity
	good, bad := 0, 0
	for i := 0; i < len(comp); {
		if n, sum, ok := frameLen(comp[i:]); ok && sum {
			if out, err := r.dec.DecodeAll(comp[i:i+n], raw); err == nil {
				raw = out
				good++
				i += n
				continue
			}
		}
		// Damaged, or a frame without a checksum (an older writer's),
		// which cannot be trusted: on to the next frame's magic.
		bad++
		next := bytes.Index(comp[i+1:], zstdMagic)
		if next < 0 {
			break
		}
		i += 1 + next
	}
	r.warn("chunk at byte %d: the definitions section is damaged: %d of its %d bytes recovered (%d frames intact, %d damaged); the processes, modules and stacks in the rest are lost",
		e.off, len(raw), rawLen, good, bad)
	return raw
}

// Definitions seen, so that after damage the replay can tell records whose
// definitions were lost.

func (s *replayState) Process(p event.Process) error {
	if s.pids == nil {
		s.pids = map[uint32]bool{}
	}
	s.pids[p.PID] = true
	return s.Sink.Process(p)
}

// ensure makes sure that, after damage, pid has a process record before a
// record of it at time t: a process whose record was lost gets one with
// nothing but its pid, so that its intact records are kept.
func (s *replayState) ensure(pid uint32, t int64) error {
	if !s.damaged || s.pids[pid] {
		return nil
	}
	s.unnamed++
	return s.Process(event.Process{PID: pid, Time: t})
}

func (s *replayState) Module(m event.Module) error {
	if err := s.ensure(m.PID, m.Time); err != nil {
		return err
	}
	return s.Sink.Module(m)
}

func (s *replayState) Stack(st event.Stack) error {
	k := uint64(st.PID)<<32 | uint64(st.ID)
	if s.damaged {
		if err := s.ensure(st.PID, 0); err != nil {
			return err
		}
		s.stacks[k] = struct{}{}
	} else {
		s.stackKeys = append(s.stackKeys, k)
	}
	return s.Sink.Stack(st)
}

// damage notes that definitions were lost: from now on events whose stack
// is unknown are dropped, and processes whose record was lost are made up.
func (s *replayState) damage() {
	if s.damaged {
		return
	}
	s.damaged = true
	s.stacks = make(map[uint64]struct{}, len(s.stackKeys))
	for _, k := range s.stackKeys {
		s.stacks[k] = struct{}{}
	}
	s.stackKeys = nil
}

// timelineSink is where a chunk's timeline goes: the sink, or after damage
// a filter in front of it.
func (s *replayState) timelineSink() event.Sink {
	if s.damaged {
		return guard{s}
	}
	return s.Sink
}

// guard keeps the Sink's promises for the timeline after damage.
type guard struct{ s *replayState }

func (g guard) Process(p event.Process) error { return g.s.Process(p) }
func (g guard) Module(m event.Module) error   { return g.s.Module(m) }
func (g guard) Stack(st event.Stack) error    { return g.s.Stack(st) }
func (g guard) Stats(x event.Stats) error     { return g.s.Stats(x) }

func (g guard) Events(evs []event.Event) error {
	s := g.s
	kept := s.kept[:0]
	for _, e := range evs {
		if e.Stack != 0 {
			if _, ok := s.stacks[uint64(e.PID)<<32|uint64(e.Stack)]; !ok {
				s.dropped++
				continue
			}
		}
		if err := s.ensure(e.PID, e.Time); err != nil {
			return err
		}
		kept = append(kept, e)
	}
	s.kept = kept[:0]
	if len(kept) == 0 {
		return nil
	}
	return s.Sink.Events(kept)
}

func (g guard) Exit(x event.Exit) error {
	if err := g.s.ensure(x.PID, x.Time); err != nil {
		return err
	}
	return g.s.Sink.Exit(x)
}

func (g guard) Note(n event.Note) error {
	if pid, t := n.Of(); pid != 0 {
		if err := g.s.ensure(pid, t); err != nil {
			return err
		}
	}
	return g.s.Sink.Note(n)
}

func (g guard) Snapshot(sn event.Snapshot) error {
	if err := g.s.ensure(sn.PID, sn.Time); err != nil {
		return err
	}
	return g.s.Sink.Snapshot(sn)
}

// warnDropped says what the replay made up or dropped after damage.
func (r *Reader) warnDropped(s *replayState) {
	if s.unnamed > 0 {
		r.warn("%d processes whose definitions were damaged are shown by pid only", s.unnamed)
	}
	if s.dropped > 0 {
		r.warn("%d events were dropped: their stacks' definitions were damaged", s.dropped)
	}
}
