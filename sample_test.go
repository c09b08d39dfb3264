package heapscope

import (
	"errors"
	"testing"

	"github.com/heapscope/heapscope/event"
)

func TestParseSize(t *testing.T) {
	for in, want := range map[string]Size{
		"0": 0, "65536": 65536, "512KiB": 512 << 10, "512k": 512 << 10, "1MiB": 1 << 20, "1 MB": 1 << 20,
		"1.5MiB": 3 << 19, "2GiB": 2 << 30, "64B": 64,
	} {
		if got, err := ParseSize(in); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "-1", "-64KiB", "lots", "1.5", "64XB", "KiB", "1e400", "NaN"} {
		if got, err := ParseSize(in); !errors.Is(err, ErrInvalidFlags) {
			t.Errorf("ParseSize(%q) = %d, %v; want ErrInvalidFlags", in, got, err)
		}
	}
}

// TestValidateSample: sampling is refused with what needs every event.
func TestValidateSample(t *testing.T) {
	for _, ok := range []Properties{
		{File: "t.hst", Provider: ProviderPreload, Sample: 512 << 10},
		{File: "t.hst", Provider: ProviderEBPF, Sample: 4096},                  // sampled in BPF
		{File: "t.hst", Provider: ProviderEBPF, Mode: Aggregate, Sample: 4096}, // weighed in BPF
	} {
		if err := ok.Validate(); err != nil {
			t.Errorf("%+v: %v", ok, err)
		}
	}
	for _, p := range []Properties{
		{File: "t.hst", Provider: ProviderPreload, Sample: -1},
		{File: "t.hst", Provider: ProviderPreload, Sample: MaxSample + 1},
		{File: "t.hst", Provider: ProviderEBPF, Sample: 4096, Families: event.FamilyAll},
		{File: "t.hst", Provider: ProviderPreload, Sample: 4096, Families: event.FamilyAll},
		{File: "t.hst", Provider: ProviderEBPF, Mode: Aggregate, Sample: -4096},
		{File: "t.hst", Provider: ProviderPreload, Mode: Aggregate, Sample: 4096},
		{File: "t.hst", Provider: ProviderEBPF, Mode: Aggregate, Sample: 4096, Families: event.FamilyAll},
	} {
		if err := p.Validate(); !errors.Is(err, ErrInvalidFlags) {
			t.Errorf("%+v: %v; want ErrInvalidFlags", p, err)
		}
	}
}
