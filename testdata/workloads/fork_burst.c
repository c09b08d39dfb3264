// fork_burst: forks, for measuring how following children under one
// traced process affects another's.
//
//   fork_burst burst N    forks N children as fast as it can (each exits
//                         at once), then waits for them all
//   fork_burst probe MS   forks a child every 10 ms for MS milliseconds,
//                         timing each fork and wait
//
// Each prints "ready", waits for a line on its standard input, does its
// work, then prints "forks N median_ms M max_ms X total_ms T" and exits 0.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
	if (argc != 3)
		return 2;
	int burst = strcmp(argv[1], "burst") == 0;
	long n = atol(argv[2]);
	printf("ready\n");
	fflush(stdout);
	char line[16];
	if (!fgets(line, sizeof(line), stdin))
		return 1;
	double start = now_ms();
	long count = 0;
	double *took = malloc(sizeof(double) * (burst ? 1 : n / 10 + 1));
	if (burst) {
		for (long i = 0; i < n; i++) {
			pid_t pid = fork();
			if (pid == 0)
				_exit(0);
			if (pid > 0)
				count++;
		}
		while (wait(NULL) > 0)
			;
		took[0] = now_ms() - start;
	} else {
		while (now_ms() - start < n) {
			double t0 = now_ms();
			pid_t pid = fork();
			if (pid == 0)
				_exit(0);
			if (pid > 0)
				waitpid(pid, NULL, 0);
			took[count++] = now_ms() - t0;
			usleep(10000);
		}
	}
	long k = burst ? 1 : count;
	qsort(took, k, sizeof(double), cmp);
	printf("forks %ld median_ms %.2f max_ms %.2f total_ms %.0f\n", count, took[k / 2], took[k - 1], now_ms() - start);
	return 0;
}
