package tracefile

import (
	"encoding/binary"

	"github.com/klauspost/compress/huff0"
	"github.com/klauspost/compress/zstd"
)

// A streamCoder compresses the streams of timeline sections, each into a
// zstd frame, by one of two means:
//
//   - zstd proper (matches, then entropy coding): what repeats, like the
//     ops and stacks of a loop, shrinks to almost nothing;
//   - literals only: Huffman coding without a match search, which costs a
//     third as much to write and to read, and is as small or smaller for a
//     stream that does not repeat (sizes, fresh addresses, jittery times).
//
// Which wins depends on the program and its phase, so each stream keeps a
// choice, and checks it: a stream coded as literals tries zstd proper on
// its first sampleLen bytes every time, and switches if matches save a
// tenth there; a stream coded with zstd proper is also coded as literals
// every trialEvery-th time, and switches if matches did not save a tenth.
type streamCoder struct {
	enc   *zstd.Encoder
	huff  huff0.Scratch
	lz    [numStreams]bool  // zstd proper
	trial [numStreams]uint8 // zstd proper: sections until the next trial of literals
	tmp   []byte
}

const (
	trialEvery = 8
	sampleLen  = 16 << 10
	// minTrial is the stream size below which zstd proper is used
	// without a trial.
	minTrial = 4 << 10
)

func newStreamCoder(enc *zstd.Encoder) *streamCoder {
	c := &streamCoder{enc: enc}
	c.huff.Reuse = huff0.ReusePolicyNone
	return c
}

// saves reports whether matches save a tenth: lz bytes against lit bytes
// of literals only.
func saves(lz, lit int) bool { return lz < lit-lit/10 }

// appendStream appends the frame of stream k, src, to dst.
func (c *streamCoder) appendStream(dst []byte, k int, src []byte) []byte {
	if len(src) < minTrial {
		return c.enc.EncodeAll(src, dst)
	}
	n := len(dst)
	if !c.lz[k] {
		if sample := src[:min(len(src), sampleLen)]; len(src) > sampleLen {
			c.tmp = appendLiteralsFrame(c.tmp[:0], sample, &c.huff)
			lit := len(c.tmp)
			c.tmp = c.enc.EncodeAll(sample, c.tmp[:0])
			if saves(len(c.tmp), lit) {
				c.lz[k], c.trial[k] = true, trialEvery
				return c.enc.EncodeAll(src, dst)
			}
			return appendLiteralsFrame(dst, src, &c.huff)
		}
		dst = appendLiteralsFrame(dst, src, &c.huff)
		c.tmp = c.enc.EncodeAll(src, c.tmp[:0])
		if saves(len(c.tmp), len(dst)-n) {
			c.lz[k], c.trial[k] = true, trialEvery
			dst = append(dst[:n], c.tmp...)
		}
		return dst
	}
	dst = c.enc.EncodeAll(src, dst)
	if c.trial[k]--; c.trial[k] > 0 {
		return dst
	}
	c.trial[k] = trialEvery
	c.tmp = appendLiteralsFrame(c.tmp[:0], src, &c.huff)
	if !saves(len(dst)-n, len(c.tmp)) {
		c.lz[k] = false
		dst = append(dst[:n], c.tmp...)
	}
	return dst
}

// maxBlock is zstd's largest block.
const maxBlock = 128 << 10

// appendLiteralsFrame appends to dst a zstd frame (RFC 8878) of src whose
// blocks hold only literals: Huffman-coded, or raw or RLE where that is
// smaller. Any zstd decoder reads it.
func appendLiteralsFrame(dst, src []byte, s *huff0.Scratch) []byte {
	// Frame header: magic, then a descriptor for a single segment (no
	// window descriptor: the window is the content) and the content size.
	dst = append(dst, 0x28, 0xb5, 0x2f, 0xfd)
	n := uint64(len(src))
	switch {
	case n < 256:
		dst = append(dst, 1<<5, byte(n))
	case n < 65536+256:
		dst = append(dst, 1<<5|1<<6)
		dst = binary.LittleEndian.AppendUint16(dst, uint16(n-256))
	case n < 1<<32:
		dst = append(dst, 1<<5|2<<6)
		dst = binary.LittleEndian.AppendUint32(dst, uint32(n))
	default:
		dst = append(dst, 1<<5|3<<6)
		dst = binary.LittleEndian.AppendUint64(dst, n)
	}
	if len(src) == 0 {
		return appendBlockHeader(dst, true, blockRaw, 0)
	}
	for len(src) > 0 {
		b := src[:min(len(src), maxBlock)]
		src = src[len(b):]
		dst = appendLiteralsBlock(dst, b, len(src) == 0, s)
	}
	return dst
}

// Block types.
const (
	blockRaw        = 0
	blockRLE        = 1
	blockCompressed = 2
)

func appendBlockHeader(dst []byte, last bool, typ, size uint32) []byte {
	h := typ<<1 | size<<3
	if last {
		h |= 1
	}
	return append(dst, byte(h), byte(h>>8), byte(h>>16))
}

// appendLiteralsBlock appends a block of literals only: a compressed block
// holding a Huffman-coded literals section and no sequences.
func appendLiteralsBlock(dst, lits []byte, last bool, s *huff0.Scratch) []byte {
	var out []byte
	var err error
	single := len(lits) < 1024
	switch {
	case len(lits) <= 16:
		err = huff0.ErrIncompressible
	case single:
		out, _, err = huff0.Compress1X(lits, s)
	default:
		out, _, err = huff0.Compress4X(lits, s)
	}
	if err == huff0.ErrUseRLE {
		dst = appendBlockHeader(dst, last, blockRLE, uint32(len(lits)))
		return append(dst, lits[0])
	}
	// The literals section header: type 2 (compressed, with its Huffman
	// table), the size format (one stream or four, and the width of the
	// two sizes), the regenerated size and the compressed size.
	var lh []byte
	if err == nil {
		cl, rl := uint64(len(out)), uint64(len(lits))
		switch {
		case cl < 1<<10 && rl < 1<<10:
			f := uint64(1)
			if single {
				f = 0
			}
			h := 2 | f<<2 | rl<<4 | cl<<14
			lh = []byte{byte(h), byte(h >> 8), byte(h >> 16)}
		case cl < 1<<14 && rl < 1<<14 && !single:
			h := 2 | 2<<2 | rl<<4 | cl<<18
			lh = []byte{byte(h), byte(h >> 8), byte(h >> 16), byte(h >> 24)}
		case cl < 1<<18 && rl < 1<<18 && !single:
			h := 2 | 3<<2 | rl<<4 | cl<<22
			lh = []byte{byte(h), byte(h >> 8), byte(h >> 16), byte(h >> 24), byte(h >> 32)}
		default:
			err = huff0.ErrIncompressible
		}
	}
	if err != nil || len(lh)+len(out)+1 >= len(lits) {
		dst = appendBlockHeader(dst, last, blockRaw, uint32(len(lits)))
		return append(dst, lits...)
	}
	dst = appendBlockHeader(dst, last, blockCompressed, uint32(len(lh)+len(out)+1))
	dst = append(dst, lh...)
	dst = append(dst, out...)
	return append(dst, 0) // no sequences
}
