// preload_sites: allocation calls from known call sites, in known numbers,
// from several threads. The preload tests count them per site.
//
//   preload_sites THREADS N
//
// Thread i (0-based; the main thread does the same work as thread "T") calls
// site_malloc N*(i+1) times, site_calloc N times and site_realloc N times.
// site_malloc: malloc(24) then free; site_calloc: calloc(3, 16) then free;
// site_realloc: malloc(10), realloc to 1000, then free.
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

void *volatile sink; // keeps GCC from deleting the pairs
static long n;

__attribute__((noinline)) void site_malloc(long count)
{
	for (long i = 0; i < count; i++) {
		void *p = malloc(24);
		sink = p;
		free(p);
	}
}

__attribute__((noinline)) void site_calloc(long count)
{
	for (long i = 0; i < count; i++) {
		void *p = calloc(3, 16);
		sink = p;
		free(p);
	}
}

__attribute__((noinline)) void site_realloc(long count)
{
	for (long i = 0; i < count; i++) {
		void *p = malloc(10);
		sink = p;
		p = realloc(p, 1000);
		sink = p;
		free(p);
	}
}

static void work(long i)
{
	site_malloc(n * (i + 1));
	site_calloc(n);
	site_realloc(n);
}

static void *worker(void *arg)
{
	work((long)(uintptr_t)arg);
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: preload_sites THREADS N\n");
		return 2;
	}
	int threads = atoi(argv[1]);
	n = atol(argv[2]);
	pthread_t tids[64];
	if (threads < 0 || threads > 64 || n < 0)
		return 2;
	for (int i = 0; i < threads; i++)
		pthread_create(&tids[i], NULL, worker, (void *)(uintptr_t)i);
	work(threads);
	for (int i = 0; i < threads; i++)
		pthread_join(tids[i], NULL);
	return 0;
}
