// census_churn: 8 threads that allocate and free without pause, each from
// a sequence of its own (a PRNG seeded by its number), so that what it
// prints does not depend on timing: each thread keeps a ring of blocks,
// frees a random one and allocates another of a random size (now and then
// one large enough to be mmapped), writes a pattern at the block's ends and
// checks it before freeing. At the end each thread prints a checksum of
// what it read back ("thread N SUM") and the program waits for a line on
// stdin. A census that harmed the heap or the threads changes the output.
//
// argv[1] is the number of iterations of each thread.
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { nThreads = 8, ring = 512 };

static long iterations = 1000000;
static uint64_t sums[nThreads];

static uint64_t next(uint64_t *s)
{
	// xorshift64*
	*s ^= *s >> 12;
	*s ^= *s << 25;
	*s ^= *s >> 27;
	return *s * 2685821657736338717ull;
}

struct slot {
	unsigned char *p;
	size_t n;
	uint64_t tag;
};

static void mark(struct slot *s)
{
	size_t k = s->n < 64 ? s->n : 64;
	for (size_t i = 0; i < k; i++) {
		s->p[i] = (unsigned char)(s->tag >> (i % 8 * 8));
		s->p[s->n - 1 - i] = (unsigned char)(s->tag >> (i % 8 * 8)) ^ 0x5a;
	}
}

static uint64_t check(struct slot *s)
{
	size_t k = s->n < 64 ? s->n : 64;
	uint64_t sum = s->tag * 31 + s->n;
	for (size_t i = 0; i < k; i++)
		sum = sum * 131 + s->p[i] + s->p[s->n - 1 - i];
	return sum;
}

static void *worker(void *arg)
{
	long id = (long)arg;
	uint64_t seed = 0x9e3779b97f4a7c15ull * (uint64_t)(id + 1);
	static __thread struct slot slots[ring];
	uint64_t sum = 0;
	for (long it = 0; it < iterations; it++) {
		uint64_t r = next(&seed);
		struct slot *s = &slots[r % ring];
		if (s->p) {
			sum = sum * 7 + check(s);
			free(s->p);
		}
		uint64_t k = next(&seed);
		size_t n = (k % 1000 == 0) ? 150000 + k % 100000 : 1 + k % (k % 7 == 0 ? 4000 : 200);
		s->p = malloc(n);
		if (!s->p)
			abort();
		s->n = n;
		s->tag = next(&seed);
		mark(s);
	}
	for (int i = 0; i < ring; i++)
		if (slots[i].p) {
			sum = sum * 7 + check(&slots[i]);
			free(slots[i].p);
			slots[i].p = 0;
		}
	sums[id] = sum;
	return 0;
}

int main(int argc, char **argv)
{
	if (argc > 1)
		iterations = atol(argv[1]);
	pthread_t th[nThreads];
	printf("started\n");
	fflush(stdout);
	for (long i = 0; i < nThreads; i++)
		pthread_create(&th[i], 0, worker, (void *)i);
	for (int i = 0; i < nThreads; i++)
		pthread_join(th[i], 0);
	for (int i = 0; i < nThreads; i++)
		printf("thread %d %016llx\n", i, (unsigned long long)sums[i]);
	printf("done\n");
	fflush(stdout);
	char line[16];
	if (!fgets(line, sizeof line, stdin))
		return 0;
	return 0;
}
