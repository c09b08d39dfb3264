package tracefile

import (
	"encoding/binary"
	"hash/crc32"
	"time"
)

// The layout constants of format version 1. FORMAT.md is the specification;
// keep the two in step.
const (
	version = 1

	fileMagic    = "HEAPSCOP"
	chunkMagic   = "HSCK"
	indexMagic   = "HSIX"
	trailerMagic = "HSTR"

	fileHeaderFixed = 16 // magic, version, flags, body length
	chunkHeaderSize = 64
	trailerSize     = 32
	indexEntrySize  = 8 + chunkHeaderSize
	indexFixed      = 4 + 4 + 4 // magic, count, ..., checksum

	// maxHeaderBody bounds the file header's body.
	maxHeaderBody = 1 << 20
	// maxSectionRaw bounds the uncompressed size of one chunk section. It
	// bounds every buffer the reader allocates for a chunk.
	maxSectionRaw = 64 << 20
	// maxSnapshotEntries bounds the live blocks (and, separately, the stack
	// totals) of one snapshot, which a reader must hold whole.
	maxSnapshotEntries = 1 << 24
	// maxFrames bounds the frames of one stack.
	maxFrames = 1 << 16
	// maxDefRecord bounds one definition record (a process's command line,
	// a module's path, ...).
	maxDefRecord = 1 << 20

	// maxTimeResolution bounds Options.TimeResolution.
	maxTimeResolution = int64(time.Second)

	align = 8
)

// Chunk flags.
const (
	flagFull  = 1 << 0 // the definitions section holds every definition the writer knows
	flagStop  = 1 << 1 // sequential mode: the file reached its maximum size; later events were not written
	flagFinal = 1 << 2 // written by Close
	flagRoll  = 1 << 3 // newfile mode: the last chunk of a file; the trace continues in the next file
	flagError = 1 << 4 // the writer stopped at a write error (a full disk); later events were not written
)

// Definition record tags (the definitions section).
const (
	defProcess = 1
	defModule  = 2
	defStack   = 3
	defStats   = 4
	defExit    = 5 // only in full chunks: a process that exited before the chunk
	defWarning = 6
)

// Timeline ops (one byte per record). Events with a kind of 1..7 and a func
// below 32 are encoded as kind<<5 | func; the ops below 0x20 are the rest.
const (
	opEventExt = 0x01 // an event with explicit kind, func and old address and size
	opExit     = 0x02
	opSnapshot = 0x03
	opNote     = 0x04 // a memory sample, or a part of a verdict or census (see note.go)
)

// The timeline streams, in the order they are stored.
const (
	sOps = iota
	sTimes
	sTimeRuns
	sThreads
	sThreadDefs
	sHeaps
	sStacks
	sSizes
	sNewAddrs
	sOldAddrs
	sOldSizes
	sExt
	sMisc
	numStreams
)

