// census_rundown: a process whose heap was made before heapscope attached,
// and which then frees all of it, for the tests of the census at attach.
//
// It allocates blocks of several sizes from the main thread and from two
// threads (each allocating from an arena of its own, then waiting), some
// mmapped, one aligned, one calloc'ed, and a table of 64 KiB that alone
// holds 100 nodes of 72 bytes (their holder, for the census's scan), frees
// some of them so that the heap has free chunks, and prints, without
// allocating (rawout.h), one line per block it holds ("b ADDR USABLE", "n
// ADDR USABLE" for the nodes) and "ready". On a line on stdin it frees the
// nodes, reallocates some of its blocks (moving them), frees every block it holds,
// lets its threads exit (glibc frees their tcaches and thread vectors),
// prints "freed", and on the next line exits.
#include <malloc.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "parked.h"
#include "rawout.h"

enum { maxRecs = 1 << 14, nThreads = 2, nNodes = 100 };

static void *recs[maxRecs];
static int nrecs;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER; // guards recs

static void keep(void *p)
{
	if (!p)
		_exit(3);
	pthread_mutex_lock(&mu);
	if (nrecs == maxRecs)
		_exit(5);
	recs[nrecs++] = p;
	pthread_mutex_unlock(&mu);
	memset(p, 0x5a, malloc_usable_size(p));
}

static void *worker(void *arg)
{
	long id = (long)arg;
	void *ps[200];
	for (int i = 0; i < 200; i++)
		ps[i] = malloc(32 + 48 * ((i + id) % 20));
	for (int i = 0; i < 200; i++) {
		if (i % 3 == 0)
			free(ps[i]);
		else
			keep(ps[i]);
	}
	park();
	return 0;
}

int main(void)
{
	static const size_t sizes[] = {16, 40, 100, 250, 1000, 5000, 40000, 300000};
	for (int round = 0; round < 30; round++)
		for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
			void *p = malloc(sizes[s]);
			if (round % 4 == 3)
				free(p); // free chunks among the live ones
			else
				keep(p);
		}
	keep(calloc(100, 24));
	void *al;
	if (posix_memalign(&al, 4096, 10000) != 0)
		_exit(6);
	keep(al);
	void **table = malloc(65536);
	keep(table);
	for (int i = 0; i < nNodes; i++) {
		table[i] = malloc(72);
		if (!table[i])
			_exit(3);
		memset(table[i], 0xc3, 72);
	}

	pthread_t th[nThreads];
	start_parked(th, nThreads, worker);

	for (int i = 0; i < nrecs; i++) {
		puts_("b");
		hex((uintptr_t)recs[i]);
		hex(malloc_usable_size(recs[i]));
		puts_("\n");
	}
	for (int i = 0; i < nNodes; i++) {
		puts_("n");
		hex((uintptr_t)table[i]);
		hex(malloc_usable_size(table[i]));
		puts_("\n");
	}
	puts_("ready\n");
	flush();
	wait_line();

	for (int i = 0; i < nNodes; i++)
		free(table[i]);
	// Some blocks move (a realloc frees the old one and makes a new one),
	// then every block goes.
	for (int i = 0; i < nrecs; i += 7) {
		void *p = realloc(recs[i], malloc_usable_size(recs[i]) * 2 + 64);
		if (!p)
			_exit(8);
		recs[i] = p;
	}
	for (int i = 0; i < nrecs; i++)
		free(recs[i]);
	unpark_all(th, nThreads);
	puts_("freed\n");
	flush();
	wait_line();
	return 0;
}
