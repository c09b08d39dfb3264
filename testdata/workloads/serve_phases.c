// serve_phases: three phases 50 ms apart whose blocks fall in known lifetime
// classes against a window that holds only the middle phase, for the tests
// of the index and of `heapscope serve`.
//
//   phase A: early_leak   5 x 2000, never freed          (AOFO in the window B)
//            early_freed  4 x 300, freed in phase B      (AOFI)
//   phase B: mid_temp     10 x 64, each freed at once    (AIFI, temporaries)
//            mid_kept     3 x 5000, freed in phase C     (AIFO)
//   phase C: late_leak    2 x 700, never freed
//
// Leaks: 11400 bytes in 7 blocks, early_leak the largest. Peak: 25000 bytes
// in 8 blocks, when mid_kept's blocks are live. Nothing uses stdio.
#include <stdlib.h>
#include <time.h>

void *volatile sink; // keeps GCC from deleting the malloc/free pairs
static void *leaks[7], *early[4], *kept[3];

static void pause_ms(long ms) {
	struct timespec ts = {0, ms * 1000000L};
	nanosleep(&ts, NULL);
}

__attribute__((noinline)) void early_leak(int i) { leaks[i] = malloc(2000); sink = leaks[i]; }
__attribute__((noinline)) void early_freed(int i) { early[i] = malloc(300); sink = early[i]; }
__attribute__((noinline)) void mid_temp(void) {
	void *p = malloc(64);
	sink = p;
	free(p);
}
__attribute__((noinline)) void mid_kept(int i) { kept[i] = malloc(5000); sink = kept[i]; }
__attribute__((noinline)) void late_leak(int i) { leaks[5 + i] = malloc(700); sink = leaks[5 + i]; }

int main(void) {
	for (int i = 0; i < 5; i++)
		early_leak(i);
	for (int i = 0; i < 4; i++)
		early_freed(i);
	pause_ms(50);
	for (int i = 0; i < 4; i++)
		free(early[i]);
	for (int i = 0; i < 10; i++)
		mid_temp();
	for (int i = 0; i < 3; i++)
		mid_kept(i);
	pause_ms(50);
	for (int i = 0; i < 3; i++)
		free(kept[i]);
	for (int i = 0; i < 2; i++)
		late_leak(i);
	return 0;
}
