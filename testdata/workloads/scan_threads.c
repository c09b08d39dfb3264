// scan_threads: a process for internal/stopped's tests to stop and resume.
//
//   scan_threads [NTHREADS]   (default 8)
//
// NTHREADS threads allocate in a loop: each fills a block with a pattern,
// sleeps now and then (an interrupted nanosleep must be restarted, not fail
// with EINTR), checks the pattern and frees the block. It prints
//
//   ready PID counters=ADDR noaccess=ADDR hole=ADDR page=N
//
// where counters is the array of the threads' iteration counts (a reader
// compares it with what "p" prints), noaccess a PROT_NONE page and hole the
// address of a page unmapped after it was mapped. Then, on standard input:
//   p   prints "counts C0 C1 ...", the threads' iteration counts
//   v   vforks a child that sleeps 2 s before it exits: the main thread is
//       then in vfork, where no ptrace stop can reach it; prints "vforked"
//       after the child has gone
//   q   stops the threads, joins them, prints "done" and exits 0
// A pattern that does not read back, or a sleep that fails, prints
// "CORRUPT" or "EINTR" and exits 1.
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define MAXT 64

static volatile long counters[MAXT];
static volatile int quit;

static void *worker(void *arg)
{
	long id = (long)arg;
	for (unsigned long i = 0; !quit; i++) {
		size_t n = 16 + (i * 37 + id * 11) % 2000;
		unsigned char *p = malloc(n);
		if (!p)
			abort();
		memset(p, (int)(i + id), n);
		if (i % 500 == 0) {
			struct timespec ts = {0, 100000};
			if (nanosleep(&ts, NULL) != 0) {
				printf("EINTR %d\n", errno);
				fflush(stdout);
				exit(1);
			}
		}
		for (size_t k = 0; k < n; k++)
			if (p[k] != (unsigned char)(i + id)) {
				printf("CORRUPT\n");
				fflush(stdout);
				exit(1);
			}
		free(p);
		counters[id] = (long)i + 1;
	}
	return NULL;
}

int main(int argc, char **argv)
{
	int nt = argc > 1 ? atoi(argv[1]) : 8;
	if (nt < 1 || nt > MAXT)
		return 2;
	long page = sysconf(_SC_PAGESIZE);
	char *noaccess = mmap(NULL, page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	char *hole = mmap(NULL, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (noaccess == MAP_FAILED || hole == MAP_FAILED)
		return 1;
	munmap(hole, page);

	pthread_t t[MAXT];
	for (long i = 0; i < nt; i++)
		if (pthread_create(&t[i], NULL, worker, (void *)i) != 0)
			return 1;
	printf("ready %d counters=%p noaccess=%p hole=%p page=%ld\n", getpid(), (void *)counters,
	       (void *)noaccess, (void *)hole, page);
	fflush(stdout);

	char line[64];
	while (fgets(line, sizeof line, stdin)) {
		if (line[0] == 'p') {
			printf("counts");
			for (int i = 0; i < nt; i++)
				printf(" %ld", counters[i]);
			printf("\n");
		} else if (line[0] == 'v') {
			pid_t c = vfork();
			if (c == 0) {
				struct timespec ts = {2, 0};
				nanosleep(&ts, NULL);
				_exit(0);
			}
			printf("vforked\n");
		} else if (line[0] == 'q') {
			break;
		}
		fflush(stdout);
	}
	quit = 1;
	for (int i = 0; i < nt; i++)
		pthread_join(t[i], NULL);
	printf("done\n");
	fflush(stdout);
	return 0;
}
