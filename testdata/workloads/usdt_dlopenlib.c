// usdt_dlopenlib: a shared library with OpenTelemetry's otel_memory USDT
// probes of its own, loaded by usdt_dlopen after a tracer attached: what
// the tracer reads through them must be found in a library mapped later.
// lib_work allocates 10 blocks of 100 bytes, fires alloc(ptr, 100, 1000)
// for each while the probes' semaphore is raised, then frees the first 4,
// firing free(ptr) for them.
#define _SDT_HAS_SEMAPHORES 1
#include <sys/sdt.h>

#include <stdlib.h>

unsigned short otel_memory_alloc_semaphore __attribute__((unused)) __attribute__((section(".probes")));
unsigned short otel_memory_free_semaphore __attribute__((unused)) __attribute__((section(".probes")));

static void *blocks[10];

unsigned lib_semaphores(void) { return otel_memory_alloc_semaphore && otel_memory_free_semaphore; }

__attribute__((noinline)) void lib_work(void) {
	for (int i = 0; i < 10; i++) {
		blocks[i] = malloc(100);
		if (otel_memory_alloc_semaphore)
			STAP_PROBE3(otel_memory, alloc, blocks[i], 100, 1000);
	}
	for (int i = 0; i < 4; i++) {
		if (otel_memory_free_semaphore)
			STAP_PROBE1(otel_memory, free, blocks[i]);
		free(blocks[i]);
	}
}
