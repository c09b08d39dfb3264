// attach_start allocates and frees one block every 200 microseconds for
// argv[1] seconds (default 1), then exits 0: a short-lived program to
// attach to while it runs (the eBPF attach's start-up time, and a program
// of one second attached a tenth of a second after its start).
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

volatile void *sink;

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	double secs = argc > 1 ? atof(argv[1]) : 1.0, end = now() + secs;
	while (now() < end) {
		sink = malloc(48);
		free((void *)sink);
		usleep(200);
	}
	return 0;
}
