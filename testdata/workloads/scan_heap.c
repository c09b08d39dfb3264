// scan_heap: a large heap for the scan benchmark (bench/scanbench).
//
//   scan_heap MIB PTRPCT
//
// It allocates blocks of 16 to 1024 bytes until MIB MiB are live, held by a
// global table (itself a heap block). Each block's words are pointers to
// other blocks (PTRPCT percent of them, a fifth of those into the block's
// interior), small integers (40 percent) or random values. One block in ten
// is then dropped from the table, so that some are lost. It prints
//
//   block ADDR SIZE     for every live block
//   ready PID
//
// and waits for a line on standard input. Built with -fsanitize=leak, it
// first times LeakSanitizer's own check (__lsan_do_leak_check) and prints
// "lsan_check_ns N" before "ready" (run it with LSAN_OPTIONS=exitcode=0 so
// that the leaks found do not end it, and symbolize=0:max_leaks=1 so that
// the report costs little).
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

extern void __lsan_do_leak_check(void) __attribute__((weak));

void **table;
size_t ntable;

static uint64_t rng = 88172645463325252ULL;
static uint64_t next(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

int main(int argc, char **argv)
{
	if (argc != 3)
		return 2;
	size_t want = (size_t)atol(argv[1]) << 20;
	int pct = atoi(argv[2]);
	size_t cap = want / 16 + 1, total = 0;
	size_t *sizes = malloc(cap * sizeof *sizes);
	table = malloc(cap * sizeof *table);
	while (total < want && ntable < cap) {
		size_t n = 16 + 8 * (next() % 127);
		table[ntable] = malloc(n);
		sizes[ntable++] = n;
		total += n;
	}
	for (size_t i = 0; i < ntable; i++) {
		uint64_t *w = table[i];
		for (size_t k = 0; k < sizes[i] / 8; k++) {
			uint64_t r = next() % 100;
			if (r < (uint64_t)pct) {
				size_t j = next() % ntable;
				char *p = table[j];
				if (next() % 5 == 0)
					p += 8 * (next() % (sizes[j] / 8));
				w[k] = (uint64_t)p;
			} else if (r < (uint64_t)pct + 40) {
				w[k] = next() % 1000;
			} else {
				w[k] = next();
			}
		}
	}
	for (size_t i = 0; i < ntable; i++)
		printf("block %p %zu\n", table[i], sizes[i]);
	printf("block %p %zu\n", (void *)table, cap * sizeof *table);
	printf("block %p %zu\n", (void *)sizes, cap * sizeof *sizes);
	for (size_t i = 0; i < ntable; i += 10)
		table[i] = NULL;
	if (__lsan_do_leak_check) {
		struct timespec a, b;
		clock_gettime(CLOCK_MONOTONIC, &a);
		__lsan_do_leak_check();
		clock_gettime(CLOCK_MONOTONIC, &b);
		printf("lsan_check_ns %lld\n", (long long)(b.tv_sec - a.tv_sec) * 1000000000LL + (b.tv_nsec - a.tv_nsec));
	}
	printf("ready %d\n", getpid());
	fflush(stdout);
	char line[16];
	if (fgets(line, sizeof line, stdin))
		return 0;
	return 0;
}
