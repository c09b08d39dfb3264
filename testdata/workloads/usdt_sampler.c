// usdt_sampler: a program that implements OpenTelemetry's otel_memory USDT
// contract (opentelemetry-ebpf-profiler design document 00003, "Memory
// Profiling") with an in-process Poisson sampler, and allocates from call
// sites whose totals and leaks are known exactly. It serves the tests of
// the .note.stapsdt parser, of tracing through the probes, and of
// heapscope's own --emit-usdt.
//
//   usdt_sampler [RATE [ROUNDS [wait]]]
//
// The contract: from one provider, otel_memory,
//   otel_memory:alloc(ptr, size, weight)  on a sampled allocation, where
//                                         weight = nsamples * RATE;
//   otel_memory:free(ptr)                 on the free of a sampled pointer
//                                         only.
// The sampler is the one the document assumes (jemalloc's and tcmalloc's):
// a per-thread count of bytes to the next sample, drawn from an exponential
// distribution of mean RATE (default 524288, 512 KiB); an allocation that
// takes the count to zero or below is sampled, nsamples being how many
// sampling points its bytes crossed (1 for most, more for an allocation of
// several RATEs). Each probe has a semaphore (_SDT_HAS_SEMAPHORES): while
// no tracer is attached to it the semaphore is 0 and the allocation path
// does nothing but read it, as the reference sampler does. Sampled pointers
// are kept in a small table (the document leaves the mechanism to the
// sampler), so that free fires only for them.
//
// Call sites (noinline, each its own frame), for ROUNDS (default 1):
//   leak_small:  2000 blocks of 64 bytes, never freed
//   leak_big:    8 blocks of 1 MiB, never freed
//   churn:       20000 malloc(512)+free pairs
//   grow:        malloc(100) realloc'd to 300000 and freed
// With "wait", the program prints "ready" and reads a line from standard
// input before it allocates (so that a tracer can attach), and again before
// it exits (so that its live heap can be looked at).
//
// At the end it prints, per site, the exact totals and what the sampler
// fired:
//   site NAME allocs N bytes B live_objects L live_bytes LB
//        samples S weight W live_samples LS live_weight LW
// and "sampler fired A allocs F frees", then "semaphores ALLOC FREE" with
// the semaphores' values read at the end.
#define _SDT_HAS_SEMAPHORES 1
#include <sys/sdt.h>

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

unsigned short otel_memory_alloc_semaphore __attribute__((unused)) __attribute__((section(".probes")));
unsigned short otel_memory_free_semaphore __attribute__((unused)) __attribute__((section(".probes")));

void *volatile sink; // keeps GCC from deleting the malloc/free pairs

static uint64_t rate = 524288;

enum { LEAK_SMALL, LEAK_BIG, CHURN, GROW, NSITES };
static const char *site_names[NSITES] = {"leak_small", "leak_big", "churn", "grow"};

struct site {
	uint64_t allocs, bytes, live_objects, live_bytes;
	uint64_t samples, weight, live_samples, live_weight;
};
static struct site sites[NSITES];
static uint64_t fired_allocs, fired_frees;

// The sampler's state: a per-thread count of bytes to the next sample and
// a per-thread generator (xorshift64*, seeded per thread).
static __thread int64_t to_next;
static __thread int sampler_ready;
static __thread uint64_t rng;

static double uniform(void) {
	rng ^= rng >> 12;
	rng ^= rng << 25;
	rng ^= rng >> 27;
	return ((rng * 2685821657736338717ULL) >> 11) * (1.0 / 9007199254740992.0);
}

// next_interval draws the bytes to the next sample: exponential, mean rate.
static int64_t next_interval(void) {
	double u = uniform();
	if (u <= 0)
		u = 1e-18;
	int64_t n = (int64_t)(-log(u) * (double)rate);
	return n > 0 ? n : 1;
}

// The sampled pointers and their weights and sites: an open-addressing
// table under a lock (sampled allocations are rare: one per RATE bytes).
#define TABLE 4096
static struct {
	uintptr_t ptr;
	uint64_t weight;
	int site;
} table[TABLE];
static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;

static unsigned slot(uintptr_t p) { return (unsigned)((p >> 4) * 0x9E3779B97F4A7C15ULL >> 52) & (TABLE - 1); }

static void remember(void *p, uint64_t weight, int site) {
	pthread_mutex_lock(&table_lock);
	unsigned i = slot((uintptr_t)p);
	while (table[i].ptr != 0)
		i = (i + 1) & (TABLE - 1);
	table[i].ptr = (uintptr_t)p;
	table[i].weight = weight;
	table[i].site = site;
	pthread_mutex_unlock(&table_lock);
}

