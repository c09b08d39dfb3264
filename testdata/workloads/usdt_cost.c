// usdt_cost: fires OpenTelemetry's otel_memory USDT probes a known number
// of times from a known depth, and times them, so that what a tracer
// attached to the probes costs per event can be measured
// (bench/usdtcost; issue 24's goal: 4.7 µs per sampled allocation with its
// stack unwound, 0.6 µs per free, nothing per unsampled call).
//
//   usdt_cost N DEPTH PAIRS
//
// It prints "ready" and reads a line from standard input (so that a tracer
// can attach), then, DEPTH noinline frames below main, N times:
// alloc(ptr, 64, 524288) for a distinct pointer, in batches of 1024, each
// batch followed by free(ptr) for each of its pointers; each probe fires
// only while its semaphore is raised, as the contract says. The alloc
// loops and the free loops are timed apart. Then PAIRS malloc(64)+free
// pairs that only read the semaphore, as a sampler's unsampled calls do.
// It prints, per event (the loops' wall time, and the thread's CPU time,
// which holds the kernel's uprobe handling and the BPF programs):
//   alloc_ns W alloc_cpu_ns C free_ns W free_cpu_ns C unsampled_ns W unsampled_cpu_ns C
//   semaphores ALLOC FREE
// then reads another line before it exits.
#define _SDT_HAS_SEMAPHORES 1
#include <sys/sdt.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

unsigned short otel_memory_alloc_semaphore __attribute__((unused)) __attribute__((section(".probes")));
unsigned short otel_memory_free_semaphore __attribute__((unused)) __attribute__((section(".probes")));

#define BATCH 1024

void *volatile sink;
static char arena[BATCH * 64]; // the pointers the probes name
static long n_events, n_pairs;
static uint64_t alloc_wall, alloc_cpu, free_wall, free_cpu, pairs_wall, pairs_cpu;

static uint64_t now(clockid_t c) {
	struct timespec ts;
	clock_gettime(c, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

__attribute__((noinline)) static void fire_alloc(void *p) {
	if (otel_memory_alloc_semaphore)
		STAP_PROBE3(otel_memory, alloc, p, 64, 524288);
	__asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) static void fire_free(void *p) {
	if (otel_memory_free_semaphore)
		STAP_PROBE1(otel_memory, free, p);
	__asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) static void unsampled(void) {
	void *p = malloc(64);
	sink = p;
	if (otel_memory_alloc_semaphore) // a sampler's check; it samples nothing here
		__asm__ volatile("" ::: "memory");
	free(p);
}

__attribute__((noinline)) static void loops(void) {
	for (long done = 0; done < n_events; done += BATCH) {
		long k = n_events - done < BATCH ? n_events - done : BATCH;
		uint64_t w0 = now(CLOCK_MONOTONIC), c0 = now(CLOCK_THREAD_CPUTIME_ID);
		for (long i = 0; i < k; i++)
			fire_alloc(arena + 64 * i);
		uint64_t w1 = now(CLOCK_MONOTONIC), c1 = now(CLOCK_THREAD_CPUTIME_ID);
		for (long i = 0; i < k; i++)
			fire_free(arena + 64 * i);
		uint64_t w2 = now(CLOCK_MONOTONIC), c2 = now(CLOCK_THREAD_CPUTIME_ID);
		alloc_wall += w1 - w0, alloc_cpu += c1 - c0;
		free_wall += w2 - w1, free_cpu += c2 - c1;
	}
	uint64_t w0 = now(CLOCK_MONOTONIC), c0 = now(CLOCK_THREAD_CPUTIME_ID);
	for (long i = 0; i < n_pairs; i++)
		unsampled();
	pairs_wall = now(CLOCK_MONOTONIC) - w0, pairs_cpu = now(CLOCK_THREAD_CPUTIME_ID) - c0;
}

// deep calls loops from depth more frames down.
__attribute__((noinline)) static void deep(int depth) {
	if (depth > 0)
		deep(depth - 1);
	else
		loops();
	__asm__ volatile("" ::: "memory"); // not a tail call
}

static void wait_line(void) {
	char line[64];
	if (!fgets(line, sizeof line, stdin))
		return;
}

int main(int argc, char **argv) {
	if (argc != 4) {
		fprintf(stderr, "usage: usdt_cost N DEPTH PAIRS\n");
		return 2;
	}
	n_events = atol(argv[1]);
	int depth = atoi(argv[2]);
	n_pairs = atol(argv[3]);
	if (n_events <= 0 || depth < 0 || n_pairs <= 0) {
		fprintf(stderr, "usdt_cost: N and PAIRS must be positive, DEPTH not negative\n");
		return 2;
	}
	printf("ready\n");
	fflush(stdout);
	wait_line();
	deep(depth);
	printf("alloc_ns %.1f alloc_cpu_ns %.1f free_ns %.1f free_cpu_ns %.1f unsampled_ns %.2f unsampled_cpu_ns %.2f\n",
	       (double)alloc_wall / n_events, (double)alloc_cpu / n_events, (double)free_wall / n_events,
	       (double)free_cpu / n_events, (double)pairs_wall / n_pairs, (double)pairs_cpu / n_pairs);
	printf("semaphores %u %u\n", otel_memory_alloc_semaphore, otel_memory_free_semaphore);
	fflush(stdout);
	wait_line();
	return 0;
}
