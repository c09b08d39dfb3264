package tracefile

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/heapscope/heapscope/event"
)

// Mode is how a trace is written when it reaches its maximum size: the
// session's log file mode (event.LogFileMode, defined there once), stored
// in the header by number. RealTime writes no file: Create refuses it.
type Mode = event.LogFileMode

// The modes; see event.LogFileMode. Sequential stops at MaxSize and counts
// the events it could not write as event.LostFileLimit; Circular overwrites
// the oldest chunks and counts them as event.LostOverwritten.
const (
	Sequential = event.Sequential
	Circular   = event.Circular
	NewFile    = event.NewFile
	RealTime   = event.RealTime
)

// Property is one of a session's properties, as text.
type Property struct {
	Key, Value string
}

// Header describes the session a trace file came from. The writer stores it
// at the start of every file.
type Header struct {
	Session    string     // the session's name
	Provider   string     // "preload" or "ebpf"
	Properties []Property // the session's properties as key/value text
	Hostname   string
	Kernel     string    // uname release
	Clock      string    // the clock of event times: "CLOCK_MONOTONIC"
	WallStart  time.Time // the wall clock at MonoStart
	MonoStart  int64     // Clock's reading, in ns, when the session started
	Mode       Mode
	MaxSize    int64 // bytes per file; 0 means unlimited (Sequential only)
	// SampleRate is the mean number of bytes allocated per recorded
	// allocation when the session sampled (an allocation of S bytes was
	// recorded with probability 1 - exp(-S/SampleRate)); 0 means every
	// event was recorded, as in every trace written before sampling existed.
	SampleRate int64

	// Part is set by the writer: in NewFile mode, the number this file
	// stands for in the path (1, 2, ...); otherwise 0.
	Part int
	// TimeResolution is set by the writer from Options.TimeResolution: the
	// times of events, exits and snapshots are multiples of it.
	TimeResolution time.Duration
	// Version is the format version of the file, set by the writer.
	Version int
}

// Header field tags. Each field is stored as tag, length, value, so that a
// reader skips the fields it does not know.
const (
	hSession   = 1
	hProvider  = 2
	hProperty  = 3
	hHostname  = 4
	hKernel    = 5
	hClock     = 6
	hWallStart = 7
	hMonoStart = 8
	hMode      = 9
	hMaxSize   = 10
	hPart      = 11
	hTimeRes   = 12
	hSample    = 13
)

// marshalHeader returns the file header: fixed part, body, checksum and
// padding to the alignment.
func marshalHeader(h *Header) []byte {
	var body []byte
	field := func(tag uint64, v []byte) {
		body = appendUvarint(body, tag)
		body = appendUvarint(body, uint64(len(v)))
		body = append(body, v...)
	}
	str := func(tag uint64, s string) {
		if s != "" {
			field(tag, []byte(s))
		}
	}
	num := func(tag uint64, v int64) { field(tag, appendVarint(nil, v)) }
	str(hSession, h.Session)
	str(hProvider, h.Provider)
	for _, p := range h.Properties {
		field(hProperty, appendString(appendString(nil, p.Key), p.Value))
	}
	str(hHostname, h.Hostname)
	str(hKernel, h.Kernel)
	str(hClock, h.Clock)
	if !h.WallStart.IsZero() {
		num(hWallStart, h.WallStart.UnixNano())
	}
	num(hMonoStart, h.MonoStart)
	num(hMode, int64(h.Mode))
	num(hMaxSize, h.MaxSize)
	if h.Part != 0 {
		num(hPart, int64(h.Part))
	}
	num(hTimeRes, int64(h.TimeResolution))
	if h.SampleRate != 0 {
		num(hSample, h.SampleRate)
	}

	b := make([]byte, fileHeaderFixed, alignUp(int64(fileHeaderFixed+len(body)+4)))
	copy(b, fileMagic)
	binary.LittleEndian.PutUint16(b[8:], version)
	binary.LittleEndian.PutUint16(b[10:], 0)
	binary.LittleEndian.PutUint32(b[12:], uint32(len(body)))
	b = append(b, body...)
	b = binary.LittleEndian.AppendUint32(b, crc(b))
	for len(b)%align != 0 {
		b = append(b, 0)
	}
	return b
}

