package tracefile

import (
	"testing"
)

// TestHeaderSampleRate: the sampling rate survives a file; a header without
// it (every trace written before sampling) reads as 0, exact; a negative or
// absurd rate is an error, not a panic or a silent value.
func TestHeaderSampleRate(t *testing.T) {
	for _, rate := range []int64{0, 1, 64 << 10, maxSampleRate} {
		h := testHeader(Sequential, 0)
		h.SampleRate = rate
		path := tempPath(t, "s.hst")
		w, err := Create(path, h, Options{})
		if err != nil {
			t.Fatal(err)
		}
		check(t, w.Close())
		r, err := Open(path)
		if err != nil {
			t.Fatal(err)
		}
		if got := r.Header().SampleRate; got != rate {
			t.Errorf("SampleRate %d read back as %d", rate, got)
		}
		r.Close()
	}
	h := testHeader(Sequential, 0)
	h.SampleRate, h.TimeResolution = 0, 1
	b := marshalHeader(&h)
	var got Header
	if at, bad := unmarshalHeader(b, &got); bad != "" || got.SampleRate != 0 {
		t.Fatalf("exact header: %d %q, rate %d", at, bad, got.SampleRate)
	}
	for _, rate := range []int64{-1, maxSampleRate + 1} {
		h.SampleRate = rate
		b := marshalHeader(&h)
		if _, bad := unmarshalHeader(b, &got); bad == "" {
			t.Errorf("rate %d: accepted", rate)
		}
	}
}
