// sample_threads: two threads allocate, reallocate and free blocks of many
// sizes; one block in seven is handed to the other thread, which frees it.
// Everything is freed by the end. For the sampling tests of the preload
// provider: every free recorded must be of a block whose allocation was.
//
//   sample_threads N
#include <pthread.h>
#include <stdlib.h>

void *volatile sink;
static long n;

#define HANDOFF 4096
static void *handoff[2][HANDOFF];

static void *worker(void *arg)
{
	long me = (long)arg;
	void **mine = handoff[me], **theirs = handoff[1 - me];
	for (long i = 0; i < n; i++) {
		size_t s = 8 + (size_t)(i * 2654435761u) % 6000;
		void *p = (i & 1) ? malloc(s) : calloc(1, s);
		sink = p;
		if (i % 3 == 0) {
			p = realloc(p, s * 2 + 1);
			sink = p;
		}
		long slot = i % HANDOFF;
		if (i % 7 == 0) {
			void *q = __atomic_exchange_n(&mine[slot], p, __ATOMIC_ACQ_REL);
			free(q); /* the previous one left in this slot, if the other thread did not take it */
		} else {
			free(p);
		}
		void *q = __atomic_exchange_n(&theirs[slot], NULL, __ATOMIC_ACQ_REL);
		free(q); /* freed by the thread that did not allocate it */
	}
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc < 2)
		return 2;
	n = atol(argv[1]);
	pthread_t t[2];
	for (long i = 0; i < 2; i++)
		pthread_create(&t[i], NULL, worker, (void *)i);
	for (int i = 0; i < 2; i++)
		pthread_join(t[i], NULL);
	for (int i = 0; i < 2; i++)
		for (int j = 0; j < HANDOFF; j++)
			free(handoff[i][j]);
	return 0;
}
