// symbolize_inline: a call stack that runs through a static function and two
// always_inline functions, for the symbolizer's tests. Lines the tests check
// carry a marker comment, LINE:name, that the tests find by grepping.
//
//   symbolize_inline
//
// It prints its stack as return addresses, innermost first, one line each:
//
//   pc N 0xADDR
//
// (N counts from 0 = the return address in capture's caller), then the
// addresses of a few libc functions as dlsym finds them ("sym NAME 0xADDR"),
// then "ready", and waits for stdin to close so that the test can read its
// /proc/PID/maps while it lives.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <execinfo.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

void *volatile sink; // keeps GCC from deleting the allocations

// capture prints the return addresses above its own frame.
__attribute__((noinline)) static void capture(void) {
	void *pcs[32];
	int n = backtrace(pcs, 32);
	// pcs[0] is the return address into capture itself (from backtrace).
	for (int i = 1; i < n; i++)
		printf("pc %d %p\n", i - 1, pcs[i]);
}

static inline __attribute__((always_inline)) void *alloc_inner(size_t n) {
	void *p = malloc(n);
	sink = p;
	capture(); // LINE:alloc_site
	return p;
}

static inline __attribute__((always_inline)) void *alloc_outer(size_t n) {
	void *p = alloc_inner(n * 2); // LINE:call_inner
	sink = p;
	return p;
}

__attribute__((noinline)) static void *make_buffer(size_t n) {
	void *p = alloc_outer(n + 1); // LINE:call_outer
	sink = p;
	return p;
}

// run_workload is exported: with -rdynamic it is in .dynsym even when the
// binary is stripped.
__attribute__((noinline)) void *run_workload(size_t n) {
	void *p = make_buffer(n); // LINE:call_static
	sink = p;
	return p;
}

int main(void) {
	void *p = run_workload(64); // LINE:call_run
	sink = p;
	const char *names[] = {"malloc", "free", "calloc", "realloc"};
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
		printf("sym %s %p\n", names[i], dlsym(RTLD_DEFAULT, names[i]));
	printf("ready\n");
	fflush(stdout);
	char c;
	while (read(0, &c, 1) > 0)
		;
	free(p);
	return 0;
}
