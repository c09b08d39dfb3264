package tracefile

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
)

// TestDamagedFrames damages, byte by byte at 24 places, a definitions
// section of several frames (5,000 stacks, a few hundred KiB): the frames
// whose checksum holds are recovered, whole and exactly as written, and
// only the damaged frame's stacks are lost, with their events. When the
// process's record is lost (it comes first), the process is kept by pid.
func TestDamagedFrames(t *testing.T) {
	path := tempPath(t, "frames.hst")
	g := newSynth(7, 100, 2, 5000)
	evs := writeSynthFrom(t, g, path, testHeader(Sequential, 0), Options{}, 20000, 0)
	orig, _ := readAll(t, path, Window{})
	byStack := map[uint32]int{}
	for _, e := range evs {
		byStack[uint32(e.Stack)]++
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	r, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	var first indexEntry
	r.forIndex(func(e indexEntry) error {
		if first.hdr.defsLen == 0 {
			first = e
		}
		return nil
	})
	r.Close()
	off, n := first.off+chunkHeaderSize, int64(first.hdr.defsLen)
	if first.hdr.defsRaw < 4*defFrameRaw {
		t.Fatalf("the first definitions section has %d bytes raw: want several frames", first.hdr.defsRaw)
	}
	for k := 0; k < 24; k++ {
		bad := slices.Clone(data)
		at := off + n*int64(k)/24 + int64(k)
		bad[at] ^= 0x5a
		p := tempPath(t, "bad.hst")
		if err := os.WriteFile(p, bad, 0o600); err != nil {
			t.Fatal(err)
		}
		got, warns := readAll(t, p, Window{}) // checks the Sink's order
		if !slices.ContainsFunc(warns, func(w string) bool { return strings.Contains(w, "definitions section is damaged") }) {
			t.Errorf("byte %d: no warning of the damage: %q", at, warns)
		}
		want := map[uint32]string{}
		for _, s := range orig.stacks {
			want[uint32(s.ID)] = fmtFrames(s.Frames)
		}
		kept := byStack[0] // events without a stack: frees
		for _, s := range got.stacks {
			if want[uint32(s.ID)] != fmtFrames(s.Frames) {
				t.Fatalf("byte %d: stack %d recovered differs from the one written", at, s.ID)
			}
			kept += byStack[uint32(s.ID)]
		}
		lost := len(orig.stacks) - len(got.stacks)
		// A frame holds 64 KiB of stacks of 8 to 40 frames: ~700 of them.
		if lost == 0 || lost > 1500 {
			t.Errorf("byte %d: %d of %d stacks and %d of %d modules recovered", at, len(got.stacks), len(orig.stacks), len(got.modules), len(orig.modules))
		}
		if len(got.events) != kept {
			t.Errorf("byte %d: %d events, want the %d of the stacks recovered", at, len(got.events), kept)
		}
		if k%6 == 0 {
			t.Logf("byte %d: %d of %d stacks, %d of %d events; %q", at, len(got.stacks), len(orig.stacks), len(got.events), len(orig.events), warns)
		}
	}
}

func fmtFrames(f []uint64) string { return fmt.Sprint(f) }
