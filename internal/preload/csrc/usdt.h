/*
 * usdt.h: OpenTelemetry's otel_memory USDT probes (run --sample --emit-usdt),
 * so that a profiler that reads them (the OpenTelemetry eBPF profiler's
 * memory profiling, design document 00003) sees the blocks this interposer
 * samples in a process heapscope traces (included once, by
 * heapscope_preload.c, before sample.h, whose hooks call it).
 *
 * The contract, from one provider, otel_memory:
 *   otel_memory:alloc(ptr, size, weight)  on each sampled allocation;
 *   otel_memory:free(ptr)                 on the free of a sampled pointer only.
 * Each has a semaphore (<sys/sdt.h>'s _SDT_HAS_SEMAPHORES, in .probes): the
 * kernel raises it while a uprobe with that reference counter is attached,
 * and a probe fires only then, and only when the session asked
 * (HS_CTL_EMIT_USDT). Both are read on the sampled paths alone, never on an
 * allocation that is not sampled.
 *
 * weight is what the sample stands for, in bytes. The sampler here is per
 * allocation (an allocation of S bytes is sampled with probability
 * p = 1 - e^(-S/R)), not the byte counter the document assumes (whose
 * weight is the number of sampling points crossed times R): its unbiased
 * weight is S/p, rounded, the bytes analyze.SampleWeights gives. Either is
 * unbiased, which is all the contract asks of weight.
 *
 * A realloc of a sampled block fires its free before the block can be
 * released (and handed to another thread, whose alloc would come first),
 * and the result's alloc when the result is sampled. A realloc that fails
 * leaves the block live, and in heapscope's sample, but the profiler has
 * seen its free: it misses the block until its free (which then names a
 * pointer it does not know, and ignores). Failed reallocs are rare (out of
 * memory).
 *
 * The probes are sites of their own (functions not inlined): a profiler
 * attaches one uprobe per probe.
 */
#ifndef HEAPSCOPE_USDT_H
#define HEAPSCOPE_USDT_H

#define _SDT_HAS_SEMAPHORES 1
#include <sys/sdt.h>

/* Named as <sys/sdt.h> names them: PROVIDER_NAME_semaphore. */
unsigned short otel_memory_alloc_semaphore __attribute__((unused)) __attribute__((section(".probes")));
unsigned short otel_memory_free_semaphore __attribute__((unused)) __attribute__((section(".probes")));

static uint32_t g_usdt_on; /* the session asked for the probes */

/* Reads the session's choice, with the rest of the sampling configuration. */
static void usdt_configure(const uint8_t *ctl)
{
	__atomic_store_n(&g_usdt_on, *(const uint32_t *)(ctl + HS_CTL_EMIT_USDT) != 0, __ATOMIC_RELAXED);
}

/* 1 - e^(-x) for x >= 0, without libm: the series below 1/2 (no
 * cancellation), else e^(-x) = 2^(-k) e^(-f) with x = k ln 2 + f; relative
 * error below 1e-15. */
static double usdt_p(double x)
{
	if (x < 0.5) {
		double s = 0, t = x;
		for (int i = 1; i <= 18; i++) {
			s += t;
			t *= -x / (i + 1);
		}
		return s;
	}
	if (x > 700)
		return 1;
	int k = (int)(x / 0.6931471805599453);
	double f = x - k * 0.6931471805599453, e = 1, t = 1;
	for (int i = 1; i <= 18; i++) {
		t *= -f / i;
		e += t;
	}
	union {
		double d;
		uint64_t i;
	} b = {.i = (uint64_t)(1023 - k) << 52};
	return 1 - e * b.d;
}

/* The unbiased weight of a sampled allocation of n bytes at rate r. */
static uint64_t usdt_weight(uint64_t n, uint64_t r)
{
	double w = (double)n / usdt_p((double)n / (double)r) + 0.5;
	return w >= 0x1p63 ? (uint64_t)1 << 63 : (uint64_t)w;
}

static HS_NOINLINE void usdt_fire_alloc(void *p, uint64_t n, uint64_t r)
{
	uint64_t w = usdt_weight(n, r);
	STAP_PROBE3(otel_memory, alloc, p, n, w);
}

static HS_NOINLINE void usdt_fire_free(void *p)
{
	STAP_PROBE1(otel_memory, free, p);
}

/* A sampled allocation of n bytes at p, at rate r. */
static HS_INLINE void usdt_alloc(void *p, uint64_t n, uint64_t r)
{
	if (HS_UNLIKELY(__atomic_load_n(&otel_memory_alloc_semaphore, __ATOMIC_RELAXED) != 0) && g_usdt_on)
		usdt_fire_alloc(p, n, r);
}

/* The free of p, if was (p was sampled): returns was. */
static HS_INLINE int usdt_freed(void *p, int was)
{
	if (was && HS_UNLIKELY(__atomic_load_n(&otel_memory_free_semaphore, __ATOMIC_RELAXED) != 0) && g_usdt_on)
		usdt_fire_free(p);
	return was;
}

#endif
