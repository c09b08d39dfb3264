// report_known: allocations whose leaks, peak and per-site counts are known
// exactly, for the report's end-to-end tests (and heaptrack comparison).
//
//   report_known [ROUNDS]
//
// Each function below is one call site; noinline keeps it a frame of its own.
// Nothing uses stdio, so libc allocates no buffers of its own.
//
//   leak_site:    3 blocks of 1000 bytes, never freed           (leaked 3000 in 3)
//   peak_site:    10 blocks of 10000 bytes live together, then freed
//                 (the peak: 100000 + the 3000 leaked + the 1024 of calloc_site)
//   temp_site:    ROUNDS (default 50) malloc(64)+free pairs: all temporary
//   calloc_site:  calloc(4, 256), never freed                   (leaked 1024 in 1)
//   realloc_site: malloc(100), then grow_site reallocs it to 5000, then freed
//   aligned_site: posix_memalign(64, 4096) and aligned_alloc(128, 256), freed
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void *volatile sink; // keeps GCC from deleting the malloc/free pairs
static void *leaks[4];

__attribute__((noinline)) void leak_site(int i) {
	leaks[i] = malloc(1000);
	sink = leaks[i];
}

__attribute__((noinline)) void calloc_site(void) {
	leaks[3] = calloc(4, 256);
	sink = leaks[3];
}

__attribute__((noinline)) void peak_site(void **blocks) {
	for (int i = 0; i < 10; i++) {
		blocks[i] = malloc(10000);
		memset(blocks[i], i, 10000);
		sink = blocks[i];
	}
}

__attribute__((noinline)) void temp_site(void) {
	void *p = malloc(64);
	sink = p;
	free(p);
}

__attribute__((noinline)) void *grow_site(void *p) {
	void *q = realloc(p, 5000);
	sink = q;
	return q;
}

__attribute__((noinline)) void realloc_site(void) {
	void *p = malloc(100);
	sink = p;
	memset(p, 1, 100);
	p = grow_site(p);
	free(p);
}

__attribute__((noinline)) void aligned_site(void) {
	void *p = NULL;
	if (posix_memalign(&p, 64, 4096) != 0)
		_exit(3);
	sink = p;
	void *q = aligned_alloc(128, 256);
	sink = q;
	free(p);
	free(q);
}

int main(int argc, char **argv) {
	int rounds = argc > 1 ? atoi(argv[1]) : 50;
	for (int i = 0; i < 3; i++)
		leak_site(i);
	calloc_site();
	void *blocks[10];
	peak_site(blocks);
	for (int i = 0; i < 10; i++)
		free(blocks[i]);
	for (int i = 0; i < rounds; i++)
		temp_site();
	realloc_site();
	aligned_site();
	write(1, "done\n", 5);
	return 0;
}
