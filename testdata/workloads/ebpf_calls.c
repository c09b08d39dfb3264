// ebpf_calls: an exact, logged set of calls to every function of the C
// allocator, each from its own call site, for the eBPF provider's tests.
//
//   ebpf_calls N
//
// It prints "ready", then waits for a line on stdin (the tracer attaches
// meanwhile). It then makes N rounds of calls, logging each into a static
// array, and prints, without allocating:
//
//   site NAME ADDR           the address of each call-site function
//   call SITE FUNC ADDR SIZE OLDADDR
//                            one line per call, in order (hex numbers)
//   live ADDR SIZE           the blocks still allocated
//   done
//
// and waits for another line before it exits. free(NULL) is called every
// round and is not a call the tracer should report: it does nothing.
#define _GNU_SOURCE
#include <malloc.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sites.h"

NOINLINE void *site_reallocarray(void *old, size_t n, size_t m) {
	void *p = reallocarray(old, n, m);
	note("site_reallocarray", "reallocarray", p, n * m, old);
	sink = p;
	return p;
}

NOINLINE void *site_memalign(size_t align, size_t n) {
	void *p = memalign(align, n);
	note("site_memalign", "memalign", p, n, 0);
	sink = p;
	return p;
}

NOINLINE void *site_valloc(size_t n) {
	void *p = valloc(n);
	note("site_valloc", "valloc", p, n, 0);
	sink = p;
	return p;
}

NOINLINE void *site_pvalloc(size_t n) {
	void *p = pvalloc(n);
	note("site_pvalloc", "pvalloc", p, n, 0);
	sink = p;
	return p;
}

#include "rawout.h"

int main(int argc, char **argv) {
	int n = argc > 1 ? atoi(argv[1]) : 10;
	ready();

	for (int i = 0; i < n; i++) {
		void *a = site_malloc(100 + i);
		void *b = site_calloc(10, 20 + i);
		a = site_realloc(a, 300 + i);        // grow (may move)
		void *c = site_realloc(0, 64);       // realloc(NULL, n) is a malloc
		c = site_realloc(c, 0);              // realloc(p, 0) frees p, returns NULL
		void *d = site_reallocarray(0, 8, 16 + i);
		void *e = site_posix_memalign(64, 200);
		void *f = site_aligned_alloc(64, 256);
		void *g = site_memalign(32, 96);
		void *h = site_valloc(1000);
		void *k = site_pvalloc(1000);
		void *z = site_malloc(0);
		site_free(0); // not an event
		site_malloc(SIZE_MAX / 2);       // fails: an event with no block
		site_calloc(SIZE_MAX / 2, 4);    // overflows: fails
		site_free(b);
		site_free(d);
		site_free(f);
		site_free(h);
		site_free(z);
		if (i % 2 == 0) { // the odd rounds leave these live
			site_free(a);
			site_free(e);
			site_free(g);
			site_free(k);
		}
		(void)c;
	}

	print_sites();
	site("site_reallocarray", (void *)site_reallocarray);
	site("site_memalign", (void *)site_memalign);
	site("site_valloc", (void *)site_valloc);
	site("site_pvalloc", (void *)site_pvalloc);
	print_calls();
	done();
	return 0;
}