// forget removes p from the table, returning whether it was sampled.
static int forget(void *p, uint64_t *weight, int *site) {
	int found = 0;
	pthread_mutex_lock(&table_lock);
	unsigned i = slot((uintptr_t)p);
	while (table[i].ptr != 0) {
		if (table[i].ptr == (uintptr_t)p) {
			*weight = table[i].weight;
			*site = table[i].site;
			found = 1;
			// Backward-shift deletion keeps the probe sequences whole.
			unsigned j = i;
			for (;;) {
				j = (j + 1) & (TABLE - 1);
				if (table[j].ptr == 0)
					break;
				unsigned h = slot(table[j].ptr);
				if ((j > i && (h <= i || h > j)) || (j < i && (h <= i && h > j))) {
					table[i] = table[j];
					i = j;
				}
			}
			table[i].ptr = 0;
			break;
		}
		i = (i + 1) & (TABLE - 1);
	}
	pthread_mutex_unlock(&table_lock);
	return found;
}

// sample is called on every allocation of size bytes that returned p.
static void sample(void *p, size_t size, int site) {
	struct site *s = &sites[site];
	s->allocs++;
	s->bytes += size;
	s->live_objects++;
	s->live_bytes += size;
	if (!otel_memory_alloc_semaphore)
		return; // no tracer: the fast path ends here
	if (!sampler_ready) {
		rng = 0x9E3779B97F4A7C15ULL ^ (uint64_t)(uintptr_t)&to_next;
		to_next = next_interval();
		sampler_ready = 1;
	}
	to_next -= (int64_t)size;
	if (to_next > 0)
		return;
	uint64_t nsamples = 0;
	while (to_next <= 0) {
		nsamples++;
		to_next += next_interval();
	}
	uint64_t weight = nsamples * rate;
	s->samples++;
	s->weight += weight;
	s->live_samples++;
	s->live_weight += weight;
	fired_allocs++;
	remember(p, weight, site);
	STAP_PROBE3(otel_memory, alloc, p, size, weight);
}

// unsample is called on every free of p, a block of size bytes of site.
static void unsample(void *p, size_t size, int site) {
	struct site *s = &sites[site];
	s->live_objects--;
	s->live_bytes -= size;
	uint64_t weight;
	int ssite;
	if (p == NULL || !forget(p, &weight, &ssite))
		return;
	sites[ssite].live_samples--;
	sites[ssite].live_weight -= weight;
	fired_frees++;
	if (otel_memory_free_semaphore)
		STAP_PROBE1(otel_memory, free, p);
}

static void *s_malloc(size_t n, int site) {
	void *p = malloc(n);
	if (p)
		sample(p, n, site);
	return p;
}

static void s_free(void *p, size_t n, int site) {
	unsample(p, n, site);
	free(p);
}

static void *s_realloc(void *p, size_t old, size_t n, int site) {
	unsample(p, old, site);
	void *q = realloc(p, n);
	if (q)
		sample(q, n, site);
	return q;
}

static void *small[2000];
static void *big[8];

__attribute__((noinline)) void leak_small(void) {
	for (int i = 0; i < 2000; i++) {
		small[i] = s_malloc(64, LEAK_SMALL);
		sink = small[i];
	}
}

__attribute__((noinline)) void leak_big(void) {
	for (int i = 0; i < 8; i++) {
		big[i] = s_malloc(1 << 20, LEAK_BIG);
		memset(big[i], i, 1 << 20);
		sink = big[i];
	}
}

__attribute__((noinline)) void churn(void) {
	for (int i = 0; i < 20000; i++) {
		void *p = s_malloc(512, CHURN);
		sink = p;
		s_free(p, 512, CHURN);
	}
}

__attribute__((noinline)) void grow(void) {
	void *p = s_malloc(100, GROW);
	sink = p;
	p = s_realloc(p, 100, 300000, GROW);
	sink = p;
	s_free(p, 300000, GROW);
}

static void wait_line(void) {
	char line[64];
	if (!fgets(line, sizeof line, stdin))
		return;
}

int main(int argc, char **argv) {
	if (argc > 1)
		rate = strtoull(argv[1], NULL, 10);
	if (rate == 0)
		rate = 1;
	int rounds = argc > 2 ? atoi(argv[2]) : 1;
	int wait = argc > 3 && strcmp(argv[3], "wait") == 0;
	if (wait) {
		printf("ready\n");
		fflush(stdout);
		wait_line();
	}
	for (int r = 0; r < rounds; r++) {
		if (r == 0) {
			leak_small();
			leak_big();
		}
		churn();
		grow();
	}
	for (int i = 0; i < NSITES; i++) {
		struct site *s = &sites[i];
		printf("site %s allocs %llu bytes %llu live_objects %llu live_bytes %llu samples %llu weight %llu "
		       "live_samples %llu live_weight %llu\n",
		       site_names[i], (unsigned long long)s->allocs, (unsigned long long)s->bytes,
		       (unsigned long long)s->live_objects, (unsigned long long)s->live_bytes,
		       (unsigned long long)s->samples, (unsigned long long)s->weight,
		       (unsigned long long)s->live_samples, (unsigned long long)s->live_weight);
	}
	printf("sampler fired %llu allocs %llu frees\n", (unsigned long long)fired_allocs,
	       (unsigned long long)fired_frees);
	printf("semaphores %u %u\n", otel_memory_alloc_semaphore, otel_memory_free_semaphore);
	fflush(stdout);
	if (wait)
		wait_line();
	return 0;
}
