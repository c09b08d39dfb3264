// census_busy: threads that allocate and free without pause until told to
// stop, for the census taken at attach while the heap changes: each thread
// keeps a ring of blocks, allocates the first half once and replaces a
// random one of the second half at each step (now and then with one large
// enough to be mmapped), resting a millisecond every
// 20 steps (argv[1] steps) so that a tracer's buffers keep up. It prints "started" once the
// threads run; on a line on stdin the threads free every block they hold
// and exit, and it prints "done" and waits for another line.
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#include "rawout.h"

enum { nThreads = 4, ring = 256 };

static atomic_int quit;
static long rest = 20;

static void *worker(void *arg)
{
	uint64_t s = 0x9e3779b97f4a7c15ull * (uint64_t)((long)arg + 1);
	void *slots[ring] = {0};
	for (int i = 0; i < ring / 2; i++)
		slots[i] = malloc(16 + 8 * i);
	for (long it = 0; !atomic_load_explicit(&quit, memory_order_relaxed); it++) {
		if (it % rest == 0) {
			struct timespec ts = {0, 1000000};
			nanosleep(&ts, 0);
		}
		s ^= s >> 12;
		s ^= s << 25;
		s ^= s >> 27;
		uint64_t r = s * 2685821657736338717ull;
		void **slot = &slots[ring / 2 + r % (ring / 2)];
		free(*slot);
		size_t n = (r >> 20) % 997 == 0 ? 200000 : 1 + (r >> 32) % 2000;
		*slot = malloc(n);
		if (!*slot)
			_exit(3);
		*(volatile char *)*slot = 1;
	}
	for (int i = 0; i < ring; i++)
		free(slots[i]);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc > 1)
		rest = atol(argv[1]);
	pthread_t th[nThreads];
	for (long i = 0; i < nThreads; i++)
		if (pthread_create(&th[i], 0, worker, (void *)i) != 0)
			_exit(7);
	puts_("started\n");
	flush();
	wait_line();
	atomic_store(&quit, 1);
	for (int i = 0; i < nThreads; i++)
		pthread_join(th[i], 0);
	puts_("done\n");
	flush();
	wait_line();
	return 0;
}
