package heapscope

import (
	"os"
	"strconv"

	"github.com/heapscope/heapscope/event"
)

// MaxSample is the largest sampling size: one sample per TiB allocated.
const MaxSample Size = event.MaxSample

// sampleSeedEnv names the environment variable that seeds the sampling of
// a session's threads, so that a test can repeat a run's choices; unset or
// not a number, each thread seeds itself from its clock. The preload
// provider's only: the eBPF provider draws from the kernel's generator
// (bpf_get_prandom_u32), which takes no seed.
const sampleSeedEnv = "HEAPSCOPE_SAMPLE_SEED"

func sampleSeed() uint64 {
	n, err := strconv.ParseUint(os.Getenv(sampleSeedEnv), 0, 64)
	if err != nil {
		return 0
	}
	return n
}
