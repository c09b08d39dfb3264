package heapscope

import (
	"fmt"
	"os"
	"strconv"

	"github.com/heapscope/heapscope/event"
	"github.com/heapscope/heapscope/internal/errs"
)

// MaxSample is the largest sampling size: one sample per TiB allocated.
const MaxSample Size = 1 << 40

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
		return bad("%d bytes: at most %d (1 TiB)", p.Sample, MaxSample)
	case p.Families&event.FamilyMmap != 0:
		// A mapping is recorded with its munmap; a sampled munmap would need
		// the mappings kept in the process, which the interposer does not.
		return bad("Families mmap: mmap and munmap are not sampled; trace them without sampling")
	}
	return nil
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
