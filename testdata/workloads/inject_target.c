// inject_target: a running process for heapscope attach --inject's tests,
// driven by lines on stdin, answering on stdout.
//
//   inject_target THREADS
//
// prints "ready PID" and then, for each command:
//   run           the threads allocate and free in a loop until "pause"
//   pause         stop them; answers "paused PAIRS" (pairs made since start)
//   burst N       each thread makes N malloc+free pairs; answers "done"
//   size N        from now on every allocation of the loops is N bytes
//                 (0: back to the sizes below); answers "sized"
//   time N        as burst, timed; answers "cpu_ns_per_pair C wall_ns_per_pair
//                 W" (process CPU time over N*THREADS pairs, wall time over N)
//   leak K        leak_small() leaks K blocks of 24 bytes, leak_big() K of
//                 4000 bytes, kept() allocates K of 100 bytes it frees;
//                 answers "leaked"
//   stacks N      N malloc+free pairs at a depth of 40 calls; "done"
//   hold          the main thread waits for the next commands inside a
//                 dl_iterate_phdr callback (the loader's lock held): no
//                 safe point while THREADS is 0; answers "holding"
//   release       leaves the callback; answers "released"
//   quit          exits 0
//
// With INJECT_TARGET_SECCOMP=1 in its environment it runs under a seccomp
// filter (one that allows everything), which injection refuses.
//
// Thread t's k-th allocation of a loop is 16 + t*4096 + (k*7 mod 4093)
// bytes: an injection test reads, from the sizes it sees, whether a thread's
// allocations between two it saw were all seen (4093 is prime: only a gap
// of a multiple of 4093 allocations would hide).
#define _GNU_SOURCE
#include <link.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>
#if __has_include(<linux/seccomp.h>) // musl-gcc has no kernel headers
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#define HAVE_SECCOMP 1
#endif

void *volatile sink; // keeps GCC from deleting the pairs

static int nthreads;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER, donecv = PTHREAD_COND_INITIALIZER;
static long gen, want; // a new job: want pairs each (-1: until pause)
static int finished;
static atomic_long pairs;
static atomic_int stop;

static long fixed_size; // "size N"; read by a worker as it takes a job, under mu

static size_t size_of(int t, long k, long f) { return f ? (size_t)f : 16 + (size_t)t * 4096 + (size_t)((k * 7) % 4093); }

static void *worker(void *arg) {
	int t = (int)(intptr_t)arg;
	long seen = 0, k = 0;
	for (;;) {
		pthread_mutex_lock(&mu);
		while (gen == seen)
			pthread_cond_wait(&cv, &mu);
		seen = gen;
		long n = want, f = fixed_size;
		pthread_mutex_unlock(&mu);
		for (long i = 0; n < 0 ? !atomic_load_explicit(&stop, memory_order_relaxed) : i < n; i++) {
			void *p = malloc(size_of(t, k++, f));
			sink = p;
			free(p);
			atomic_fetch_add_explicit(&pairs, 1, memory_order_relaxed);
		}
		pthread_mutex_lock(&mu);
		finished++;
		pthread_cond_broadcast(&donecv);
		pthread_mutex_unlock(&mu);
	}
	return NULL;
}

static void start(long n) {
	pthread_mutex_lock(&mu);
	finished = 0;
	want = n;
	gen++;
	atomic_store(&stop, 0);
	pthread_cond_broadcast(&cv);
	pthread_mutex_unlock(&mu);
}

static void wait_all(void) {
	pthread_mutex_lock(&mu);
	while (finished < nthreads)
		pthread_cond_wait(&donecv, &mu);
	pthread_mutex_unlock(&mu);
}

static double cpu_ns(void) {
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	return (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e9 + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e3;
}

static double wall_ns(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

__attribute__((noinline)) void leak_small(int k) {
	for (int i = 0; i < k; i++)
		sink = malloc(24);
}

__attribute__((noinline)) void leak_big(int k) {
	for (int i = 0; i < k; i++)
		sink = malloc(4000);
}

__attribute__((noinline)) void kept(int k) {
	void **v = calloc((size_t)k, sizeof *v);
	for (int i = 0; i < k; i++)
		v[i] = malloc(100);
	for (int i = 0; i < k; i++)
		free(v[i]);
	free(v);
}

__attribute__((noinline)) int deep(int d, int n) {
	if (d > 0)
		return deep(d - 1, n) + 1;
	for (int i = 0; i < n; i++) {
		void *p = malloc(48);
		sink = p;
		free(p);
	}
	return 0;
}

static int commands(int holding);

// hold_cb runs the commands inside dl_iterate_phdr's callback, where the
// loader's lock is held, until "release".
static int hold_cb(struct dl_phdr_info *info, size_t size, void *arg) {
	(void)info, (void)size, (void)arg;
	printf("holding\n");
	return commands(1);
}

// commands reads commands until the end of the input or "quit" (0) or,
// holding, "release" (1).
static int commands(int holding) {
	char line[256];
	while (fgets(line, sizeof line, stdin)) {
		long n = 0;
		if (!strncmp(line, "run", 3)) {
			start(-1);
			printf("running\n");
		} else if (!strncmp(line, "pause", 5)) {
			atomic_store(&stop, 1);
			wait_all();
			printf("paused %ld\n", atomic_load(&pairs));
		} else if (sscanf(line, "burst %ld", &n) == 1) {
			start(n);
			wait_all();
			printf("done\n");
		} else if (sscanf(line, "size %ld", &n) == 1) {
			pthread_mutex_lock(&mu);
			fixed_size = n;
			pthread_mutex_unlock(&mu);
			printf("sized\n");
		} else if (sscanf(line, "time %ld", &n) == 1) {
			double c0 = cpu_ns(), w0 = wall_ns();
			start(n);
			wait_all();
			printf("cpu_ns_per_pair %.2f wall_ns_per_pair %.2f\n", (cpu_ns() - c0) / ((double)n * nthreads),
			       (wall_ns() - w0) / (double)n);
		} else if (sscanf(line, "leak %ld", &n) == 1) {
			leak_small((int)n);
			leak_big((int)n);
			kept((int)n);
			printf("leaked\n");
		} else if (sscanf(line, "stacks %ld", &n) == 1) {
			deep(40, (int)n);
			printf("done\n");
		} else if (!strncmp(line, "hold", 4) && !holding) {
			if (!dl_iterate_phdr(hold_cb, NULL))
				return 0; // quit while holding
			printf("released\n");
		} else if (!strncmp(line, "release", 7) && holding) {
			return 1;
		} else if (!strncmp(line, "quit", 4)) {
			return 0;
		}
	}
	return 0;
}

int main(int argc, char **argv) {
	nthreads = argc > 1 ? atoi(argv[1]) : 1;
#ifdef HAVE_SECCOMP
	if (getenv("INJECT_TARGET_SECCOMP")) {
		struct sock_filter allow[] = {BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW)};
		struct sock_fprog prog = {1, allow};
		if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog)) {
			perror("seccomp");
			return 1;
		}
	}
#endif
	for (int t = 0; t < nthreads; t++) {
		pthread_t th;
		pthread_create(&th, NULL, worker, (void *)(intptr_t)t);
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	printf("ready %d\n", (int)getpid());
	commands(0);
	return 0;
}
