// census_bench: a heap of a given number of chunks for the census
// benchmark. argv: the number of blocks to allocate, the size mix ("small":
// 16..128 bytes, "mixed": 16..2048 with one in 64 up to 64 KiB, "large": 1..16
// KiB), the number of threads (each allocates its share from an arena of its
// own). One block in four is freed again, in an order that fragments
// (tcaches, fastbins and bins all get chunks). Every block is written. It
// prints "ready" and waits for a line on stdin.
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "parked.h"

static long n = 1000000;
static const char *mix = "small";
static int nthreads = 1;

static uint64_t next(uint64_t *s)
{
	*s ^= *s >> 12;
	*s ^= *s << 25;
	*s ^= *s >> 27;
	return *s * 2685821657736338717ull;
}

static size_t size(uint64_t *s)
{
	uint64_t r = next(s);
	if (!strcmp(mix, "small"))
		return 16 + r % 113;
	if (!strcmp(mix, "large"))
		return 1024 + r % (15 * 1024);
	if (r % 64 == 0)
		return 2048 + r % (62 * 1024);
	return 16 + r % 2033;
}

static void *worker(void *arg)
{
	long id = (long)arg, share = n / nthreads;
	uint64_t seed = 0x9e3779b97f4a7c15ull * (uint64_t)(id + 1);
	void **ps = malloc(share * sizeof *ps);
	for (long i = 0; i < share; i++) {
		size_t k = size(&seed);
		ps[i] = malloc(k);
		memset(ps[i], 0xa5, k); // not text: the census keeps a copy of each text
	}
	for (long i = 0; i < share; i += 4)
		free(ps[(i * 7) % share]);
	park();
	return ps;
}

int main(int argc, char **argv)
{
	if (argc > 1)
		n = atol(argv[1]);
	if (argc > 2)
		mix = argv[2];
	if (argc > 3)
		nthreads = atoi(argv[3]);
	if (nthreads > 64) // th holds 64
		return 2;
	pthread_t th[64];
	start_parked(th, nthreads, worker);
	printf("ready\n");
	fflush(stdout);
	char line[16];
	if (!fgets(line, sizeof line, stdin))
		line[0] = 0;
	unpark_all(th, nthreads);
	return 0;
}
