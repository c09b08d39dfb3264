// ebpf_count: N malloc+free pairs in each of T threads, between two pauses,
// and nothing else: the calls made while traced are exactly 2*N*T.
//
//   ebpf_count N T
//
// The threads are created first. It prints "ready" and waits for a line on
// stdin; runs the pairs; prints "calls C" (C = 2*N*T) and waits for another
// line, the threads still alive (a thread's exit frees its cache: more
// calls), before it exits.
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static long n_pairs;
static pthread_barrier_t start, stop, quit;
void *volatile sink;

static void *worker(void *arg) {
	uint64_t x = 0x9E3779B97F4A7C15ull * ((uintptr_t)arg + 1);
	pthread_barrier_wait(&start);
	for (long i = 0; i < n_pairs; i++) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		void *p = malloc(16 + x % 512);
		sink = p;
		free(p);
	}
	pthread_barrier_wait(&stop);
	pthread_barrier_wait(&quit);
	return NULL;
}

static void wait_line(void) {
	char c;
	while (read(0, &c, 1) == 1 && c != '\n')
		;
}

int main(int argc, char **argv) {
	if (argc < 3)
		return 2;
	n_pairs = atol(argv[1]);
	int threads = atoi(argv[2]);
	pthread_t tids[threads];
	pthread_barrier_init(&start, NULL, threads + 1);
	pthread_barrier_init(&stop, NULL, threads + 1);
	pthread_barrier_init(&quit, NULL, threads + 1);
	for (int i = 0; i < threads; i++)
		pthread_create(&tids[i], NULL, worker, (void *)(uintptr_t)i);
	printf("ready\n"); // stdout's buffer is allocated here, before tracing
	fflush(stdout);
	wait_line();
	pthread_barrier_wait(&start);
	pthread_barrier_wait(&stop);
	printf("calls %ld\n", 2 * n_pairs * threads);
	fflush(stdout);
	wait_line();
	pthread_barrier_wait(&quit);
	for (int i = 0; i < threads; i++)
		pthread_join(tids[i], NULL);
	return 0;
}
