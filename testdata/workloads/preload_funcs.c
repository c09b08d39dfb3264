// preload_funcs: one call to every wrapped function, with sizes the test
// knows, from main. It prints the addresses it got, one "name address" a
// line, so that the test can match them.
#define _GNU_SOURCE
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

void *volatile sink;

static void show(const char *name, void *p)
{
	printf("%s %#lx\n", name, (unsigned long)p);
	sink = p;
}

int main(void)
{
	void *p = malloc(101);
	show("malloc", p);
	void *c = calloc(7, 11);
	show("calloc", c);
	void *r = realloc(p, 202);
	show("realloc", r);
	void *ra = reallocarray(r, 3, 101);
	show("reallocarray", ra);
	void *pm = NULL;
	if (posix_memalign(&pm, 64, 404) != 0)
		return 1;
	show("posix_memalign", pm);
	void *aa = aligned_alloc(128, 512);
	show("aligned_alloc", aa);
	void *ma = memalign(256, 606);
	show("memalign", ma);
	void *va = valloc(707);
	show("valloc", va);
	void *pv = pvalloc(808);
	show("pvalloc", pv);
	void *mm = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	show("mmap", mm);
	void *mr = mremap(mm, 8192, 16384, MREMAP_MAYMOVE);
	show("mremap", mr);
	munmap(mr, 16384);
	void *big = malloc((size_t)1 << 62); // fails: an allocation with Addr 0
	show("failed", big);
	free(c);
	free(ra);
	free(pm);
	free(aa);
	free(ma);
	free(va);
	free(pv);
	free(NULL);
	fflush(stdout);
	return 0;
}
