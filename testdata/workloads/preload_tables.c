// preload_tables: main -> site_a -> site_b -> malloc, N times with a pause
// between, meant to be built with -O2 -fomit-frame-pointer: only CFI
// unwinding recovers the whole chain, and the later allocations are walked
// with the unwind tables the collector sent meanwhile.
#include <stdlib.h>
#include <time.h>

void *volatile sink;
volatile long depth;

__attribute__((noinline)) long site_b(long n)
{
	void *p = malloc(n);
	sink = p;
	free(p);
	return depth + 1; // work after the call: no tail call
}

__attribute__((noinline)) long site_a(long n)
{
	long r = site_b(n + 1);
	depth = r;
	return r + 1;
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 100;
	long r = 0;
	struct timespec ts = {0, 2000000};
	for (int i = 0; i < n; i++) {
		r += site_a(4096);
		nanosleep(&ts, NULL);
	}
	return r == 0;
}
