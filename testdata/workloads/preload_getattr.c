// preload_getattr: threads whose first heap call is made by the C library
// while it holds a lock of the thread, as a JVM's and ripgrep's threads do.
//
//   preload_getattr WAVES PER_WAVE K
//
// Each wave starts PER_WAVE threads at once and joins them. Every other
// thread runs on a stack of its own (pthread_attr_setstack, with a guard
// zone at its low end made PROT_NONE by the thread, as HotSpot does). At its
// entry each thread calls pthread_getattr_np on itself: glibc reallocs the
// attribute's cpuset while holding the thread's lock, so that realloc is the
// thread's first heap call. Then it calls site_getattr K times, each a
// malloc(24) and a free from a few frames deep (chain_a, chain_b), and
// checks that its frame is inside the bounds glibc gave. It prints
// "threads N" at the end.
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#define OWN_STACK (1 << 20)
#define GUARD (64 << 10)

void *volatile sink;
static long k;
volatile long calls; // code after each call: no tail calls

__attribute__((noinline)) void site_getattr(void)
{
	void *p = malloc(24);
	sink = p;
	free(p);
	calls++;
}

__attribute__((noinline)) void chain_b(void)
{
	site_getattr();
	calls++;
}

__attribute__((noinline)) void chain_a(void)
{
	chain_b();
	calls++;
}

static void *worker(void *arg)
{
	int own = arg != NULL;
	pthread_attr_t a;
	if (pthread_getattr_np(pthread_self(), &a) != 0)
		abort();
	void *addr;
	size_t size;
	if (pthread_attr_getstack(&a, &addr, &size) != 0)
		abort();
	pthread_attr_destroy(&a);
	uintptr_t here = (uintptr_t)__builtin_frame_address(0);
	if (here < (uintptr_t)addr || here >= (uintptr_t)addr + size)
		abort();
	if (own && mprotect(arg, GUARD, PROT_NONE) != 0) // HotSpot's guard zone
		abort();
	for (long i = 0; i < k; i++)
		chain_a();
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc != 4)
		return 2;
	int waves = atoi(argv[1]), per = atoi(argv[2]);
	k = atol(argv[3]);
	if (per < 1 || per > 64)
		return 2;
	pthread_t t[64];
	void *stacks[64];
	for (int i = 0; i < per; i++) {
		stacks[i] = mmap(NULL, OWN_STACK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (stacks[i] == MAP_FAILED)
			return 1;
	}
	int n = 0;
	for (int w = 0; w < waves; w++) {
		for (int i = 0; i < per; i++) {
			pthread_attr_t a;
			pthread_attr_init(&a);
			void *own = NULL;
			if (i % 2) {
				own = stacks[i];
				mprotect(own, GUARD, PROT_READ | PROT_WRITE);
				pthread_attr_setstack(&a, own, OWN_STACK);
			}
			if (pthread_create(&t[i], &a, worker, own) != 0)
				return 1;
			pthread_attr_destroy(&a);
			n++;
		}
		for (int i = 0; i < per; i++)
			pthread_join(t[i], NULL);
	}
	printf("threads %d\n", n);
	return 0;
}
