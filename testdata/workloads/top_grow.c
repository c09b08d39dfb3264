// top_grow: a live heap that grows at a known rate through a known function,
// for `heapscope top`'s tests.
//
//   top_grow SECONDS [RATE]
//
// grow_heap keeps its blocks of 1000 bytes live, allocating as many as make
// RATE bytes per second of wall time so far (default 200000), checked every
// millisecond; churn_site makes a temporary on every check. It prints
// "started" and exits after SECONDS.
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

void *volatile sink; // keeps GCC from deleting the malloc/free pairs
static void **kept;
static long nkept;

static double now(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

__attribute__((noinline)) void grow_heap(void) {
	kept[nkept++] = malloc(1000);
	sink = kept[nkept - 1];
}

__attribute__((noinline)) void churn_site(void) {
	void *p = malloc(64);
	sink = p;
	free(p);
}

int main(int argc, char **argv) {
	double secs = argc > 1 ? atof(argv[1]) : 10;
	double rate = argc > 2 ? atof(argv[2]) : 200000;
	kept = calloc((size_t)(secs * rate / 1000) + 16, sizeof(void *));
	write(1, "started\n", 8);
	double t0 = now();
	for (;;) {
		double t = now() - t0;
		if (t >= secs)
			break;
		while (nkept * 1000.0 < rate * t)
			grow_heap();
		churn_site();
		usleep(1000);
	}
	return 0;
}
