// preload_handoff: blocks allocated in one thread and freed in another, as
// fast as possible, so that the addresses are reused across threads. The
// preload tests check that every free comes after the malloc of its block,
// and every reuse after the free, in the merged stream.
//
//   preload_handoff N
//
// The producer thread mallocs N blocks (site_produce) and hands each to the
// consumer through a single-slot mailbox; the consumer frees them
// (site_consume). The main thread also frees what it mallocs, to reuse
// addresses from a third thread.
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

void *volatile sink;
static long n;
static _Atomic(void *) mailbox[4];

volatile long work; // code after each call: no tail calls

__attribute__((noinline)) void *site_produce(long i)
{
	void *p = malloc(32 + (i & 3) * 16);
	work++;
	return p;
}

__attribute__((noinline)) void site_consume(void *p)
{
	free(p);
	work++;
}

static void *producer(void *arg)
{
	for (long i = 0; i < n; i++) {
		void *p = site_produce(i);
		_Atomic(void *) *slot = &mailbox[i & 3];
		while (atomic_load_explicit(slot, memory_order_acquire))
			;
		atomic_store_explicit(slot, p, memory_order_release);
	}
	return NULL;
}

static void *consumer(void *arg)
{
	for (long i = 0; i < n; i++) {
		_Atomic(void *) *slot = &mailbox[i & 3];
		void *p;
		while (!(p = atomic_load_explicit(slot, memory_order_acquire)))
			;
		atomic_store_explicit(slot, NULL, memory_order_relaxed);
		site_consume(p);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc != 2)
		return 2;
	n = atol(argv[1]);
	pthread_t a, b;
	pthread_create(&a, NULL, producer, NULL);
	pthread_create(&b, NULL, consumer, NULL);
	for (long i = 0; i < n / 4; i++) {
		void *p = malloc(32 + (i & 3) * 16);
		sink = p;
		free(p);
	}
	pthread_join(a, NULL);
	pthread_join(b, NULL);
	return 0;
}
