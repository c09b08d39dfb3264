// mmap_ranges: anonymous mappings split and trimmed as allocators and
// runtimes do, with the exact bytes left mapped as the truth.
//
//   mmap_ranges
//
// It maps twice the size it wants and trims both ends to align (as
// jemalloc, Go and the JVM do), punches a hole in the middle of a mapping,
// maps with MAP_FIXED over part of a live mapping, grows and shrinks one
// with mremap, trims a tail, and unmaps one whole. It prints
//
//   live B      the bytes of its mappings still mapped at exit
//   calls N     the mmap, munmap and mremap calls it made
//
// and exits without unmapping the rest: they are its leaks. Its calls lie
// between two markers, munmaps of one page at 0x10000 (before) and 0x20000
// (after), where nothing is mapped: a tracer that also sees the dynamic
// loader's and libc's own mappings can tell the program's.
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static long live, calls;
static size_t pg;

static void *map(void *at, size_t n, int flags) {
	calls++;
	void *p = mmap(at, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | flags, -1, 0);
	if (p == MAP_FAILED) {
		perror("mmap");
		_exit(1);
	}
	return p;
}

static void unmap(void *p, size_t n) {
	calls++;
	if (munmap(p, n) != 0) {
		perror("munmap");
		_exit(1);
	}
}

int main(void) {
	pg = (size_t)sysconf(_SC_PAGESIZE);
	munmap((void *)0x10000, pg);
	// Aligned: map twice the size, trim both ends.
	for (int i = 0; i < 4; i++) {
		size_t size = 64 * pg;
		char *p = map(NULL, 2 * size, 0);
		char *a = (char *)(((uintptr_t)p + size - 1) & ~(uintptr_t)(size - 1));
		if (a > p)
			unmap(p, (size_t)(a - p));
		if (p + 2 * size > a + size)
			unmap(a + size, (size_t)(p + 2 * size - (a + size)));
		live += size;
	}
	// A hole in the middle.
	char *q = map(NULL, 16 * pg, 0);
	unmap(q + 4 * pg, 4 * pg);
	live += 12 * pg;
	// MAP_FIXED over part of a live mapping: the pages are replaced, not
	// added.
	char *r = map(NULL, 16 * pg, 0);
	map(r + 2 * pg, 4 * pg, MAP_FIXED);
	live += 16 * pg;
	// Grown by mremap (it may move), then shrunk in place.
	char *s = map(NULL, 8 * pg, 0);
	calls++;
	char *s2 = mremap(s, 8 * pg, 32 * pg, MREMAP_MAYMOVE);
	if (s2 == MAP_FAILED) {
		perror("mremap");
		return 1;
	}
	calls++;
	if (mremap(s2, 32 * pg, 4 * pg, 0) != s2) {
		perror("mremap");
		return 1;
	}
	live += 4 * pg;
	// A tail trimmed.
	char *t = map(NULL, 8 * pg, 0);
	unmap(t + 6 * pg, 2 * pg);
	live += 6 * pg;
	// One unmapped whole.
	char *u = map(NULL, 4 * pg, 0);
	unmap(u, 4 * pg);
	munmap((void *)0x20000, pg);

	char buf[64];
	int n = snprintf(buf, sizeof buf, "live %ld\ncalls %ld\n", live, calls);
	if (write(1, buf, (size_t)n) != n)
		return 1;
	return 0;
}
