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

// Output without malloc: stdio would allocate its buffer on first use.
static char out[1 << 22];
static size_t outn;

static void puts_(const char *s) {
	size_t n = strlen(s);
	if (outn + n < sizeof out) {
		memcpy(out + outn, s, n);
		outn += n;
	}
}

static void hex(uintptr_t v) {
	char b[20];
	int i = sizeof b;
	b[--i] = 0;
	do {
		b[--i] = "0123456789abcdef"[v & 15];
		v >>= 4;
	} while (v);
	puts_(" ");
	puts_(b + i);
}

static void flush(void) {
	size_t off = 0;
	while (off < outn) {
		ssize_t n = write(1, out + off, outn - off);
		if (n <= 0)
			_exit(4);
		off += n;
	}
	outn = 0;
}

static void wait_line(void) {
	char c;
	while (read(0, &c, 1) == 1 && c != '\n')
		;
}

static void site(const char *name, void *addr) {
	puts_("site ");
	puts_(name);
	hex((uintptr_t)addr);
	puts_("\n");
}

int main(int argc, char **argv) {
	int n = argc > 1 ? atoi(argv[1]) : 10;
	puts_("ready\n");
	flush();
	wait_line();

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

	site("site_malloc", (void *)site_malloc);
	site("site_calloc", (void *)site_calloc);
	site("site_realloc", (void *)site_realloc);
	site("site_posix_memalign", (void *)site_posix_memalign);
	site("site_aligned_alloc", (void *)site_aligned_alloc);
	site("site_free", (void *)site_free);
	for (int i = 0; i < ncalls; i++) {
		puts_("call ");
		puts_(calls[i].site);
		puts_(" ");
		puts_(calls[i].func);
		hex((uintptr_t)calls[i].addr);
		hex(calls[i].size);
		hex((uintptr_t)calls[i].old);
		puts_("\n");
		if (outn > sizeof out / 2)
			flush();
	}
	puts_("done\n");
	flush();
	wait_line();
	return 0;
}
