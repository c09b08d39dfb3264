// inline_sites: allocation sites behind always_inline helpers, built -O2 -g,
// so that stacks carry inlined frames; one line calls the same helper
// inlined and out of line, two stacks that differ only in the inlining.
//
//   inline_sites [N [wait]]
//
// With wait, it prints "ready" once done and exits when stdin closes.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void *volatile sink;

void *volatile held;

// grow is inlined where it is called, and called out of line through
// grow_ptr: the same function, file and line, inlined or not.
static inline __attribute__((always_inline)) void *grow(size_t n) {
	void *p = malloc(n);
	held = p; // no tail call: the out-of-line frame stays
	return p;
}

void *(*volatile grow_ptr)(size_t) = grow;

static inline __attribute__((always_inline)) char *copy(const char *s) {
	size_t n = strlen(s) + 1;
	char *p = malloc(n);
	memcpy(p, s, n);
	return p;
}

__attribute__((noinline)) void leak_some(int i) {
	sink = (i & 1) ? grow(32 + i % 7) : grow_ptr(32 + i % 7);
}

__attribute__((noinline)) void churn(int n) {
	for (int i = 0; i < n; i++) {
		char *p = copy("temporary string");
		sink = p;
		free(p);
	}
}

__attribute__((noinline)) void peak(int n) {
	void **v = calloc(n, sizeof *v);
	for (int i = 0; i < n; i++)
		v[i] = grow(256);
	for (int i = 0; i < n; i++)
		free(v[i]);
	free(v);
}

int main(int argc, char **argv) {
	int n = argc > 1 ? atoi(argv[1]) : 1000;
	for (int i = 0; i < n; i++)
		leak_some(i);
	churn(n * 10);
	peak(n);
	void *r = NULL;
	for (int i = 1; i < 50; i++)
		r = realloc(r, i * 100);
	sink = r;
	if (argc > 2) {
		printf("ready\n");
		fflush(stdout);
		char c;
		while (read(0, &c, 1) > 0)
			;
	}
	return 0;
}
