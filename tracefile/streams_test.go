package tracefile

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/klauspost/compress/zstd"
)

// TestLiteralsFrame checks that frames of literals only read back with a
// zstd decoder: every block size and literals header width, and the raw and
// RLE blocks.
func TestLiteralsFrame(t *testing.T) {
	dec, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxWindow(maxSectionRaw))
	check(t, err)
	defer dec.Close()
	rng := rand.New(rand.NewPCG(1, 2))
	skewed := func(n int) []byte { // a few symbols, unevenly: Huffman-coded
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.ExpFloat64() * 3)
		}
		return b
	}
	random := func(n int) []byte { // incompressible: raw blocks
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		return b
	}
	var s streamCoder
	for _, n := range []int{0, 1, 16, 17, 100, 1023, 1024, 1025, 5000, 16383, 16384, 70000, 262143, 262144,
		maxBlock - 1, maxBlock, maxBlock + 1, 3*maxBlock + 17, 1 << 20} {
		for name, src := range map[string][]byte{"skewed": skewed(n), "random": random(n), "same": bytes.Repeat([]byte{7}, n)} {
			frame := appendLiteralsFrame([]byte("prefix"), src, &s.huff)
			if string(frame[:6]) != "prefix" {
				t.Fatalf("%s %d: the frame did not append", name, n)
			}
			got, err := dec.DecodeAll(frame[6:], nil)
			if err != nil || !bytes.Equal(got, src) {
				t.Fatalf("%s %d bytes: decoded %d bytes, %v", name, n, len(got), err)
			}
			if name == "skewed" && n >= 1024 && len(frame)-6 > n/2 {
				t.Errorf("skewed %d bytes: frame of %d bytes, want Huffman coding to halve it", n, len(frame)-6)
			}
		}
	}
}

// TestStreamCoderChooses checks that a stream that repeats is coded with
// zstd's matches and one that does not with literals only, and that the
// choice follows the stream when it changes.
func TestStreamCoderChooses(t *testing.T) {
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1))
	check(t, err)
	defer enc.Close()
	dec, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1))
	check(t, err)
	defer dec.Close()
	rng := rand.New(rand.NewPCG(3, 4))
	noisy := make([]byte, 200000)
	for i := range noisy {
		noisy[i] = byte(rng.ExpFloat64() * 8)
	}
	loop := bytes.Repeat([]byte("a loop's ops repeat exactly"), 8000)
	c := newStreamCoder(enc)
	code := func(src []byte) {
		t.Helper()
		frame := c.appendStream(nil, sOps, src)
		got, err := dec.DecodeAll(frame, nil)
		if err != nil || !bytes.Equal(got, src) {
			t.Fatalf("decoded %d bytes of %d: %v", len(got), len(src), err)
		}
	}
	code(noisy)
	if c.lz[sOps] {
		t.Error("a stream that does not repeat is coded with matches")
	}
	code(loop)
	if !c.lz[sOps] {
		t.Error("a stream that repeats is coded as literals")
	}
	for i := 0; i < trialEvery; i++ {
		code(noisy)
	}
	if c.lz[sOps] {
		t.Errorf("after %d sections that do not repeat, still coded with matches", trialEvery)
	}
}
