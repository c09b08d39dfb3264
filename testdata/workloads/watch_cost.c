// watch_cost: what a program pays per operation, for bench/leaksbench: a
// process watched for a leak check at its exit (ptrace) pays a round trip
// per signal, thread and fork; nothing per allocation.
//
//   watch_cost [N]
//
// It times N malloc+free pairs, N/10 raise(SIGUSR1) (a handler counts
// them), N/100 thread create+join and N/1000 fork+exit+wait, and prints
//
//   pair_ns X signal_ns Y thread_ns Z fork_ns W
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static volatile int handled;
void *volatile sink;

static void on_usr1(int sig) { handled++; }
static void *nothing(void *arg) { return arg; }

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e9 + t.tv_nsec;
}

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 1000000;
	signal(SIGUSR1, on_usr1);
	double t0 = now();
	for (long i = 0; i < n; i++) {
		sink = malloc(16 + i % 200);
		free(sink);
	}
	double t1 = now();
	for (long i = 0; i < n / 10; i++)
		raise(SIGUSR1);
	double t2 = now();
	for (long i = 0; i < n / 100; i++) {
		pthread_t t;
		pthread_create(&t, NULL, nothing, NULL);
		pthread_join(t, NULL);
	}
	double t3 = now();
	for (long i = 0; i < n / 1000; i++) {
		pid_t c = fork();
		if (c == 0)
			_exit(0);
		int st;
		waitpid(c, &st, 0);
	}
	double t4 = now();
	printf("pair_ns %.1f signal_ns %.1f thread_ns %.1f fork_ns %.1f\n", (t1 - t0) / n, (t2 - t1) / (n / 10), (t3 - t2) / (n / 100),
	       (t4 - t3) / (n / 1000));
	return handled == n / 10 ? 0 : 1;
}
