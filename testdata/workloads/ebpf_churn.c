// ebpf_churn: churn.c's loop (N pairs of malloc(16..527) + free per thread),
// timed both by the wall clock and by the threads' own CPU clocks. On a
// shared machine the CPU time, which includes the kernel's time in the
// probes' traps, is the steadier measure of what tracing costs the process.
//
//   ebpf_churn N THREADS [wait [DEPTH]]
//
// With "wait" it reads a line from stdin before the timed loop. With DEPTH,
// each thread runs its loop DEPTH calls deep, in frames of about 200 bytes
// (a stack walk then has DEPTH frames more to read). It prints
// "site NAME ADDR" for its functions descend and worker first, then
// "ns_per_pair W" (wall, per pair per thread) and "cpu_ns_per_pair C"
// (the threads' CPU time over all their pairs).
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static long n_pairs;
static pthread_barrier_t barrier;
void *volatile sink;
static double cpu_ns[256];

static double clock_ns(clockid_t c) {
	struct timespec ts;
	clock_gettime(c, &ts);
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static int depth;

// loop is inlined: at depth 0 the stack of its malloc is worker's, as in
// churn.c.
static inline __attribute__((always_inline)) void loop(uintptr_t id) {
	uint64_t x = 0x9E3779B97F4A7C15ull * (id + 1);
	pthread_barrier_wait(&barrier);
	double c0 = clock_ns(CLOCK_THREAD_CPUTIME_ID);
	for (long i = 0; i < n_pairs; i++) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		void *p = malloc(16 + x % 512);
		sink = p;
		free(p);
	}
	cpu_ns[id] = clock_ns(CLOCK_THREAD_CPUTIME_ID) - c0;
}

// descend is d frames deep when it runs the loop. Its buffer gives each
// frame the size of an ordinary function's.
__attribute__((noinline)) static void descend(uintptr_t id, int d) {
	volatile char buf[176];
	buf[0] = (char)d;
	if (d > 1)
		descend(id, d - 1);
	else
		loop(id);
	buf[1] = buf[0];
}

__attribute__((noinline)) static void *worker(void *arg) {
	if (depth > 0)
		descend((uintptr_t)arg, depth);
	else
		loop((uintptr_t)arg);
	pthread_barrier_wait(&barrier);
	return NULL;
}

int main(int argc, char **argv) {
	if (argc < 3)
		return 2;
	n_pairs = atol(argv[1]);
	int threads = atoi(argv[2]);
	if (n_pairs <= 0 || threads <= 0 || threads > 256)
		return 2;
	if (argc > 4)
		depth = atoi(argv[4]);
	printf("site descend %lx\nsite worker %lx\n", (unsigned long)descend, (unsigned long)worker);
	fflush(stdout);
	if (argc > 3) {
		char c;
		while (read(0, &c, 1) == 1 && c != '\n')
			;
	}
	pthread_t tids[threads];
	pthread_barrier_init(&barrier, NULL, threads + 1);
	for (int i = 0; i < threads; i++)
		pthread_create(&tids[i], NULL, worker, (void *)(uintptr_t)i);
	pthread_barrier_wait(&barrier);
	double t0 = clock_ns(CLOCK_MONOTONIC);
	pthread_barrier_wait(&barrier);
	double t1 = clock_ns(CLOCK_MONOTONIC);
	for (int i = 0; i < threads; i++)
		pthread_join(tids[i], NULL);
	double cpu = 0;
	for (int i = 0; i < threads; i++)
		cpu += cpu_ns[i];
	printf("ns_per_pair %.2f\ncpu_ns_per_pair %.2f\n", (t1 - t0) / n_pairs, cpu / (n_pairs * threads));
	return 0;
}
