// ebpf_alloc: an exact, logged set of calls to the functions every malloc
// replacement defines (jemalloc, tcmalloc, mimalloc, glibc), each from its
// own call site, for the eBPF provider's tests of other allocators. Built
// against one (linked, statically linked) or run with one preloaded.
//
//   ebpf_alloc N
//
// It prints "ready", then waits for a line on stdin (the tracer attaches
// meanwhile). It then makes N rounds of calls, logging each into a static
// array, and prints, without allocating, what ebpf_calls prints:
//
//   site NAME ADDR           the address of each call-site function
//   call SITE FUNC ADDR SIZE OLDADDR
//                            one line per call, in order (hex numbers)
//   done
//
// and waits for another line before it exits. The odd rounds leave two
// blocks live (leaks), the even ones none.
#define _GNU_SOURCE
#include <malloc.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rawout.h"
#include "sites.h"

int main(int argc, char **argv) {
	int n = argc > 1 ? atoi(argv[1]) : 10;
	ready();

	for (int i = 0; i < n; i++) {
		void *a = site_malloc(100 + i);
		void *b = site_calloc(10, 20 + i);
		a = site_realloc(a, 3000 + i);       // grow (moves, in a size-class allocator)
		void *c = site_realloc(0, 64);       // realloc(NULL, n) is a malloc
		void *e = site_posix_memalign(64, 200);
		void *f = site_aligned_alloc(64, 256);
		site_free(0); // not an event
		site_free(b);
		site_free(c);
		site_free(f);
		if (i % 2 == 0) { // the odd rounds leave these live
			site_free(a);
			site_free(e);
		}
	}

	print_sites();
	print_calls();
	done();
	return 0;
}
