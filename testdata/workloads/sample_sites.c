// sample_sites: allocation sites of known totals, very different in size, for
// the accuracy test of sampling mode (cmd/heapscope TestSampleAccuracy).
// Each site is its own function; the program prints, for each, the bytes it
// allocated and leaked: "site <name> <allocated> <leaked>".
#include <stdio.h>
#include <stdlib.h>

static void *volatile sink;

#define MiB (1ul << 20)

static void report(const char *name, unsigned long alloc, unsigned long leak)
{
	printf("site %s %lu %lu\n", name, alloc, leak);
}

// 100 blocks of 4 MiB, freed: large blocks, each almost surely sampled.
__attribute__((noinline)) static void site_large(void)
{
	for (int i = 0; i < 100; i++) {
		sink = malloc(4 * MiB);
		free(sink);
	}
	report("site_large", 400 * MiB, 0);
}

// 6.4 million blocks of 64 bytes, freed at once: the churn sampling is for.
__attribute__((noinline)) static void site_small(void)
{
	unsigned long n = 400 * MiB / 64;
	for (unsigned long i = 0; i < n; i++) {
		sink = malloc(64);
		free(sink);
	}
	report("site_small", 400 * MiB, 0);
}

// 102400 blocks of 4 KiB, freed.
__attribute__((noinline)) static void site_medium(void)
{
	unsigned long n = 400 * MiB / 4096;
	for (unsigned long i = 0; i < n; i++) {
		sink = malloc(4096);
		free(sink);
	}
	report("site_medium", 400 * MiB, 0);
}

// Sizes from 100 bytes to 200 KB, freed.
__attribute__((noinline)) static void site_mixed(void)
{
	unsigned long total = 0;
	for (unsigned long i = 0; total < 400 * MiB; i++) {
		size_t n = 100 + (i * 7919) % 200000;
		sink = malloc(n);
		free(sink);
		total += n;
	}
	report("site_mixed", total, 0);
}

// A site too small to estimate well: 1000 blocks of 64 bytes.
__attribute__((noinline)) static void site_tiny(void)
{
	for (int i = 0; i < 1000; i++) {
		sink = malloc(64);
		free(sink);
	}
	report("site_tiny", 64000, 0);
}

// 64 blocks of 256 KiB, leaked.
__attribute__((noinline)) static void leak_large(void)
{
	for (int i = 0; i < 64; i++)
		sink = malloc(256 * 1024);
	report("leak_large", 16 * MiB, 16 * MiB);
}

// 819200 blocks of 512 bytes; one in four leaked (100 MiB).
__attribute__((noinline)) static void leak_small(void)
{
	unsigned long n = 400 * MiB / 512;
	for (unsigned long i = 0; i < n; i++) {
		void *p = malloc(512);
		sink = p;
		if (i % 4 != 0)
			free(p);
	}
	report("leak_small", 400 * MiB, 100 * MiB);
}

// 500 blocks grown by realloc twice, then freed: realloc of sampled and
// unsampled blocks. Nothing leaks.
__attribute__((noinline)) static void site_realloc(void)
{
	for (int i = 0; i < 500; i++) {
		void *p = malloc(100);
		p = realloc(p, 3000);
		p = realloc(p, 100000);
		sink = p;
		free(p);
	}
	report("site_realloc", 500ul * (100 + 3000 + 100000), 0);
}

int main(void)
{
	site_large();
	site_small();
	site_medium();
	site_mixed();
	site_tiny();
	leak_large();
	leak_small();
	site_realloc();
	return 0;
}
