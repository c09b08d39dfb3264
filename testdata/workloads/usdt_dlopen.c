// usdt_dlopen: a program with OpenTelemetry's otel_memory USDT probes that
// loads, once a tracer has attached, a library with probes of its own
// (usdt_dlopenlib), so that the tracer must find the library's probes after
// the attach.
//
//   usdt_dlopen LIBRARY
//
// It prints "ready" and reads a line; fires alloc(ptr, 50, 500) for one
// block of its own (main_work); dlopens LIBRARY and prints "loaded"; then,
// for each line it reads, prints "semaphores 1" once both of the
// library's semaphores are raised ("semaphores 0" before), until one is;
// then reads a line, runs the library's lib_work, prints "done", and reads
// a line before it exits.
#define _SDT_HAS_SEMAPHORES 1
#include <sys/sdt.h>

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

unsigned short otel_memory_alloc_semaphore __attribute__((unused)) __attribute__((section(".probes")));
unsigned short otel_memory_free_semaphore __attribute__((unused)) __attribute__((section(".probes")));

void *volatile sink;

__attribute__((noinline)) void main_work(void) {
	void *p = malloc(50);
	sink = p;
	if (otel_memory_alloc_semaphore)
		STAP_PROBE3(otel_memory, alloc, p, 50, 500);
}

// main_free is never called: the executable defines both probes, as the
// contract has them, but frees nothing it sampled.
__attribute__((noinline)) void main_free(void *p) {
	if (otel_memory_free_semaphore)
		STAP_PROBE1(otel_memory, free, p);
}

static int line(void) {
	char b[64];
	return fgets(b, sizeof b, stdin) != NULL;
}

int main(int argc, char **argv) {
	if (argc != 2) {
		fprintf(stderr, "usage: usdt_dlopen LIBRARY\n");
		return 2;
	}
	printf("ready\n");
	fflush(stdout);
	line();
	main_work();
	void *h = dlopen(argv[1], RTLD_NOW);
	if (!h) {
		fprintf(stderr, "%s\n", dlerror());
		return 1;
	}
	unsigned (*sems)(void) = (unsigned (*)(void))dlsym(h, "lib_semaphores");
	void (*work)(void) = (void (*)(void))dlsym(h, "lib_work");
	if (!sems || !work)
		return 1;
	printf("loaded\n");
	fflush(stdout);
	for (;;) {
		if (!line())
			return 1;
		unsigned s = sems();
		printf("semaphores %u\n", s);
		fflush(stdout);
		if (s)
			break;
	}
	line();
	work();
	printf("done\n");
	fflush(stdout);
	line();
	return 0;
}