// headerBodyLen reads the body length from the fixed part and checks the
// magic and version. fixed holds the file's first fileHeaderFixed bytes.
func headerBodyLen(fixed []byte) (int, string) {
	if string(fixed[:8]) != fileMagic {
		return 0, "the magic \"" + fileMagic + "\" (not a heapscope trace file)"
	}
	if v := binary.LittleEndian.Uint16(fixed[8:]); v != version {
		return 0, fmt.Sprintf("format version %d (the file has version %d)", version, v)
	}
	n := binary.LittleEndian.Uint32(fixed[12:])
	if n > maxHeaderBody {
		return 0, fmt.Sprintf("a header body of at most %d bytes (it claims %d)", maxHeaderBody, n)
	}
	return int(n), ""
}

// unmarshalHeader decodes a whole file header (fixed part, body and
// checksum). It returns the offset of the problem and what was expected
// there, if any.
func unmarshalHeader(b []byte, h *Header) (int, string) {
	n, bad := headerBodyLen(b)
	if bad != "" {
		return 0, bad
	}
	end := fileHeaderFixed + n
	if binary.LittleEndian.Uint32(b[end:]) != crc(b[:end]) {
		return end, "the header's checksum"
	}
	*h = Header{Version: version, TimeResolution: 1}
	body := b[fileHeaderFixed:end]
	for i := 0; i < len(body); {
		at := fileHeaderFixed + i
		tag, j := uvarint(body, i)
		l, j := uvarint(body, j)
		if j < 0 || l > uint64(len(body)-j) {
			return at, "a header field (tag, length, value)"
		}
		v := body[j : j+int(l)]
		i = j + int(l)
		num := func() (int64, bool) {
			x, k := varint(v, 0)
			return x, k == len(v)
		}
		var ok = true
		switch tag {
		case hSession:
			h.Session = string(v)
		case hProvider:
			h.Provider = string(v)
		case hProperty:
			k, kl := stringAt(v, 0)
			val, vl := stringAt(v, kl)
			ok = vl == len(v)
			h.Properties = append(h.Properties, Property{k, val})
		case hHostname:
			h.Hostname = string(v)
		case hKernel:
			h.Kernel = string(v)
		case hClock:
			h.Clock = string(v)
		case hWallStart:
			var x int64
			x, ok = num()
			h.WallStart = time.Unix(0, x)
		case hMonoStart:
			h.MonoStart, ok = num()
		case hMode:
			var x int64
			x, ok = num()
			ok = ok && x >= 0 && x < int64(RealTime)
			h.Mode = Mode(x)
		case hMaxSize:
			h.MaxSize, ok = num()
		case hPart:
			var x int64
			x, ok = num()
			ok = ok && x >= 0 && x <= 1<<31
			h.Part = int(x)
		case hTimeRes:
			var x int64
			x, ok = num()
			ok = ok && x >= 1 && x <= maxTimeResolution
			h.TimeResolution = time.Duration(x)
		case hSample:
			h.SampleRate, ok = num()
			ok = ok && h.SampleRate >= 0 && h.SampleRate <= maxSampleRate
		}
		if !ok {
			return at, fmt.Sprintf("a valid value for header field %d", tag)
		}
	}
	return 0, ""
}

// maxSampleRate bounds the header's sampling rate: one sample per TiB.
const maxSampleRate = event.MaxSample

// stringAt decodes a length-prefixed string at b[i:]. It returns the index
// after it, or -1.
func stringAt(b []byte, i int) (string, int) {
	l, i := uvarint(b, i)
	if i < 0 || l > uint64(len(b)-i) {
		return "", -1
	}
	return string(b[i : i+int(l)]), i + int(l)
}
