// preload_rechain: realloc chains, and plain mallocs of the same sizes, of
// known totals, for the accuracy of sampling with reallocs in both
// providers (internal/preload and internal/ebpf TestSampleReallocChains).
//
//   preload_rechain RATE [wait]
//
// With "wait" it says "ready", then reads a line from stdin. Three sites, each a
// function in a section of its own, code_NAME (the linker's __start_ and
// __stop_ symbols give the range of its code):
//   site_chain  20000 times: malloc(16), realloc doubling to 64 KiB, free
//   site_plain  20000 times: malloc and free of each of those 13 sizes
//   site_leak   2000 times: malloc(16), realloc doubling to 8 KiB, kept
// It prints for each "site NAME START END BYTES BYTES_VAR LEAKED
// LEAKED_VAR": the range of its code, the bytes it allocated and leaked,
// and the variance of their estimates from a sample at RATE (each call of
// S bytes sampled with probability p = 1 - exp(-S/RATE) on its own and
// weighed S/p: a variance of S^2 (1-p)/p each), then "done".
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHAINS 20000
#define LEAKS 2000

void *volatile sink;
static void *kept[LEAKS];
static double rate;

struct truth {
	double bytes, bytes_var, leaked, leaked_var;
};

static void call(struct truth *t, double size, int leaked)
{
	double p = -expm1(-size / rate), v = size * size * (1 - p) / p;
	t->bytes += size;
	t->bytes_var += v;
	if (leaked) {
		t->leaked += size;
		t->leaked_var += v;
	}
}

#define SITE(name) __attribute__((noinline, section("code_" #name))) static void name(struct truth *t)

SITE(site_chain)
{
	for (int i = 0; i < CHAINS; i++) {
		void *p = malloc(16);
		call(t, 16, 0);
		for (size_t n = 32; n <= 65536; n *= 2) {
			p = realloc(p, n);
			sink = p;
			call(t, (double)n, 0);
		}
		free(p);
	}
}

SITE(site_plain)
{
	for (int i = 0; i < CHAINS; i++)
		for (size_t n = 16; n <= 65536; n *= 2) {
			void *p = malloc(n);
			sink = p;
			free(p);
			call(t, (double)n, 0);
		}
}

SITE(site_leak)
{
	for (int i = 0; i < LEAKS; i++) {
		void *p = malloc(16);
		call(t, 16, 0);
		for (size_t n = 32; n <= 8192; n *= 2) {
			p = realloc(p, n);
			call(t, (double)n, n == 8192);
		}
		kept[i] = p;
	}
	sink = kept;
}

#define REPORT(name)                                                                                                   \
	do {                                                                                                           \
		extern char __start_code_##name[], __stop_code_##name[];                                              \
		struct truth t;                                                                                        \
		memset(&t, 0, sizeof t);                                                                               \
		name(&t);                                                                                              \
		printf("site %s %#lx %#lx %.0f %.6g %.0f %.6g\n", #name, (unsigned long)__start_code_##name,          \
		       (unsigned long)__stop_code_##name, t.bytes, t.bytes_var, t.leaked, t.leaked_var);               \
	} while (0)

int main(int argc, char **argv)
{
	if (argc < 2 || (rate = atof(argv[1])) <= 0)
		return 2;
	if (argc > 2 && strcmp(argv[2], "wait") == 0) {
		printf("ready\n"); /* its libraries are mapped: a tracer may attach */
		fflush(stdout);
		char line[16];
		if (!fgets(line, sizeof line, stdin))
			return 1;
	}
	REPORT(site_chain);
	REPORT(site_plain);
	REPORT(site_leak);
	printf("done\n");
	fflush(stdout);
	return 0;
}
