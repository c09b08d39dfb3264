// Package live follows a trace file while its session writes it: each Poll
// reads the chunks written since the last one into a heap model that lives
// as long as the Tail, and Report symbolizes the model's state so far. It is
// what `heapscope top` shows.
//
// Reading the file, rather than hooking the session's events, serves the
// three ways top gets a session alike (one it launched, one it attached,
// one it joined by name from another process), costs the session nothing
// per event, and reads each chunk once: a poll decodes only the chunks that
// are new, since chunks are compressed independently.
package live

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/heapscope/heapscope/analyze"
	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/report"
	"github.com/heapscope/heapscope/symbolize"
	"github.com/heapscope/heapscope/tracefile"
)

// The parts of the file layout a Tail needs to find whole chunks (see
// tracefile/FORMAT.md): an 8-byte-aligned header whose body length is at
// byte 12, then chunks of a 64-byte header (magic "HSCK"; compressed
// section lengths at bytes 32 and 40) and the sections, padded to 8 bytes.
const (
	fileHeaderFixed = 16
	chunkHeaderSize = 64
	chunkMagic      = "HSCK"
	align           = 8
	maxHeaderBody   = 1 << 20
)

// ErrNotTrace is returned by Open for a file that is not a heapscope trace.
var ErrNotTrace = errors.New("not a heapscope trace file")

// Tail follows one trace file.
type Tail struct {
	f      *os.File
	path   string
	hdr    tracefile.Header
	hdrEnd int64 // where the first chunk starts
	off    int64 // where the next unread chunk starts
	m      *analyze.Model
	sym    *symbolize.Symbolizer
	sink   modelSink
}

// Open opens the trace file at path, which its session may still be
// writing. Files of circular sessions, which overwrite their start, cannot
// be followed.
func Open(path string, o symbolize.Options) (*Tail, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	var fixed [fileHeaderFixed]byte
	if _, err := f.ReadAt(fixed[:], 0); err != nil || string(fixed[:8]) != "HEAPSCOP" {
		f.Close()
		return nil, fmt.Errorf("%s: %w", path, ErrNotTrace)
	}
	n := int64(binary.LittleEndian.Uint32(fixed[12:]))
	if n > maxHeaderBody {
		f.Close()
		return nil, fmt.Errorf("%s: %w (header of %d bytes)", path, ErrNotTrace, n)
	}
	end := alignUp(fileHeaderFixed + n + 4)
	r, err := tracefile.NewReader(io.NewSectionReader(f, 0, end), end)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	t := &Tail{f: f, path: path, hdr: r.Header(), hdrEnd: end, off: end,
		m: analyze.New(analyze.Options{}), sym: symbolize.New(o)}
	t.sink = modelSink{Model: t.m, sym: t.sym}
	return t, nil
}

// Header is the trace's header.
func (t *Tail) Header() tracefile.Header { return t.hdr }

// Close releases the file and the symbolizer.
func (t *Tail) Close() error {
	t.sym.Close()
	return t.f.Close()
}

func alignUp(n int64) int64 { return (n + align - 1) &^ (align - 1) }

// Poll reads the chunks written completely since the last Poll into the
// model and returns how many bytes of the file it read. A chunk still being
// written waits for the next Poll. An index or trailer (written when the
// session closes the file) ends the chunks.
func (t *Tail) Poll() (int64, error) {
	st, err := t.f.Stat()
	if err != nil {
		return 0, err
	}
	size := st.Size()
	end := t.off
	var h [chunkHeaderSize]byte
	for end+chunkHeaderSize <= size {
		if _, err := t.f.ReadAt(h[:], end); err != nil {
			return 0, err
		}
		if string(h[:4]) != chunkMagic {
			break // the index, or a chunk header not written yet
		}
		n := chunkHeaderSize + alignUp(int64(binary.LittleEndian.Uint32(h[32:]))+int64(binary.LittleEndian.Uint32(h[40:])))
		if end+n > size {
			break
		}
		end += n
	}
	if end == t.off {
		return 0, nil
	}
	// The header and the new chunks, as one file: chunks stand alone, and
	// the definitions of earlier ones are in the model already.
	ra := &spliced{f: t.f, hdrEnd: t.hdrEnd, off: t.off}
	r, err := tracefile.NewReader(ra, t.hdrEnd+end-t.off)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", t.path, err)
	}
	err = r.Replay(&t.sink, tracefile.Window{})
	r.Close()
	if err != nil {
		return 0, fmt.Errorf("%s: %w", t.path, err)
	}
	read := end - t.off
	t.off = end
	return read, nil
}

// spliced is the file's header followed by the file from off.
type spliced struct {
	f           *os.File
	hdrEnd, off int64
}

func (s *spliced) ReadAt(b []byte, at int64) (int, error) {
	n := 0
	if at < s.hdrEnd {
		k := min(int64(len(b)), s.hdrEnd-at)
		m, err := s.f.ReadAt(b[:k], at)
		n += m
		if err != nil || int64(m) == int64(len(b)) {
			return n, err
		}
		b, at = b[k:], s.hdrEnd
	}
	m, err := s.f.ReadAt(b, at-s.hdrEnd+s.off)
	return n + m, err
}

// modelSink feeds the model and passes module records to the symbolizer.
type modelSink struct {
	*analyze.Model
	sym *symbolize.Symbolizer
}

func (s *modelSink) Module(m event.Module) error {
	s.sym.AddModule(m)
	return s.Model.Module(m)
}

// Profile is the model's state after the last Poll.
func (t *Tail) Profile() *analyze.Profile { return t.m.Profile() }

// Report symbolizes p (from Profile, or a part of it) into sites.
func (t *Tail) Report(p *analyze.Profile) *report.Report {
	return report.New(p, report.Trace{File: t.path, Session: t.hdr.Session, Provider: t.hdr.Provider,
		Start: t.hdr.MonoStart, WallStart: t.hdr.WallStart}, t.sym)
}

// ForPID returns the part of p that is process pid's: its stacks, with the
// totals and the peak of p left as they are.
func ForPID(p *analyze.Profile, pid uint32) *analyze.Profile {
	q := *p
	q.Stacks = nil
	for _, s := range p.Stacks {
		if s.PID == pid {
			q.Stacks = append(q.Stacks, s)
		}
	}
	return &q
}
