// sites.h: the logged call sites ebpf_alloc and ebpf_calls share: one
// function per allocator entry point every malloc replacement defines, each
// logging its call (site, function, result, size, old block) into a static
// array, without allocating, for the program to print at the end
// (print_sites, print_calls).
#ifndef HEAPSCOPE_SITES_H
#define HEAPSCOPE_SITES_H

#include <stdint.h>
#include <stdlib.h>

#include "rawout.h"

#define NOINLINE __attribute__((noinline))

void *volatile sink; // keeps GCC from deleting calls whose result is unused

struct rec {
	const char *site, *func;
	void *addr, *old;
	size_t size;
};
static struct rec calls[1 << 16];
static int ncalls;

static void note(const char *site, const char *func, void *addr, size_t size, void *old) {
	if (ncalls < (int)(sizeof calls / sizeof calls[0]))
		calls[ncalls++] = (struct rec){site, func, addr, old, size};
}

NOINLINE void *site_malloc(size_t n) {
	void *p = malloc(n);
	note("site_malloc", "malloc", p, n, 0);
	sink = p;
	return p;
}

NOINLINE void *site_calloc(size_t n, size_t m) {
	void *p = calloc(n, m);
	size_t size = n * m;
	if (n && size / n != m)
		size = SIZE_MAX;
	note("site_calloc", "calloc", p, size, 0);
	sink = p;
	return p;
}

NOINLINE void *site_realloc(void *old, size_t n) {
	void *p = realloc(old, n);
	note("site_realloc", "realloc", p, n, old);
	sink = p;
	return p;
}

NOINLINE void *site_posix_memalign(size_t align, size_t n) {
	void *p = 0;
	if (posix_memalign(&p, align, n) != 0)
		p = 0;
	note("site_posix_memalign", "posix_memalign", p, n, 0);
	sink = p;
	return p;
}

NOINLINE void *site_aligned_alloc(size_t align, size_t n) {
	void *p = aligned_alloc(align, n);
	note("site_aligned_alloc", "aligned_alloc", p, n, 0);
	sink = p;
	return p;
}

NOINLINE void site_free(void *p) {
	free(p);
	if (p)
		note("site_free", "free", p, 0, 0);
	sink = 0;
}

// print_sites prints a "site NAME ADDR" line for each call site above.
static void print_sites(void) {
	site("site_malloc", (void *)site_malloc);
	site("site_calloc", (void *)site_calloc);
	site("site_realloc", (void *)site_realloc);
	site("site_posix_memalign", (void *)site_posix_memalign);
	site("site_aligned_alloc", (void *)site_aligned_alloc);
	site("site_free", (void *)site_free);
}

// print_calls prints the logged calls in order, one "call SITE FUNC ADDR
// SIZE OLDADDR" line each.
static void print_calls(void) {
	for (int i = 0; i < ncalls; i++)
		call_line(calls[i].site, calls[i].func, (uintptr_t)calls[i].addr, calls[i].size, (uintptr_t)calls[i].old);
}

#endif
