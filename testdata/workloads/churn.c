// churn: N pairs of malloc(random 16..527) + free in each of T threads.
//
//   churn N T [wait]
//
// With "wait", it reads one byte from stdin before the timed loop, so that a
// tracer can attach first. It prints
//
//   ns_per_pair W       the wall time of the timed section / N: per pair, per thread
//   cpu_ns_per_pair C   the process's CPU time (user+sys, all threads) in the
//                       timed section / (N*T): what one pair costs the program
//   cpu_total_ns A      the process's CPU time from its start to the end of
//                       main, so that a tracer's own CPU can be told from it
//
// C staying put as T grows says the threads do not slow each other down,
// whatever the wall time does on a machine with fewer cores than busy threads.
#include <pthread.h>
#include <sys/resource.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static long n_pairs;
static pthread_barrier_t barrier;
void *volatile sink; // keeps GCC from deleting the malloc/free pairs

static void *worker(void *arg) {
	uint64_t x = 0x9E3779B97F4A7C15ull * ((uintptr_t)arg + 1);
	pthread_barrier_wait(&barrier);
	for (long i = 0; i < n_pairs; i++) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17; // xorshift64
		void *p = malloc(16 + x % 512);
		sink = p;
		free(p);
	}
	pthread_barrier_wait(&barrier);
	return NULL;
}

static double now(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

// cpu returns the CPU time the process has used, in ns.
static double cpu(void) {
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	return (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e9 + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e3;
}

int main(int argc, char **argv) {
	if (argc < 3) {
		fprintf(stderr, "usage: churn N THREADS [wait]\n");
		return 2;
	}
	n_pairs = atol(argv[1]);
	int threads = atoi(argv[2]);
	if (n_pairs <= 0 || threads <= 0) {
		fprintf(stderr, "churn: N and THREADS must be positive\n");
		return 2;
	}
	if (argc > 3) {
		char c;
		if (read(0, &c, 1) < 0)
			return 3;
	}
	pthread_t tids[threads];
	pthread_barrier_init(&barrier, NULL, threads + 1);
	for (int i = 0; i < threads; i++)
		pthread_create(&tids[i], NULL, worker, (void *)(uintptr_t)i);
	pthread_barrier_wait(&barrier);
	double c0 = cpu(), t0 = now();
	pthread_barrier_wait(&barrier);
	double t1 = now(), c1 = cpu();
	for (int i = 0; i < threads; i++)
		pthread_join(tids[i], NULL);
	printf("ns_per_pair %.2f\ncpu_ns_per_pair %.2f\ncpu_total_ns %.0f\n", (t1 - t0) / n_pairs,
	       (c1 - c0) / ((double)n_pairs * threads), cpu());
	return 0;
}
