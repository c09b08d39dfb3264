// diff_leak: two runs to compare with `heapscope diff`.
//
//   diff_leak N
//
// Each function is one call site; noinline keeps it a frame of its own.
// Nothing uses stdio, so libc allocates no buffers of its own.
//
//   grow_leak:   N blocks of 1000 bytes, never freed    (the site that changes with N)
//   fixed_leak:  2 blocks of 500 bytes, never freed     (the same in every run)
//   churn_site:  100 malloc(64)+free pairs              (temporaries, the same in every run)
//   peak_site:   5 blocks of 20000 bytes live together, then freed
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void *volatile sink; // keeps GCC from deleting the malloc/free pairs

__attribute__((noinline)) void grow_leak(void) {
	sink = malloc(1000);
}

__attribute__((noinline)) void fixed_leak(void) {
	sink = malloc(500);
}

__attribute__((noinline)) void churn_site(void) {
	void *p = malloc(64);
	sink = p;
	free(p);
}

__attribute__((noinline)) void peak_site(void) {
	void *b[5];
	for (int i = 0; i < 5; i++) {
		b[i] = malloc(20000);
		memset(b[i], i, 20000);
		sink = b[i];
	}
	for (int i = 0; i < 5; i++)
		free(b[i]);
}

int main(int argc, char **argv) {
	int n = argc > 1 ? atoi(argv[1]) : 1;
	peak_site(); // first, so that the leaks are not live at the peak
	for (int i = 0; i < 2; i++)
		fixed_leak();
	for (int i = 0; i < 100; i++)
		churn_site();
	for (int i = 0; i < n; i++)
		grow_leak();
	write(1, "done\n", 5);
	return 0;
}
