package heapscope

import (
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"

	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/internal/errs"
)

// MaxSample is the largest sampling size: one sample per TiB allocated.
const MaxSample = 1 << 40

// validateSample checks Properties.Sample and what it excludes: every
// option whose answer needs every event.
func (p Properties) validateSample() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("Sample: "+format+": %w", append(args, errs.ErrInvalidFlags)...)
	}
	switch {
	case p.Sample == 0:
		return nil
	case p.Sample < 0:
		return bad("negative size %d", p.Sample)
	case p.Sample > MaxSample:
		return bad("%d bytes: at most %d (1 TiB)", p.Sample, int64(MaxSample))
	case p.EnableFlags&event.FamilyMmap != 0:
		// A mapping is recorded with its munmap; a sampled munmap would need
		// the mappings kept in the process, which the interposer does not.
		return bad("EnableFlags mmap: mmap and munmap are not sampled; trace them without sampling")
	}
	return nil
}

// ParseSize parses a size in bytes: a number with an optional unit, B, KiB,
// MiB, GiB (powers of 1024; K, M, G and KB, MB, GB mean the same), e.g.
// "65536", "512KiB", "1MiB". It is what --sample takes.
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	i := 0
	for i < len(t) && (t[i] >= '0' && t[i] <= '9' || t[i] == '.' || t[i] == '-' || t[i] == '+') {
		i++
	}
	num, unit := t[:i], strings.ToLower(strings.TrimSpace(t[i:]))
	if num == "" {
		return 0, fmt.Errorf("size %q: not a size (want e.g. 65536, 512KiB, 1MiB): %w", s, errs.ErrInvalidFlags)
	}
	var mult float64
	switch unit {
	case "", "b":
		mult = 1
	case "k", "kb", "kib":
		mult = 1 << 10
	case "m", "mb", "mib":
		mult = 1 << 20
	case "g", "gb", "gib":
		mult = 1 << 30
	case "t", "tb", "tib":
		mult = 1 << 40
	default:
		return 0, fmt.Errorf("size %q: unknown unit %q (want B, KiB, MiB, GiB or TiB): %w", s, unit, errs.ErrInvalidFlags)
	}
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, fmt.Errorf("size %q: not a size (want e.g. 65536, 512KiB, 1MiB): %w", s, errs.ErrInvalidFlags)
	}
	b := v * mult
	if b < 0 {
		return 0, fmt.Errorf("size %q: negative: %w", s, errs.ErrInvalidFlags)
	}
	if b != math.Trunc(b) || b > math.MaxInt64/2 {
		return 0, fmt.Errorf("size %q: not a whole number of bytes below 2^62: %w", s, errs.ErrInvalidFlags)
	}
	return int64(b), nil
}

// SampleSeedEnv names the environment variable that seeds the sampling of
// a session's threads, so that a test can repeat a run's choices; unset or
// not a number, each thread seeds itself from its clock. The preload
// provider's only: the eBPF provider draws from the kernel's generator
// (bpf_get_prandom_u32), which takes no seed.
const SampleSeedEnv = "HEAPSCOPE_SAMPLE_SEED"

func sampleSeed() uint64 {
	n, err := strconv.ParseUint(os.Getenv(SampleSeedEnv), 0, 64)
	if err != nil {
		return 0
	}
	return n
}