var streamNames = [numStreams]string{"ops", "times", "time runs", "threads", "thread table", "heaps", "stacks", "sizes", "new addresses", "old addresses", "old sizes", "extended", "misc"}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func crc(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

func crc32Update(sum uint32, b []byte) uint32 { return crc32.Update(sum, castagnoli, b) }

func alignUp(n int64) int64 { return (n + align - 1) &^ (align - 1) }

// chunkHeader is the fixed header in front of every chunk (and repeated in
// the index).
type chunkHeader struct {
	flags    uint8
	seq      uint64
	minTime  int64 // over the timeline's records; 0 when there is none
	maxTime  int64
	defsLen  uint32 // compressed
	defsRaw  uint32
	tlLen    uint32
	tlRaw    uint32
	events   uint32 // events in the timeline
	defsCRC  uint32 // over the compressed definitions section
	tlCRC    uint32 // over the compressed timeline section
	checksum uint32 // over the header's first 60 bytes
}

func (h *chunkHeader) payloadLen() int64 { return int64(h.defsLen) + int64(h.tlLen) }

// size is the chunk's length in the file, header and padding included.
func (h *chunkHeader) size() int64 { return chunkHeaderSize + alignUp(h.payloadLen()) }

func (h *chunkHeader) marshal(b []byte) {
	_ = b[chunkHeaderSize-1]
	copy(b, chunkMagic)
	b[4] = h.flags
	b[5], b[6], b[7] = 0, 0, 0
	le := binary.LittleEndian
	le.PutUint64(b[8:], h.seq)
	le.PutUint64(b[16:], uint64(h.minTime))
	le.PutUint64(b[24:], uint64(h.maxTime))
	le.PutUint32(b[32:], h.defsLen)
	le.PutUint32(b[36:], h.defsRaw)
	le.PutUint32(b[40:], h.tlLen)
	le.PutUint32(b[44:], h.tlRaw)
	le.PutUint32(b[48:], h.events)
	le.PutUint32(b[52:], h.defsCRC)
	le.PutUint32(b[56:], h.tlCRC)
	h.checksum = crc(b[:60])
	le.PutUint32(b[60:], h.checksum)
}

// unmarshal decodes b into h and reports what is wrong with it, or "".
func (h *chunkHeader) unmarshal(b []byte) string {
	if len(b) < chunkHeaderSize {
		return "a chunk header"
	}
	if string(b[:4]) != chunkMagic {
		return "a chunk header (magic " + chunkMagic + ")"
	}
	le := binary.LittleEndian
	h.checksum = le.Uint32(b[60:])
	if crc(b[:60]) != h.checksum {
		return "a chunk header with a valid checksum"
	}
	h.flags = b[4]
	h.seq = le.Uint64(b[8:])
	h.minTime = int64(le.Uint64(b[16:]))
	h.maxTime = int64(le.Uint64(b[24:]))
	h.defsLen = le.Uint32(b[32:])
	h.defsRaw = le.Uint32(b[36:])
	h.tlLen = le.Uint32(b[40:])
	h.tlRaw = le.Uint32(b[44:])
	h.events = le.Uint32(b[48:])
	h.defsCRC = le.Uint32(b[52:])
	h.tlCRC = le.Uint32(b[56:])
	switch {
	case h.defsRaw > maxSectionRaw || h.tlRaw > maxSectionRaw:
		return "section sizes within the format's limit"
	case (h.defsLen == 0) != (h.defsRaw == 0) || (h.tlLen == 0) != (h.tlRaw == 0):
		return "consistent section sizes"
	case h.tlRaw == 0 && h.events != 0:
		return "no events without a timeline"
	case h.flags&^(flagFull|flagStop|flagFinal|flagRoll|flagError) != 0:
		return "known chunk flags"
	case h.minTime > h.maxTime:
		return "a time range with min <= max"
	}
	return ""
}

// hasTimeline reports whether the chunk holds timeline records.
func (h *chunkHeader) hasTimeline() bool { return h.tlLen > 0 }

// Varints. The decoders return a negative index on malformed or short
// input; callers check it once per record.

func appendUvarint(b []byte, v uint64) []byte {
	for v >= 0x80 {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}

func appendVarint(b []byte, v int64) []byte { return appendUvarint(b, zigzag(v)) }

func zigzag(v int64) uint64   { return uint64(v<<1) ^ uint64(v>>63) }
func unzigzag(u uint64) int64 { return int64(u>>1) ^ -int64(u&1) }

func appendString(b []byte, s string) []byte {
	b = appendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// uvarint decodes the varint at b[i:]. It returns the value and the index
// after it, or -1 when i is already negative or the varint is malformed or
// cut short.
func uvarint(b []byte, i int) (uint64, int) {
	if uint(i) < uint(len(b)) && b[i] < 0x80 {
		return uint64(b[i]), i + 1
	}
	return uvarintSlow(b, i)
}

// uvarintSlow is kept out of line so that uvarint inlines.
//
//go:noinline
func uvarintSlow(b []byte, i int) (uint64, int) {
	if i < 0 {
		return 0, -1
	}
	if i+1 < len(b) && b[i+1] < 0x80 {
		return uint64(b[i]&0x7f) | uint64(b[i+1])<<7, i + 2
	}
	var v uint64
	for s := uint(0); s < 64; s += 7 {
		if i >= len(b) {
			return 0, -1
		}
		c := b[i]
		i++
		if c < 0x80 {
			if s == 63 && c > 1 {
				return 0, -1
			}
			return v | uint64(c)<<s, i
		}
		v |= uint64(c&0x7f) << s
	}
	return 0, -1
}

func varint(b []byte, i int) (int64, int) {
	u, i := uvarint(b, i)
	return unzigzag(u), i
}

// grow rounds a buffer size up, so that a buffer sized for the largest
// chunk so far is not made again for each slightly larger one.
func grow(n uint64) uint64 { return (n + n/4 + 64<<10) &^ (64<<10 - 1) }
