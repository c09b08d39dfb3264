// preload_mallinfo: the C library's view of the program's own heap, which
// an interposer must leave as it is (as heaptrack's measure_malloc_overhead
// shows it): mallinfo2() before the first allocation, then after each of a
// series of allocations of growing sizes, kept, then after freeing them.
//
//   preload_mallinfo [THREADS]
//
// With THREADS, that many threads first each allocate and free a block (the
// interposer sets each up), before the series. Each line is "STEP arena
// ordblks uordblks fordblks hblks hblkhd", computed first and printed at the
// end (printing allocates).
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#define STEPS 24

static struct mallinfo2 info[STEPS + 2];
static void *blocks[STEPS];
void *volatile sink;

static void *worker(void *arg)
{
	(void)arg;
	sink = malloc(100);
	free(sink);
	return NULL;
}

int main(int argc, char **argv)
{
	int threads = argc > 1 ? atoi(argv[1]) : 0;
	info[0] = mallinfo2();
	for (int i = 0; i < threads; i++) {
		pthread_t t;
		if (pthread_create(&t, NULL, worker, NULL) != 0 || pthread_join(t, NULL) != 0)
			return 1;
	}
	for (int i = 0; i < STEPS; i++) {
		blocks[i] = malloc((size_t)1 << i);
		info[i + 1] = mallinfo2();
	}
	for (int i = 0; i < STEPS; i++)
		free(blocks[i]);
	info[STEPS + 1] = mallinfo2();
	for (int i = 0; i < STEPS + 2; i++)
		printf("%d %zu %zu %zu %zu %zu %zu\n", i, info[i].arena, info[i].ordblks, info[i].uordblks,
		       info[i].fordblks, info[i].hblks, info[i].hblkhd);
	return 0;
}
